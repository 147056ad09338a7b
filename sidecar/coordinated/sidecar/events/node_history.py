"""The node's history: its writer, the maintenance of its segments (compression, retention, the watch over the
files and the volume) and, when configured, their archive in object storage.

Its own events (`archived`, `stopped`, and those maintenance writes) carry the node's term and configurations
as its store holds them, read through the core's `PersistedState`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import msgspec

from coordinated.coordination.effects import Effect, RecordHistory
from coordinated.coordination.history import NO_CLUSTER_UUID, EventType, HistoryEvent
from coordinated.coordination.recovery import HistorySummary, recovered_state_event
from coordinated.coordination.safety import PersistedState
from coordinated.coordination.settings import Settings
from coordinated.s3.object_store import ObjectStore
from coordinated.sidecar.events.archive import ArchiveStatus, SegmentArchive
from coordinated.sidecar.events.archive_settings import ArchiveSettings
from coordinated.sidecar.events.history import HistoryWriter
from coordinated.sidecar.events.history_maintenance import HistoryMaintenance, HistoryStatus
from coordinated.sidecar.events.history_segments import compressed_segments
from coordinated.sidecar.events.history_settings import HISTORY_FSYNC, RetentionPolicy

log = logging.getLogger("coordinated.node")

# On a graceful stop the node closes its current history segment and waits this long for the archive to take it,
# so that a node that is stopped for good (a scale-down) leaves its whole history in object storage.
ARCHIVE_FLUSH_TIMEOUT_S = 10.0


class NodeHistory:
    def __init__(
        self,
        data_dir: Path,
        directory: Path,
        settings: Settings,
        persisted: PersistedState,
        summary: HistorySummary,
        node_id: str,
        node_name: str,
        object_store: ObjectStore,
        on_recorded: Callable[[EventType], None],
    ) -> None:
        """`directory`: the history's folder in `data_dir`; `summary`: what the history proved when the store was opened; `object_store`: the node's, whose thread
        the archive's requests run on; `on_recorded`: told the type of each event written (for metrics)."""
        self.persisted = persisted
        self.node_id = node_id
        self.node_name = node_name
        self.directory = directory
        self.on_recorded = on_recorded
        self._object_store = object_store
        self.archive = self._archive(ArchiveSettings.from_settings(settings))
        policy = RetentionPolicy.from_settings(settings)
        self.writer = HistoryWriter(
            self.directory,
            policy.segment_size,
            settings[HISTORY_FSYNC],
            marks=(summary.term, summary.accepted),
            on_rotate=lambda path: self.maintenance.segment_closed(path),
        )
        # Compression, retention, and the watch over the files and the volume. With an archive, each compressed
        # segment wakes its uploader, and retention deletes only what the archive holds.
        self.maintenance = HistoryMaintenance(
            self.writer,
            data_dir,
            policy,
            self.identity,
            on_segment_closed=self.archive.on_segment_closed if self.archive is not None else None,
            is_archived=self.archive.is_archived if self.archive is not None else None,
        )
        self._archiver: asyncio.Task[None] | None = None
        recovered = recovered_state_event(node_id, node_name, persisted.last_accepted_state, summary)
        if recovered is not None:
            self.writer.append(recovered)

    @property
    def status(self) -> HistoryStatus:
        return self.maintenance.status

    def archive_status(self) -> ArchiveStatus | None:
        """None without an archive."""
        return self.archive.status() if self.archive is not None else None

    def start(self) -> None:
        self.maintenance.start()
        if self.archive is not None:
            self._archiver = asyncio.get_running_loop().create_task(self.archive.run())

    async def stop(self, stopped: bool) -> None:
        """Stops the maintenance; with `stopped` (the core ran and has stopped) writes the `stopped` event; then
        gives the archive a bounded time to take the last segment, and closes the writer."""
        await self.maintenance.stop()
        if stopped:
            self._record_stop()
        await self._flush_archive()
        self.writer.close()

    def record(self, event: HistoryEvent, folded_applied: Effect | None = None) -> None:
        """Append an event to this node's history: the core's, or the shell's own (a snapshot taken). With
        `folded_applied` (the RecordHistory right after a follower's `committed` of the same state), both are
        one format-2 line."""
        if isinstance(folded_applied, RecordHistory):
            self.writer.append(folded_applied.event, folds_commit=True)
            self.on_recorded(event.type)
            self.on_recorded(folded_applied.event.type)
            return
        self.writer.append(event)
        self.on_recorded(event.type)

    def identity(self) -> HistoryEvent:
        """The node's own fields for the history's own events (`retention_cut`, `history_lost`): its cluster,
        current term and configurations, as the core fills them in for a `term` event."""
        state = self.persisted.last_accepted_state
        return HistoryEvent(
            cluster_uuid=state.cluster_uuid,
            node=self.node_id,
            node_name=self.node_name,
            type=EventType.TERM,
            term=self.persisted.current_term,
            last_committed_config=state.last_committed_config.node_ids,
            last_accepted_config=state.last_accepted_config.node_ids,
        )

    def _record_stop(self) -> None:
        """The `stopped` event: the core has stopped and every effect it left held was dropped, so no event of
        this process's core can follow it (see EventType.STOPPED). Written before the archive takes the last
        segment, so that a node stopped for good leaves it in object storage too."""
        self.record(msgspec.structs.replace(self.identity(), type=EventType.STOPPED, reason="graceful stop"))

    async def _flush_archive(self) -> None:
        """Close the current segment and give the archive a bounded time to upload what is pending."""
        if self.archive is not None and self._archiver is not None:
            self.writer.rotate()
            try:
                await self.maintenance.run_once()  # compresses it: the archive takes compressed segments
            except Exception:  # the stop goes on; the segment is compressed and uploaded at the next start
                log.exception("history maintenance failed while stopping")
            if not await self.archive.flush(ARCHIVE_FLUSH_TIMEOUT_S):
                status = self.archive.status()
                log.warning(
                    "stopping with %d history segment(s) not archived (%s); they upload when the node starts again",
                    status.pending_segments,
                    status.problem or "still uploading",
                )
            self._archiver.cancel()

    def _archive(self, settings: ArchiveSettings | None) -> SegmentArchive | None:
        if settings is None:
            return None

        def cluster_uuid() -> str | None:
            state = self.persisted.last_accepted_state
            return state.cluster_uuid if state.cluster_uuid_committed else None

        return SegmentArchive(
            settings,
            self._object_store.bucket(settings.client, settings.bucket),
            self.node_id,
            cluster_uuid,
            lambda: compressed_segments(self.directory),
            self._on_archived,
        )

    def _on_archived(self, segment: Path, location: str) -> None:
        """An `archived` event, about the node's term and accepted configuration like its other non-state events."""
        state = self.persisted.last_accepted_state
        self.record(
            HistoryEvent(
                cluster_uuid=state.cluster_uuid if state.cluster_uuid_committed else NO_CLUSTER_UUID,
                node=self.node_id,
                node_name=self.node_name,
                type=EventType.ARCHIVED,
                term=self.persisted.current_term,
                last_committed_config=state.last_committed_config.node_ids,
                last_accepted_config=state.last_accepted_config.node_ids,
                location=location,
            )
        )
