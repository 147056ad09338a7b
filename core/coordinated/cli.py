"""The `coordinated` command: one entry point for the sidecar, the demo, the audit job, the operator and the
command-line client.

Each subcommand lives in its own package and is imported lazily, so that running a node never imports
pyspark or kopf. The programs that parse their own arguments (`node`, `audit`, ...) get the rest of the
command line as it is; the client's commands (`kv`, `lock`, `endpoint`, ...) are click groups, which give
their help, their exit codes and shell completion (`coordinated completion bash|zsh|fish`).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

# subcommand -> (module exposing `main(argv) -> int`, one-line help): programs with their own parsers.
PROGRAMS: dict[str, tuple[str, str]] = {
    "node": ("coordinated.sidecar.cli", "run one sidecar node in the foreground"),
    "demo": ("coordinated.tools.demo", "run a local multi-node cluster demo, then audit it"),
    "node-tool": ("coordinated.sidecar.node_tool", "recover a stopped node after a quorum loss (unsafe-bootstrap)"),
    "audit": ("coordinated.audit.cli", "audit history files against the protocol's safety invariants"),
    "operator": ("coordinated.operator.cli", "run the Kopf operator for CoordinatedCluster resources"),
    "simulate": ("coordinated.simulation.cli", "run the deterministic simulator"),
}

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
    "auth": ("coordinated.ctl.auth", "auth", "access control: whoami, role, role-mapping, quota"),
    "local": ("coordinated.ctl.local", "local", "a local 3-node cluster in the background: up, down"),
    "completion": ("coordinated.ctl.completion", "completion", "print the shell completion script (bash, zsh, fish)"),
}


class LazyGroup(click.Group):
    """Imports a subcommand's module only when that subcommand runs (or when completion or help needs it)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*PROGRAMS, *CLIENT_COMMANDS]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in PROGRAMS:
            return program_command(name)
        if name in CLIENT_COMMANDS:
            module, attribute, _ = CLIENT_COMMANDS[name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing from the tables above, without importing every module.
        rows = [(name, text) for name, (_, text) in PROGRAMS.items()]
        rows += [(name, text) for name, (_, _, text) in CLIENT_COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def program_command(name: str) -> click.Command:
    """A subcommand that hands the rest of the command line to a program's own `main(argv)`."""
    module_name, help_text = PROGRAMS[name]

    def run(args: tuple[str, ...]) -> None:
        module = importlib.import_module(module_name)
        raise click.exceptions.Exit(int(module.main(list(args)) or 0))

    return click.Command(
        name,
        callback=run,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        help=help_text,
        short_help=help_text,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


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
