"""`coordinated settings get|set`: the cluster's dynamic settings (docs/settings.md lists them)."""

from __future__ import annotations

import click

from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import BadInput
from coordinated.ctl.output import emit


@click.group()
def settings() -> None:
    """The persistent dynamic settings (the admin role when tokens are on)."""


@settings.command()
@click.argument("names", nargs=-1)
@connection_options
def get(connection: Connection, names: tuple[str, ...]) -> None:
    """The settings set on the cluster (all, or those NAMES); a setting not set has its default."""
    with connection.client() as client:
        persistent = client.cluster_settings()["persistent"]
    chosen = {name: persistent.get(name) for name in names} if names else dict(persistent)
    rows = [{"setting": name, "value": value} for name, value in sorted(chosen.items())]
    emit(chosen, connection.output, ("setting", "value"), rows=rows)


def assignment(text: str) -> tuple[str, str | None]:
    name, equals, value = text.partition("=")
    if not equals or not name.strip():
        raise BadInput(f"[{text}] is not NAME=VALUE (NAME= resets the setting to its default)")
    return name.strip(), value if value else None


@settings.command(name="set")
@click.argument("assignments", nargs=-1, required=True)
@connection_options
def set_settings(connection: Connection, assignments: tuple[str, ...]) -> None:
    """Sets NAME=VALUE for each argument, in one change (NAME= resets it). An unknown setting or a bad value
    is refused with its reason, and nothing changes (exit 2)."""
    updates = dict(assignment(text) for text in assignments)
    with connection.client() as client:
        answer = client.put_cluster_settings(updates)
    accepted = answer["persistent"]
    rows = [{"setting": name, "value": value} for name, value in sorted(accepted.items())]
    emit(accepted, connection.output, ("setting", "value"), rows=rows)
