"""`coordinated snapshot save|restore|list|delete`: snapshots of the keys and settings in an `fs` repository
(a folder under the nodes' `path.repo`; `coordinated local up` sets one)."""

from __future__ import annotations

from typing import Any

import click

from coordinated.client import BadRequest
from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import Failed
from coordinated.ctl.output import emit

COLUMNS = ("snapshot", "state", "state_version", "keys", "end_time")

repository_argument = click.argument("repository")
location_option = click.option(
    "--location",
    help="register REPOSITORY first, as an fs repository at this folder (relative: under the first path.repo)",
)


@click.group()
def snapshot() -> None:
    """Snapshots of the committed keys and settings (the admin role when tokens are on)."""


def snapshot_row(info: dict[str, Any]) -> dict[str, Any]:
    return {name: info.get(name) for name in COLUMNS} | {"failures": info.get("failures") or None}


@snapshot.command()
@repository_argument
@click.argument("name")
@location_option
@connection_options
def save(connection: Connection, repository: str, name: str, location: str | None) -> None:
    """Writes snapshot NAME of the committed state into REPOSITORY and waits until it is complete. A name that
    is taken exits 1, as a conflict."""
    with connection.client() as client:
        if location is not None:
            client.put_fs_repository(repository, location)
        try:
            answer = client.create_snapshot(repository, name)
        except BadRequest as error:
            if error.type == "invalid_snapshot_name_exception" and "already exists" in error.reason:
                raise Failed(f"snapshot [{repository}:{name}] exists already: {error.reason}") from error
            raise
    emit(answer["snapshot"], connection.output, COLUMNS, rows=[snapshot_row(answer["snapshot"])])


@snapshot.command(name="list")
@repository_argument
@connection_options
def list_snapshots(connection: Connection, repository: str) -> None:
    """The snapshots in REPOSITORY (a damaged one shows as FAILED, with the reason)."""
    with connection.client() as client:
        answer = client.list_snapshots(repository)
    snapshots = answer["snapshots"]
    emit(snapshots, connection.output, (*COLUMNS, "failures"), rows=[snapshot_row(info) for info in snapshots])


@snapshot.command()
@repository_argument
@click.argument("name")
@connection_options
def delete(connection: Connection, repository: str, name: str) -> None:
    """Deletes snapshot NAME from REPOSITORY."""
    with connection.client() as client:
        answer = client.delete_snapshot(repository, name)
    emit(answer, connection.output, ("acknowledged",))


@snapshot.command()
@repository_argument
@click.argument("name")
@click.option("--yes", is_flag=True, help="do not ask: every key written since the snapshot is lost")
@connection_options
def restore(connection: Connection, repository: str, name: str, yes: bool) -> None:
    """Replaces every key and the persistent settings with those of snapshot NAME, in one committed state.
    Keys written since the snapshot are gone. Asks first, unless --yes."""
    if not yes and not click.confirm(f"replace every key with snapshot [{repository}:{name}]?", err=True):
        raise Failed("not restored: not confirmed (--yes restores without asking)")
    with connection.client() as client:
        answer = client.restore_snapshot(repository, name)
    restored = answer["snapshot"]
    emit(restored, connection.output, ("snapshot", "keys", "version", "term"))
