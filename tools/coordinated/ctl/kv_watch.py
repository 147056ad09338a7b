"""`coordinated kv watch`: every change under one or more prefixes, printed one per line or handed to a
command run once per change, with the change in its environment."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import click

from coordinated.client import WatchEvent
from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import BadInput, one_line

# The environment of the command run per change (docs/cli.md).
EVENT_ENV = {
    "type": "COORDINATED_EVENT_TYPE",
    "key": "COORDINATED_EVENT_KEY",
    "value": "COORDINATED_EVENT_VALUE",
    "version": "COORDINATED_EVENT_VERSION",
    "prev_value": "COORDINATED_EVENT_PREV_VALUE",
}


def event_data(event: WatchEvent, prev_value: bool) -> dict[str, Any]:
    data = {"type": event.type, "key": event.key, "value": event.value, "version": event.version}
    return data | ({"prev_value": event.prev_value} if prev_value else {})


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def event_line(data: dict[str, Any], output: str) -> str:
    """One change: a JSON object per line (-o json, -o yaml: a flow mapping), or tab-separated fields."""
    if output != "table":
        return as_json(data)
    return "\t".join([data["type"], data["key"], str(data["version"]), as_json(data["value"])])


def event_environment(data: dict[str, Any]) -> dict[str, str]:
    env = {
        EVENT_ENV["type"]: data["type"],
        EVENT_ENV["key"]: data["key"],
        EVENT_ENV["value"]: as_json(data["value"]),
        EVENT_ENV["version"]: str(data["version"]),
    }
    if "prev_value" in data:
        env[EVENT_ENV["prev_value"]] = as_json(data["prev_value"])
    return env


def run_for(command: tuple[str, ...], data: dict[str, Any]) -> None:
    try:
        finished = subprocess.run(command, env={**os.environ, **event_environment(data)}, check=False)
    except OSError as error:
        raise BadInput(f"cannot run {command[0]}: {one_line(str(error))}") from error
    if finished.returncode != 0:
        click.echo(f"{command[0]} exited {finished.returncode} on {data['type']} {data['key']}", err=True)


@click.command(context_settings={"ignore_unknown_options": False})
@click.option(
    "--prefix", "prefixes", multiple=True, help="watch the keys starting with PREFIX (repeatable; default: all)"
)
@click.option("--from-version", type=click.IntRange(min=0), help="the changes after this version (default: from now)")
@click.option("--prev-value", is_flag=True, help="each change also carries the value before it")
@click.option("--filter", "only", type=click.Choice(["put", "delete"]), help="only puts, or only deletes")
@click.option("--max-events", type=click.IntRange(min=1), help="stop after this many changes (default: never)")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@connection_options
def watch(
    connection: Connection,
    prefixes: tuple[str, ...],
    from_version: int | None,
    prev_value: bool,
    only: str | None,
    max_events: int | None,
    command: tuple[str, ...],
) -> None:
    """Every change under the prefixes, as it happens, on one stream that resumes through another node if
    its node fails. Without COMMAND each change is a line: `TYPE KEY VERSION VALUE` (tab-separated), or a
    JSON object with -o json. With `-- COMMAND ARGS...`, COMMAND runs once per change, in order, with
    COORDINATED_EVENT_TYPE (put, delete, or reset: the watch fell behind and the puts that follow are every
    key under the prefix), COORDINATED_EVENT_KEY, COORDINATED_EVENT_VALUE (JSON) and
    COORDINATED_EVENT_VERSION in its environment (and COORDINATED_EVENT_PREV_VALUE with --prev-value). A
    command that fails is reported on stderr and the watch goes on."""
    seen = 0
    # The stream waits for changes: only reaching the cluster is bounded by --timeout.
    with connection.client() as client:
        for event in client.watch(list(prefixes) or "", from_version, prev_value=prev_value, filter=only):
            data = event_data(event, prev_value)
            if command:
                run_for(command, data)
            else:
                click.echo(event_line(data, connection.output))
            seen += 1
            if max_events is not None and seen >= max_events:
                return
