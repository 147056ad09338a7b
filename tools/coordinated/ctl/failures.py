"""The exit codes of the command-line client, and the one-line message for every failure.

0 ok; 1 a failed operation (not found, a conflict, a lock not acquired); 2 bad usage or input; 3 the
cluster could not be reached, or the token was refused; 4 the outcome is unknown (a conditional write or a
transaction may or may not have taken effect). A failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

import click

from coordinated.client import (
    AuthenticationError,
    BadRequest,
    CoordinatedError,
    InvalidKey,
    NoNodeAvailable,
    OutcomeUnknown,
    Unavailable,
)


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    BAD_INPUT = 2
    UNREACHABLE = 3
    UNKNOWN_OUTCOME = 4


class BadInput(click.ClickException):
    """Input the command cannot use (a malformed value, file or line): exit 2, and nothing was sent."""

    exit_code = ExitCode.BAD_INPUT


class Failed(click.ClickException):
    """An operation that the cluster refused or that did not happen: exit 1."""

    exit_code = ExitCode.FAILED


class Unreachable(click.ClickException):
    """The cluster could not be reached, or refused the token: exit 3."""

    exit_code = ExitCode.UNREACHABLE


class UnknownOutcome(click.ClickException):
    """A write that may or may not have taken effect: exit 4."""

    exit_code = ExitCode.UNKNOWN_OUTCOME


FAILURE_BY_CODE: dict[ExitCode, type[click.ClickException]] = {
    ExitCode.FAILED: Failed,
    ExitCode.BAD_INPUT: BadInput,
    ExitCode.UNREACHABLE: Unreachable,
    ExitCode.UNKNOWN_OUTCOME: UnknownOutcome,
}


def one_line(text: str) -> str:
    return " ".join(text.split())


def exit_code_of(error: CoordinatedError) -> ExitCode:
    if isinstance(error, OutcomeUnknown):
        return ExitCode.UNKNOWN_OUTCOME
    if isinstance(error, AuthenticationError | NoNodeAvailable | Unavailable):
        return ExitCode.UNREACHABLE
    if isinstance(error, BadRequest | InvalidKey):
        return ExitCode.BAD_INPUT
    return ExitCode.FAILED


def describe(error: CoordinatedError) -> str:
    if isinstance(error, Unavailable) and error.no_master():
        node = f"the node at {error.address}" if error.address else "the node that answered"
        return one_line(f"cannot use the cluster: it has no master ({node} says: {error.reason})")
    prefix = {
        ExitCode.UNKNOWN_OUTCOME: "outcome unknown (read the key to find out): ",
        ExitCode.UNREACHABLE: "cannot use the cluster: ",
    }.get(exit_code_of(error), "")
    return one_line(prefix + str(error))


@contextlib.contextmanager
def as_exit_codes() -> Iterator[None]:
    """Turns what the client raises into a one-line message and the documented exit code."""
    try:
        yield
    except CoordinatedError as error:
        raise FAILURE_BY_CODE[exit_code_of(error)](describe(error)) from error
