"""The `coordinated` command: the command-line client, and the programs of every deployable.

The command-line client's commands (`kv`, `lock`, `endpoint`, ...: `coordinated.ctl`) are this command's own,
listed below and imported only when they run, so that `coordinated kv get` starts fast: it imports no other
deployable, nor the package metadata. Every other program (`node`, `audit`, `operator`, ...) is registered by
its own distribution in the entry-point group `coordinated.commands` (see `coordinated.programs`), and looked up
only for a name that is not the client's, for the listing of `--help` and for shell completion; this command
names none of them.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

import click

from coordinated.programs import COMMAND_GROUP

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint


# subcommand -> (module, attribute: a click command, one-line help): the command-line client (docs/cli.md).
CLIENT_COMMANDS: dict[str, tuple[str, str, str]] = {
    "kv": (
        "coordinated.ctl.kv",
        "kv",
        "read, list, watch and write keys: get, list, put, del, txn, watch, export, import",
    ),
    "lock": (
        "coordinated.ctl.recipes",
        "lock",
        "run a command while holding a lock (fencing token in $COORDINATED_LOCK_TOKEN)",
    ),
    "elect": ("coordinated.ctl.recipes", "elect", "campaign for leadership, or --listen to the leader"),
    "session": ("coordinated.ctl.sessions", "session", "TTL sessions: grant, keepalive, revoke, list"),
    "endpoint": ("coordinated.ctl.endpoint", "endpoint", "the nodes' status and health as a table"),
    "member": ("coordinated.ctl.member", "member", "voting members: list, exclude, clear-exclusions"),
    "snapshot": ("coordinated.ctl.snapshot", "snapshot", "snapshots: save, restore, list, delete"),
    "settings": ("coordinated.ctl.settings", "settings", "the cluster's dynamic settings: get, set"),
    "local": ("coordinated.ctl.local", "local", "a local 3-node cluster in the background: up, down"),
    "completion": ("coordinated.ctl.completion", "completion", "print the shell completion script (bash, zsh, fish)"),
}


def registered_programs() -> dict[str, EntryPoint]:
    """The programs that installed distributions register, by name (a client command's name is the client's)."""
    from importlib.metadata import entry_points  # late: the metadata is slow to import, and kv get needs none

    found: dict[str, EntryPoint] = {}
    for entry in entry_points(group=COMMAND_GROUP):
        if entry.name not in CLIENT_COMMANDS:
            found.setdefault(entry.name, entry)
    return found


def load_program(entry: EntryPoint) -> click.Command:
    command = entry.load()
    if not isinstance(command, click.Command):
        raise click.ClickException(f"entry point [{entry.name} = {entry.value}] of {COMMAND_GROUP} is not a command")
    return command


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand runs (or when completion or help needs it)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*registered_programs(), *CLIENT_COMMANDS]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in CLIENT_COMMANDS:
            module, attribute, _ = CLIENT_COMMANDS[name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        entry = registered_programs().get(name)
        return load_program(entry) if entry is not None else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The client's from the table above, without importing them; each program's from its light command.
        rows = [(name, load_program(entry).get_short_help_str()) for name, entry in registered_programs().items()]
        rows += [(name, text) for name, (_, _, text) in CLIENT_COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from coordinated.release import describe

    click.echo(describe())
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Print the release and wire version of this installation, and exit.",
)
def cli() -> None:
    """The `coordinated` command: nodes, tools and the command-line client (docs/cli.md)."""


def main(argv: list[str] | None = None) -> int:
    return run_command(cli, list(sys.argv[1:] if argv is None else argv), "coordinated")


def run_command(command: click.Command, args: list[str], prog_name: str) -> int:
    """Runs a click command and returns its exit code; a failure is its one-line message on stderr."""
    try:
        # Not click's standalone mode, which ends with sys.exit: the caller gets the exit code.
        result: Any = command.main(args, prog_name=prog_name, standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        return 1
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
