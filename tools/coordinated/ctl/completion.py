"""`coordinated completion bash|zsh|fish`: the shell completion script, from click."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

COMPLETE_VARIABLE = "_COORDINATED_COMPLETE"


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Prints the completion script for SHELL. bash: `eval "$(coordinated completion bash)"` in ~/.bashrc;
    zsh: the same in ~/.zshrc; fish: `coordinated completion fish > ~/.config/fish/completions/coordinated.fish`."""
    from coordinated.cli import cli  # the whole command tree, which imports this module lazily

    completer = get_completion_class(shell)
    assert completer is not None  # every choice is one of click's shells
    click.echo(completer(cli, {}, "coordinated", COMPLETE_VARIABLE).source())
