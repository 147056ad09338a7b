"""The botocore side of the object store: aiobotocore's S3 client, its credentials and its errors.

Imported only when a node first talks to an object store: aiobotocore and botocore take about 16 MB of memory
and a second of start-up, which a node with no archive and no `s3` repository should not pay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from aiobotocore.config import AioConfig
from aiobotocore.credentials import AioCredentialResolver, AioRefreshableCredentials
from aiobotocore.session import AioSession
from botocore.credentials import CredentialProvider
from botocore.exceptions import BotoCoreError, ClientError

from coordinated.s3.object_errors import ObjectExists, ObjectMissing, ObjectStoreError
from coordinated.s3.s3_settings import (
    ACCESS_KEY,
    SECRET_KEY,
    SESSION_TOKEN,
    S3ClientSettings,
    read_credentials_file,
)

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client

for _name in ("botocore", "aiobotocore", "urllib3"):
    logging.getLogger(_name).setLevel(logging.WARNING)

# A credentials file is re-read this often: botocore refreshes credentials that expire within 15 minutes.
CREDENTIALS_FILE_REFRESH = timedelta(minutes=20)
CONNECT_TIMEOUT_S = 10.0
# The errors of a request that `translate` turns into an ObjectStoreError.
REQUEST_ERRORS: tuple[type[BaseException], ...] = (ClientError, BotoCoreError)


class _CredentialsFile(CredentialProvider):
    """The `[default]` profile of one AWS credentials file, and nothing else (aiobotocore's providers are
    botocore's with an async `load`)."""

    METHOD = "coordinated-credentials-file"

    def __init__(self, path: str) -> None:
        self.path = path

    async def _read(self) -> dict[str, str | None]:
        try:
            profile = await asyncio.to_thread(read_credentials_file, self.path)
        except ValueError as error:
            raise ObjectStoreError(f"s3 credentials: {error}") from None
        expiry = datetime.now(UTC) + CREDENTIALS_FILE_REFRESH
        return {
            "access_key": profile[ACCESS_KEY],
            "secret_key": profile[SECRET_KEY],
            "token": profile.get(SESSION_TOKEN),
            "expiry_time": expiry.isoformat(),
        }

    async def load(self) -> AioRefreshableCredentials:
        return AioRefreshableCredentials.create_from_metadata(
            metadata=await self._read(), refresh_using=self._read, method=self.METHOD
        )


def describe(error: BaseException) -> str:
    """A one-line reason for an S3 failure, without request headers or credentials."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = details.get("Code") or "error"
        message = details.get("Message") or ""
        return f"{status} {code}" + (f": {message}" if message else "")
    if isinstance(error, asyncio.TimeoutError | TimeoutError):
        return "timed out"
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def translate(error: BaseException, what: str) -> ObjectStoreError:
    if isinstance(error, ObjectStoreError):
        return error
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = error.response.get("Error", {}).get("Code")
        kind = ObjectMissing if status == 404 or code in ("NoSuchKey", "NotFound") else ObjectStoreError
        if status == 412 or code == "PreconditionFailed":
            kind = ObjectExists
        return kind(f"{what}: {describe(error)}", status=status, code=code)
    return ObjectStoreError(f"{what}: {describe(error)}")


async def create_client(
    settings: S3ClientSettings,
) -> tuple[S3Client, contextlib.AbstractAsyncContextManager[S3Client]]:
    """A client for `settings`, and the context that closes it."""
    session = AioSession()
    if settings.credentials_file is not None:
        session.register_component(
            "credential_provider", AioCredentialResolver([_CredentialsFile(settings.credentials_file)])
        )
    config = AioConfig(
        region_name=settings.region,
        connect_timeout=min(CONNECT_TIMEOUT_S, settings.read_timeout_s),
        read_timeout=settings.read_timeout_s,
        retries={"mode": "standard", "total_max_attempts": settings.max_retries + 1},
        s3={"addressing_style": "path" if settings.path_style_access else "auto"},
    )
    context = session.create_client("s3", endpoint_url=settings.endpoint_url, config=config)
    client = await context.__aenter__()
    return client, context


def is_not_found(error: BaseException) -> bool:
    """A HEAD's 404, which means the object is not there rather than a failure."""
    return isinstance(error, ClientError) and error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404
