"""The `s3` snapshot repository, with Elasticsearch's repository-s3 settings: `bucket`, `base_path` and `client`.

Each snapshot is one object, `BASE_PATH/snap-<name>.dat`, holding the same bytes as an `fs` snapshot file. It is
written with `If-None-Match: *`, so a name is taken at most once even by two nodes at the same moment, and an S3
put is atomic: a reader sees a whole snapshot or none. Every request runs on the node's object store thread,
through the client that `s3.client.NAME` describes.
"""

from __future__ import annotations

from coordinated.s3.object_store import Bucket, ObjectExists, ObjectMissing, ObjectStoreError
from coordinated.sidecar.features.snapshots import (
    PREFIX,
    RepositoryUnavailable,
    SnapshotExists,
    SnapshotMissing,
    SnapshotRepository,
    blob_name,
    name_of,
)


class S3Repository(SnapshotRepository):
    def __init__(self, bucket: Bucket, base_path: str) -> None:
        self.bucket = bucket
        self.prefix = f"{base_path}/" if base_path else ""

    def _key(self, name: str) -> str:
        return self.prefix + blob_name(name)

    def where(self, name: str) -> str:
        return self.bucket.uri(self._key(name))

    async def verify(self) -> None:
        try:
            await self.bucket.verify(self.prefix)
        except ObjectStoreError as error:
            raise RepositoryUnavailable(error.reason) from None

    async def put_new(self, name: str, data: bytes) -> None:
        try:
            await self.bucket.put_new(self._key(name), data)
        except ObjectExists:
            raise SnapshotExists(name) from None
        except ObjectStoreError as error:
            raise RepositoryUnavailable(error.reason) from None

    async def fetch(self, name: str) -> bytes:
        try:
            return await self.bucket.get(self._key(name))
        except ObjectMissing:
            raise SnapshotMissing(name) from None
        except ObjectStoreError as error:
            raise RepositoryUnavailable(error.reason) from None

    async def names(self) -> list[tuple[str, float]]:
        try:
            listed = await self.bucket.list(self.prefix + PREFIX)
        except ObjectStoreError as error:
            raise RepositoryUnavailable(error.reason) from None
        found = []
        for info in listed:
            relative = info.key[len(self.prefix) :]
            name = name_of(relative) if "/" not in relative else None
            if name is not None:
                found.append((name, info.last_modified or 0.0))
        return found

    async def remove(self, name: str) -> None:
        try:
            if await self.bucket.head(self._key(name)) is None:
                raise SnapshotMissing(name)
            await self.bucket.delete(self._key(name))
        except ObjectStoreError as error:
            raise RepositoryUnavailable(error.reason) from None
