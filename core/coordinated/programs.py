"""How each deployable's programs join the `coordinated` command, without the command knowing them.

A distribution registers each of its programs in the entry-point group `coordinated.commands` of its
pyproject.toml, naming a light click command that `program` makes:

    [project.entry-points."coordinated.commands"]
    node = "coordinated.sidecar.commands:node"

    @program("run one sidecar node in the foreground")
    def node() -> Main:
        from coordinated.sidecar.cli import main  # imported only when `coordinated node` runs
        return main

The command says what the program is for (the listing of `coordinated --help` and shell completion); the
program itself, and everything it imports, is loaded only when it runs, and gets the rest of the command line
as it is: it parses its own options with click (`coordinated node --help`) and returns its exit code from
`main(argv)`, which `run_program` makes of its command.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

COMMAND_GROUP = "coordinated.commands"  # the entry-point group

Main = Callable[[list[str]], int]  # a program: its command line (without the program's name) -> its exit code


def program(help_text: str) -> Callable[[Callable[[], Main]], click.Command]:
    """A command named after the decorated function (`node_tool` is `node-tool`) that runs the program the
    function returns, with the rest of the command line."""

    def make(load: Callable[[], Main]) -> click.Command:
        def run(args: tuple[str, ...]) -> None:
            raise click.exceptions.Exit(int(load()(list(args)) or 0))

        return click.Command(
            load.__name__.replace("_", "-"),
            callback=run,
            params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
            help=help_text,
            short_help=help_text,
            add_help_option=False,  # the program's own --help answers
            context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        )

    return make


def run_program(command: click.Command, argv: list[str] | None, prog_name: str, obj: object = None) -> int:
    """Runs a program's click command as its `main(argv)` (`argv` None: the process's own arguments), with `obj`
    as its context's object: the exit code its callback returns. `--help` answers 0; a usage error exits 2 after
    its message (SystemExit), as every program's parser always has."""
    try:
        args = sys.argv[1:] if argv is None else argv
        result = command.main(args, prog_name=prog_name, standalone_mode=False, obj=obj)
    except click.ClickException as error:
        error.show()
        raise SystemExit(error.exit_code) from None
    except click.Abort:
        click.echo("Aborted!", err=True)
        raise SystemExit(1) from None
    return int(result or 0)
