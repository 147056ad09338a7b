"""`coordinated node-tool`: offline changes to a STOPPED node, when no master can make them.

`unsafe-bootstrap` makes the node the sole voter of a new cluster with its keys and settings when a quorum of
master-eligible nodes is lost; `detach-cluster` lets a node of the old cluster join that new one;
`remove-settings` drops persistent settings that keep a cluster from working. The state changes are
`coordination.offline_recovery`'s;
this shell holds the data directory's lock, applies the node's own startup checks, asks for confirmation,
records the change in the node's history, and writes the new record through `FilePersistedState`.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import click

from coordinated.coordination.offline_recovery import (
    Plan,
    ToolRefusal,
    plan_detach,
    plan_remove_settings,
    plan_unsafe_bootstrap,
)
from coordinated.coordination.recovery import Refuse, StartFresh, decide_startup
from coordinated.programs import run_program
from coordinated.sidecar.events.history import HistoryWriter
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.events.history_settings import HISTORY_SEGMENT_SIZE
from coordinated.sidecar.storage.persistence import (
    HISTORY_DIR,
    DataDirError,
    DataDirLock,
    FilePersistedState,
    stored_cluster_name,
    survey_data_dir,
)

EXIT_DONE = 0
EXIT_ABORTED = 1  # not confirmed
EXIT_USAGE = 2
EXIT_REFUSED = 3  # the data directory or the node's state does not allow it
PROG = "coordinated node-tool"


@dataclass(frozen=True)
class Terminal:
    """Where the tool asks and tells (the process's own by default; tests give theirs)."""

    stdin: TextIO | None
    stdout: TextIO


@click.group("node-tool", help=__doc__.splitlines()[0], context_settings={"help_option_names": ["-h", "--help"]})
def node_tool() -> None:
    pass


def _action(name: str, help_text: str, *, settings: bool = False) -> None:
    """One action of the tool: on a stopped node's data directory, confirmed unless --yes."""

    def act(data_dir: Path, yes: bool, settings: tuple[str, ...] = ()) -> int:
        terminal = click.get_current_context().find_object(Terminal) or Terminal(sys.stdin, sys.stdout)
        try:
            return run(name, data_dir, yes, terminal.stdin, terminal.stdout, settings)
        except (DataDirError, ToolRefusal) as error:
            print(f"{PROG}: error: refusing to {name}: {error}", file=sys.stderr)
            return EXIT_REFUSED

    params: list[click.Parameter] = [
        click.Option(
            ["--data-dir"], required=True, type=click.Path(path_type=Path), help="the stopped node's data directory"
        ),
        click.Option(["--yes"], is_flag=True, help="do not ask for confirmation"),
    ]
    if settings:
        params.append(click.Argument(["settings"], nargs=-1, required=True, metavar="SETTING..."))
    node_tool.add_command(click.Command(name, callback=act, params=params, help=help_text, short_help=help_text))


_action("unsafe-bootstrap", "make this stopped node the sole voter of a new cluster, keeping its state")
_action("detach-cluster", "let this stopped node join a new cluster (for example an unsafe-bootstrapped one)")
_action(
    "remove-settings",
    "remove persistent settings from this stopped node's copy of the cluster state (SETTING: a name; `*` matches "
    "any text)",
    settings=True,
)


def main(argv: list[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    return run_program(
        node_tool, argv, PROG, obj=Terminal(stdin if stdin is not None else sys.stdin, stdout or sys.stdout)
    )


def run(
    action: str, data_dir: Path, yes: bool, stdin: TextIO | None, out: TextIO, patterns: tuple[str, ...] = ()
) -> int:
    if not data_dir.is_dir():
        raise DataDirError(f"data directory [{data_dir}] does not exist")
    lock = DataDirLock(data_dir)  # refuses while a node runs on it
    try:
        persisted = _open_checked(data_dir)
        try:
            plan = _plan(action, persisted, patterns)
            print(plan.description, file=out)
            if not yes and not _confirmed(stdin, out):
                print("aborted: nothing was changed", file=out)
                return EXIT_ABORTED
            # The event first: its marks hold for the old record and the new one, so a crash in between leaves
            # a directory that the node loads, and the tool can be run again.
            history = HistoryWriter(data_dir / HISTORY_DIR, HISTORY_SEGMENT_SIZE.required_default(), fsync=True)
            try:
                seq = history.append_fields(plan.event)
                failure = history.write_failure
            finally:
                history.close()
            if failure:
                raise DataDirError(f"cannot record the {action} in the history, so nothing was changed: {failure}")
            event = {**plan.event, "seq": seq}
            persisted.replace_record(plan.current_term, plan.state)
        finally:
            persisted.close()
    finally:
        lock.release()
    print(
        f"done: node [{event['node']}] now holds cluster UUID [{event['cluster_uuid']}] "
        f"(term {event['term']}, version {event['version']}); recorded as history event {event['seq']} "
        f"[{event['type']}]. Start the node as usual.",
        file=out,
    )
    return EXIT_DONE


def _open_checked(data_dir: Path) -> FilePersistedState:
    """The node's own startup decision, with the node's own refusal message; never creates a node."""
    cluster_name = stored_cluster_name(data_dir, read_history_summary)
    view = survey_data_dir(data_dir, cluster_name or "", read_history_summary)
    decision = decide_startup(view)
    if isinstance(decision, Refuse):
        raise DataDirError(decision.reason)
    if isinstance(decision, StartFresh) or cluster_name is None:
        raise DataDirError(
            f"[{data_dir}] holds no node state (no valid coordination-state record): it is not the data directory "
            "of a node that has run, or one written by an older version (start and stop the node once first)"
        )
    return FilePersistedState(data_dir, cluster_name, read_history=read_history_summary)


def _plan(action: str, persisted: FilePersistedState, patterns: tuple[str, ...] = ()) -> Plan:
    state, node_id, term = persisted.last_accepted_state, persisted.node_id, persisted.current_term
    if action == "unsafe-bootstrap":
        return plan_unsafe_bootstrap(node_id, term, state, secrets.token_hex(16), secrets.token_hex(16))
    if action == "remove-settings":
        return plan_remove_settings(node_id, term, state, patterns, secrets.token_hex(16))
    return plan_detach(node_id, term, state, secrets.token_hex(16))


def _confirmed(stdin: TextIO | None, out: TextIO) -> bool:
    """A `y` typed on a terminal. Without a terminal (a pipe, /dev/null, a closed stdin, a Job) nobody can
    answer, so it refuses rather than wait."""
    try:
        interactive = stdin is not None and stdin.isatty()
    except (ValueError, OSError):  # closed
        interactive = False
    if not interactive or stdin is None:
        print(f"{PROG}: no terminal to confirm on; pass --yes to proceed without the question", file=out)
        return False
    print("Confirm [y/N] ", end="", file=out, flush=True)
    try:
        answer = stdin.readline()
    except KeyboardInterrupt:
        print(file=out)
        return False
    return answer.strip().lower() in ("y", "yes")


if __name__ == "__main__":
    sys.exit(main())
