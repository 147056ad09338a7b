"""The node's store: its data directory's lock, the persisted term and state (the core's `PersistedState`,
watched for failed writes), the watch over the files beside the store, and the group commit that holds back
whatever follows a write until that write is durable.

Opening it decides from the whole directory (node id, store, history, hooks) whether to start fresh, load or
refuse (DataDirError naming the file); the history's own reader is handed in (`read_history`), so that the
store reads no history format itself. On a fresh start it also makes the node id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from coordinated.coordination.effects import Effect
from coordinated.coordination.state import ClusterState, Derivations
from coordinated.sidecar.storage.file_watch import FileProblem, FileWatch
from coordinated.sidecar.storage.group_commit import GroupCommit
from coordinated.sidecar.storage.persist_monitor import MonitoredPersistedState
from coordinated.sidecar.storage.persistence import (
    NODE_ID_FILE,
    DataDirLock,
    FilePersistedState,
    HistoryReader,
    prepare_data_dir,
)

log = logging.getLogger("coordinated.node")


class NodeStore:
    def __init__(
        self,
        data_dir: Path,
        cluster_name: str,
        *,
        deferred_sync: bool,
        derivations: Derivations,
        read_history: HistoryReader,
        on_accepted: Callable[[ClusterState], None],
        execute: Callable[[list[Effect]], None],
    ) -> None:
        """`on_accepted`: told of each accepted state once it is written; `execute`: carries out the core's
        effects, each batch once the writes before it are durable."""
        prepare_data_dir(data_dir)
        self.lock = DataDirLock(data_dir)
        self.persisted = FilePersistedState(
            data_dir, cluster_name, deferred_sync=deferred_sync, derivations=derivations, read_history=read_history
        )
        # Files of the data directory besides the store's (which `persisted.files` watches): lost under the node,
        # they would be missing at the next start.
        self.file_watch = FileWatch()
        self.file_watch.watch(data_dir / NODE_ID_FILE, "the node id file")
        self.file_watch.watch(self.lock.path, "the data directory's lock file", fd=self.lock.fd)
        # What the core writes through: for health (did the last write fail?) and `on_accepted`.
        self.monitored = MonitoredPersistedState(self.persisted, on_accepted)
        self.group_commit = GroupCommit(self.persisted, execute, self._on_sync_failure)

    @property
    def node_id(self) -> str:
        return self.persisted.node_id

    @property
    def failure(self) -> str | None:
        """Why the last write or sync failed; None once one succeeds again."""
        return self.monitored.failure

    def lost_files(self) -> list[FileProblem]:
        """The store's files and the others of the data directory that were deleted or replaced under the node."""
        return [*self.persisted.files.problems(), *self.file_watch.problems()]

    async def close(self, timeout_s: float) -> None:
        """Waits (bounded) for the last sync, closes the store and releases the data directory."""
        try:
            await asyncio.wait_for(self.group_commit.drain(), timeout_s)
        except TimeoutError:
            # A sync hangs in its thread (a stuck disk): closing the store under it is not safe; the process
            # exit releases it.
            log.error("the store's sync did not return within %ss; not closing the store", timeout_s)
        else:
            self.persisted.close()
        self.lock.release()

    def _on_sync_failure(self, reason: str) -> None:
        self.monitored.failure = reason
