"""The errors of the object store, without the S3 client behind it (callers catch them; few need the client)."""

from __future__ import annotations


class ObjectStoreError(Exception):
    """An S3 request failed. `status` is the HTTP status (None when the service could not be reached)."""

    def __init__(self, reason: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.code = code


class ObjectExists(ObjectStoreError):
    """A write-once put found the key taken."""


class ObjectMissing(ObjectStoreError):
    pass
