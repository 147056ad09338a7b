"""`coordinated lock NAME -- CMD` and `coordinated elect NAME`: the client's Lock and LeaderElection recipes
held for as long as a command runs, or until the process is interrupted.

The lock is held through a TTL session kept alive in the background, and the holder follows its own clock:
the cluster ends the session once its master has had no keepalive for the TTL, so this process stops
counting on the session earlier, at the TTL less a safety margin (a tenth of the TTL, for the drift between
the two clocks) after the last keepalive that succeeded was *sent*. By then `lock` has stopped its command:
SIGTERM to the command's process group `--grace` seconds before that point, SIGKILL at it. `elect` stops
claiming the leadership at that point. Both then exit 1, as they do when the cluster says it ended the
session. So a holder cut off from the cluster (its node killed or stopped, a partition) is gone before the
cluster can give the lock to another, as long as the clocks drift less than the margin. The fencing token is
in the command's environment: pass it to every resource the command writes, which must refuse tokens lower
than the highest it has seen (docs/applications.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from types import FrameType

import click

from coordinated.client import Client, ConnectionState, CoordinatedError, LeaderElection, Lock, Session
from coordinated.client.sessions import safety_margin_of
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
# The grace between SIGTERM and SIGKILL: this, or a fifth of the TTL if that is less.
DEFAULT_GRACE_S = 2.0
# How often the holder looks at its session while it waits (a 404 to a keepalive is seen within this).
POLL_S = 0.25


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


def grace_of(ttl: float, grace: float | None) -> float:
    """The grace between SIGTERM and SIGKILL: as given (at most half the TTL), or the default."""
    if grace is None:
        return min(DEFAULT_GRACE_S, ttl / 5)
    if grace > ttl / 2:
        raise BadInput(f"--grace {grace:g} is more than half of --ttl {ttl:g}: the command would be stopped too soon")
    return grace


def why_gone(session: Session) -> str:
    """Why this holder stopped counting on its session (it is not `connected`)."""
    if session.state() is ConnectionState.LOST:
        return "the cluster ended the session"
    return (
        f"no keepalive has reached the cluster for {session.lifetime:g} s (the TTL of {session.ttl:g} s less "
        f"{session.safety_margin:g} s), so the cluster may end the session"
    )


class Holding:
    """A session that this process counts on until its own clock says it may be gone (`suspended`) or the
    cluster says it is (`lost`). On the way out it is ended, unless it is gone: then it is left to expire
    on the cluster, without waiting for a cluster that does not answer."""

    def __init__(self, connection: Connection, ttl: float, margin: float) -> None:
        self.client: Client = connection.client()
        try:
            self.session = self.client.session(ttl, safety_margin=margin)
        except BaseException:
            self.client.close()
            raise

    def live(self) -> bool:
        return self.session.state() is ConnectionState.CONNECTED

    def wait_while_live(self) -> None:
        """Returns once the session is not `connected` any more; KeyboardInterrupt goes through."""
        while self.live():
            time.sleep(min(POLL_S, max(0.001, self.session.until_suspended())))

    def __enter__(self) -> Holding:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.session.state() in (ConnectionState.CONNECTED, ConnectionState.ENDED):
            end_quietly(self.session)
            self.client.close()
        # Otherwise a keepalive may hang on a node that does not answer: the process exits without waiting for
        # it (its threads are daemons), and the cluster ends the session after its TTL.


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@ttl_option
@click.option("--wait", type=click.FloatRange(min=0), help="give up (exit 1) if not acquired within these seconds")
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    help="seconds between SIGTERM and SIGKILL when COMMAND is stopped (default: 2, or a fifth of --ttl if less)",
)
@connection_options
def lock(
    connection: Connection, name: str, command: tuple[str, ...], ttl: float, wait: float | None, grace: float | None
) -> None:
    """Holds the lock NAME while COMMAND runs (`coordinated lock NAME -- COMMAND ARGS...`), and exits with
    COMMAND's exit code. COMMAND gets COORDINATED_LOCK_NAME, COORDINATED_LOCK_TOKEN (the fencing token) and
    COORDINATED_SESSION in its environment. If the lock may be lost (no keepalive has succeeded for the TTL
    less a tenth of it), COMMAND's process group gets SIGTERM --grace seconds before that point and SIGKILL
    at it, and `lock` exits 1."""
    grace = grace_of(ttl, grace)
    with interrupt_on_sigterm(), Holding(connection, ttl, safety_margin_of(ttl, None) + grace) as held:
        session = held.session
        acquired = Lock(held.client, name, session)
        token = acquired.acquire(wait)
        if not held.live():
            raise Failed(f"lost the lock [{name}] as it was acquired: {why_gone(session)}; the command did not run")
        environment = {
            **os.environ,
            "COORDINATED_LOCK_NAME": name,
            "COORDINATED_LOCK_TOKEN": str(token),
            "COORDINATED_SESSION": session.id,
        }
        try:
            # Its own process group, so that stopping it stops everything it started.
            child = subprocess.Popen(command, env=environment, process_group=0)
        except OSError as error:
            raise BadInput(f"cannot run {command[0]}: {error.strerror or error}") from error
        code = run_while_held(child, held, grace)
        if code is None:
            raise Failed(
                f"lost the lock [{name}]: {why_gone(session)}; the command was stopped (SIGTERM, then SIGKILL "
                f"after {grace:g} s)"
            )
        acquired.release()
        raise click.exceptions.Exit(code)


def run_while_held(child: subprocess.Popen[bytes], held: Holding, grace: float) -> int | None:
    """The child's exit code; None if the session stopped being `connected` first (the child was stopped).
    On Ctrl-C or SIGTERM the child is stopped too, and the code is 130."""
    try:
        while held.live():
            try:
                return child.wait(timeout=min(POLL_S, max(0.001, held.session.until_suspended())))
            except subprocess.TimeoutExpired:
                continue
        stop(child, grace)
        return None
    except KeyboardInterrupt:
        stop(child, grace)
        return INTERRUPTED


def stop(child: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the child's process group, SIGKILL `grace` seconds later if the child is still running."""
    signal_group(child, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(grace)
    signal_group(child, signal.SIGKILL)  # also what the child left running in its group
    child.wait()


def signal_group(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signum)


@click.command()
@click.argument("name")
@click.argument("identity", required=False)
@click.option("--listen", is_flag=True, help="do not campaign: print the leader now and at every change")
@ttl_option
@connection_options
def elect(connection: Connection, name: str, identity: str | None, listen: bool, ttl: float) -> None:
    """Campaigns in the election NAME as IDENTITY (default: host:pid), prints the leader and its token once
    elected, and leads until interrupted (then resigns). It stops leading and exits 1 once no keepalive has
    succeeded for the TTL less a tenth of it. With --listen, prints the leader at every change."""
    identity = identity or f"{socket.gethostname()}:{os.getpid()}"
    if listen:
        with interrupt_on_sigterm(), connection.client() as client, client.session(ttl) as session:
            listen_to(LeaderElection(client, name, session, identity), connection.output)
        return
    with interrupt_on_sigterm(), Holding(connection, ttl, safety_margin_of(ttl, None)) as held:
        election = LeaderElection(held.client, name, held.session, identity)
        token = election.campaign()
        if not held.live():
            raise Failed(f"lost the leadership of [{name}] as it was won: {why_gone(held.session)}")
        # From here on an interrupt resigns, wherever it lands: a SIGTERM sent as soon as the line below is
        # read may arrive before the wait starts.
        try:
            emit({"name": name, "leader": identity, "token": token}, connection.output, ("name", "leader", "token"))
            sys.stdout.flush()
            held.wait_while_live()
        except KeyboardInterrupt:
            election.resign()
            return
        raise Failed(f"no longer the leader of [{name}]: {why_gone(held.session)}")


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
