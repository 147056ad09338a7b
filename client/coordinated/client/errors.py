"""What the client raises. Every error the cluster answers with is an `ApiError` carrying Elasticsearch's
error shape (`status`, `type`, `reason`); the subclasses name the ones an application handles."""

from __future__ import annotations

from typing import Any


class CoordinatedError(Exception):
    """Anything this library raises."""


class ApiError(CoordinatedError):
    # The address of the node that answered, when the client gave up on retrying it (a 503).
    address: str | None = None

    def __init__(self, status: int, error_type: str, reason: str, body: Any = None) -> None:
        super().__init__(f"{status} {error_type}: {reason}")
        self.status = status
        self.type = error_type
        self.reason = reason
        self.body = body


class BadRequest(ApiError):
    """400: the request is malformed; the reason says how."""


class AuthenticationError(ApiError):
    """401 (no or unknown token) or 403 (the token's role may not do this)."""


class NotFound(ApiError):
    """404: the key (or session) does not exist."""


class VersionConflict(ApiError):
    """409: a conditional write's condition did not hold; nothing was written."""


class ChangesGone(ApiError):
    """410: a watch asked for changes older than the node's change log; re-read and watch from there."""


class Unavailable(ApiError):
    """503 that outlasted the client's retries (no master, a master change, a timeout). Raised rather than
    `NoNodeAvailable` when some node answered while others could not be reached: a node that answers that it
    has no master says more than the ones that do not answer."""

    def no_master(self) -> bool:
        """Whether the node that answered has no master (`cluster_block_exception` of the no-master block, or
        `master_not_discovered_exception`)."""
        return self.type == "master_not_discovered_exception" or (
            self.type == "cluster_block_exception" and "no master" in self.reason
        )


class SessionNotFound(NotFound):
    """The session has ended (expired, ended, or its node left): its ephemeral keys are gone."""


class OutcomeUnknown(CoordinatedError):
    """A conditional write or a transaction may or may not have taken effect (the connection broke after it
    was sent, or the master changed while committing it). It is not retried blindly, since a retry of an
    applied conditional write fails with a conflict: read the key to find out."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class NoNodeAvailable(CoordinatedError):
    """No address answered within the client's retry time."""


class InvalidKey(CoordinatedError, ValueError):
    """A key name (or prefix) that the cluster would refuse; the client refuses it before sending anything.
    The message names the rule it breaks (see `coordinated.key_names`)."""


class LockTimeout(CoordinatedError):
    """A recipe's wait (a lock, a semaphore slot, a barrier) did not end within its timeout."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFound,
    409: VersionConflict,
    410: ChangesGone,
    503: Unavailable,
}


def api_error(status: int, body: Any) -> ApiError:
    """The error for an answer with an error status, from its `{"error": {"type", "reason"}}` body."""
    error_type, reason = "http_error", str(body)[:300]
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error_type = str(body["error"].get("type", error_type))
        reason = str(body["error"].get("reason", reason))
    return _BY_STATUS.get(status, ApiError)(status, error_type, reason, body)


class NotLeader(CoordinatedError):
    """`proclaim` by a candidate that no longer leads (its key is gone or was not its own): nothing was written."""


class ListingLost(CoordinatedError):
    """A range read over several pages could not go on from the state of its first page: the node serving it
    no longer holds that state (the listing paused too long, the node restarted or failed). Nothing is
    half-read: list again from the first page (`list_prefix` does so itself)."""
