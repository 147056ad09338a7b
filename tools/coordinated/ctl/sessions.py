"""`coordinated session grant|keepalive|revoke|list`: TTL sessions, whose ephemeral keys go when they end."""

from __future__ import annotations

import time

import click

from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.output import emit


@click.group()
def session() -> None:
    """TTL sessions: a session ends when no keepalive reaches the cluster for its TTL."""


@session.command()
@click.option("--ttl", type=click.FloatRange(min=1), default=10.0, show_default=True, help="seconds")
@connection_options
def grant(connection: Connection, ttl: float) -> None:
    """Creates a session; its id is what `kv put --session` and `session keepalive` take."""
    with connection.client() as client:
        created = client.create_session(ttl)
    emit({"id": created.id, "ttl": created.ttl}, connection.output, ("id", "ttl"))


@session.command()
@click.argument("session_id")
@click.option(
    "--every", type=click.FloatRange(min=0.1), help="keep sending one every this many seconds, until interrupted"
)
@connection_options
def keepalive(connection: Connection, session_id: str, every: float | None) -> None:
    """Renews the session SESSION_ID once (or with --every, until Ctrl-C). Exits 1 once it has ended."""
    with connection.client() as client:
        client.keepalive(session_id)
        try:
            while every is not None:
                time.sleep(every)
                client.keepalive(session_id)
        except KeyboardInterrupt:
            pass
    emit({"id": session_id, "alive": True}, connection.output, ("id", "alive"))


@session.command()
@click.argument("session_id")
@connection_options
def revoke(connection: Connection, session_id: str) -> None:
    """Ends the session; its ephemeral keys are deleted in the same committed state."""
    with connection.client() as client:
        client.end_session(session_id)
    emit({"id": session_id, "revoked": True}, connection.output, ("id", "revoked"))


@session.command(name="list")
@connection_options
def list_sessions(connection: Connection) -> None:
    """The sessions, their TTL (or node) and their ephemeral keys."""
    with connection.client() as client:
        answer = client.sessions()
    emit(answer["sessions"], connection.output, ("id", "ttl", "node", "keys"))
