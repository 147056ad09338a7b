"""`coordinated lock NAME -- CMD` and `coordinated elect NAME`: the client's Lock and LeaderElection recipes
held for as long as a command runs, or until the process is interrupted.

The lock is held through a TTL session kept alive in the background. If the cluster ends the session (the
keepalives stopped reaching it for a TTL), the lock is lost: `lock` stops the command with SIGTERM and exits
1, and `elect` exits 1. The fencing token is in the command's environment: pass it to every resource the
command writes, which must refuse tokens lower than the highest it has seen (docs/applications.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from types import FrameType

import click

from coordinated.client import CoordinatedError, LeaderElection, Lock, Session
from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import BadInput, Failed
from coordinated.ctl.output import emit

ttl_option = click.option(
    "--ttl",
    type=click.FloatRange(min=1),
    default=10.0,
    show_default=True,
    help="seconds without a keepalive before the cluster ends the session, and the lock with it",
)
INTERRUPTED = 130  # the shell's code for a command ended by a signal it did not handle (128 + SIGINT)


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt, as Ctrl-C does, so that the lock is released on the way out."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def end_quietly(session: Session) -> None:
    """Ends the session (the lock key goes with it); if the cluster cannot be told, it ends after its TTL."""
    with contextlib.suppress(CoordinatedError):
        session.end()


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@ttl_option
@click.option("--wait", type=click.FloatRange(min=0), help="give up (exit 1) if not acquired within these seconds")
@connection_options
def lock(connection: Connection, name: str, command: tuple[str, ...], ttl: float, wait: float | None) -> None:
    """Holds the lock NAME while COMMAND runs (`coordinated lock NAME -- COMMAND ARGS...`), and exits with
    COMMAND's exit code. COMMAND gets COORDINATED_LOCK_NAME, COORDINATED_LOCK_TOKEN (the fencing token) and
    COORDINATED_SESSION in its environment."""
    child: subprocess.Popen[bytes] | None = None

    def lost() -> None:
        if child is not None and child.poll() is None:
            child.terminate()

    with connection.client() as client, interrupt_on_sigterm():
        session = client.session(ttl, on_expired=lost)
        try:
            held = Lock(client, name, session)
            token = held.acquire(wait)
            environment = {
                **os.environ,
                "COORDINATED_LOCK_NAME": name,
                "COORDINATED_LOCK_TOKEN": str(token),
                "COORDINATED_SESSION": session.id,
            }
            try:
                child = subprocess.Popen(command, env=environment)
            except OSError as error:
                raise BadInput(f"cannot run {command[0]}: {error.strerror or error}") from error
            code = wait_for(child)
            if session.expired.is_set():
                raise Failed(f"lost the lock [{name}]: the cluster ended the session; the command was stopped")
            held.release()
            raise click.exceptions.Exit(code)
        finally:
            end_quietly(session)


def wait_for(child: subprocess.Popen[bytes]) -> int:
    """The child's exit code; on Ctrl-C or SIGTERM, the child is stopped too (it may take 10 s to go)."""
    try:
        return child.wait()
    except KeyboardInterrupt:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        return INTERRUPTED


@click.command()
@click.argument("name")
@click.argument("identity", required=False)
@click.option("--listen", is_flag=True, help="do not campaign: print the leader now and at every change")
@ttl_option
@connection_options
def elect(connection: Connection, name: str, identity: str | None, listen: bool, ttl: float) -> None:
    """Campaigns in the election NAME as IDENTITY (default: host:pid), prints the leader and its token once
    elected, and leads until interrupted (then resigns). With --listen, prints the leader at every change."""
    identity = identity or f"{socket.gethostname()}:{os.getpid()}"
    with connection.client() as client, interrupt_on_sigterm():
        session = client.session(ttl)
        try:
            election = LeaderElection(client, name, session, identity)
            if listen:
                listen_to(election, connection.output)
                return
            token = election.campaign()
            emit({"name": name, "leader": identity, "token": token}, connection.output, ("name", "leader", "token"))
            sys.stdout.flush()
            try:
                session.expired.wait()
            except KeyboardInterrupt:
                election.resign()
                return
            raise Failed(f"lost the leadership of [{name}]: the cluster ended the session")
        finally:
            end_quietly(session)


def listen_to(election: LeaderElection, output: str) -> None:
    """One line per change of leader: JSON with `-o json`, else `NAME: LEADER (token N)`."""
    try:
        for leader in election.observe():
            identity, token = leader if leader is not None else (None, None)
            if output == "json":
                line = json.dumps({"name": election.name, "leader": identity, "token": token}, sort_keys=True)
            else:
                line = f"{election.name}: {identity} (token {token})" if leader else f"{election.name}: no leader"
            click.echo(line)
            sys.stdout.flush()
    except KeyboardInterrupt:
        pass
