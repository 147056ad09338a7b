"""The node: drives the sans-IO coordinator from the event loop and carries out its effects in order.

Every input (a peer message, a timer, resolved seeds, a client request, a send failure) goes through
`_run`, which calls the core, executes the returned effects synchronously and in order, then re-arms the
single timer at `coordinator.next_deadline`. History writes and persistence are synchronous, so an event is
on disk before the message or apply that follows it is even queued. With `persistence.sync: background` the
store's commits are synced off the event loop instead, and `group_commit` holds every effect that follows a
commit until that commit is durable: the same guarantee, with one fsync shared by the writes that pile up.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, assert_never

import msgspec

from coordinated.coordination.authorization import READ, Authorizer, KeyAccess, Permissions
from coordinated.coordination.client import (
    Authenticated,
    ClientRequest,
    ClientResult,
    ClusterError,
    Principal,
    checked_result,
)
from coordinated.coordination.coordinator import Coordinator
from coordinated.coordination.effects import (
    Effect,
    Log,
    ProbeSeeds,
    PublicationFinished,
    RecordHistory,
    RequestCompleted,
    Send,
    StateApplied,
    WatchPeers,
)
from coordinated.coordination.feature_gates import feature_not_available
from coordinated.coordination.history import NO_CLUSTER_UUID, EventType, HistoryEvent
from coordinated.coordination.messages import Message
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.quotas import QuotaUsage
from coordinated.coordination.recovery import recovered_state_event
from coordinated.coordination.requests.keys import ReadBarrier
from coordinated.coordination.security import REALM_FILE
from coordinated.coordination.settings import CLUSTER_NAME, NODE_ROLES
from coordinated.coordination.state import ClusterState, Derivations, DiscoveryNode
from coordinated.coordination.wire_versions import ACCESS_CONTROL
from coordinated.release import node_version
from coordinated.s3.object_store import ObjectStore
from coordinated.sidecar.auth.authenticators import Authentication, build_authenticators
from coordinated.sidecar.auth.principal import CURRENT_PRINCIPAL
from coordinated.sidecar.auth.tokens_file import Tokens
from coordinated.sidecar.config import NodeConfig
from coordinated.sidecar.events.archive import SegmentArchive
from coordinated.sidecar.events.archive_settings import ArchiveSettings
from coordinated.sidecar.events.history import HistoryWriter, folds_with_next
from coordinated.sidecar.events.history_maintenance import HistoryMaintenance
from coordinated.sidecar.events.history_metrics import HistoryCollector
from coordinated.sidecar.events.history_segments import compressed_segments
from coordinated.sidecar.events.history_settings import HISTORY_FSYNC, RetentionPolicy
from coordinated.sidecar.features.change_log import ChangeLog
from coordinated.sidecar.features.hooks import HookManager
from coordinated.sidecar.features.hooks_settings import HOOKS_TIMEOUT, HOOKS_UNIX_SOCKET_DIR
from coordinated.sidecar.features.listings import Listings
from coordinated.sidecar.features.snapshot_settings import SNAPSHOT_SECRET_FILE
from coordinated.sidecar.features.watch_settings import CHANGE_LOG_SIZE, STREAM_BUFFER_SIZE, STREAM_PROGRESS_INTERVAL
from coordinated.sidecar.features.watch_streams import StreamHub, StreamQuotas
from coordinated.sidecar.features.watches import SharedBarrier, WatchHub
from coordinated.sidecar.observability.certificates import CertificateCollector
from coordinated.sidecar.observability.metrics import UNKNOWN_PEER, NodeMetrics, StatusSnapshot
from coordinated.sidecar.observability.problems import NodeProblem, ProblemKind, count_by_kind
from coordinated.sidecar.observability.quota_metrics import QuotaCollector, QuotaStatus
from coordinated.sidecar.peers.auth import TransportAuth
from coordinated.sidecar.peers.auth_settings import SECRET_FILE
from coordinated.sidecar.peers.refusals import Refusals
from coordinated.sidecar.peers.tls import ReloadingContext, TrustRestrictions
from coordinated.sidecar.peers.tls_settings import HTTP_TLS, TRANSPORT_SSL_TRUST_RESTRICTIONS, TRANSPORT_TLS, Side
from coordinated.sidecar.peers.transport import PeerSender, Undecodable, watch_until_closed
from coordinated.sidecar.peers.transport_settings import (
    TRANSPORT_CONNECT_TIMEOUT,
    TRANSPORT_MAX_CHUNK_SIZE,
    TRANSPORT_QUEUE_SIZE,
    TRANSPORT_REQUEST_TIMEOUT,
    TRANSPORT_RETRIES,
)
from coordinated.sidecar.storage.file_watch import FileWatch
from coordinated.sidecar.storage.group_commit import GroupCommit
from coordinated.sidecar.storage.persist_monitor import MonitoredPersistedState
from coordinated.sidecar.storage.persistence import (
    HOOKS_FILE,
    NODE_ID_FILE,
    DataDirLock,
    FilePersistedState,
    prepare_data_dir,
)
from coordinated.sidecar.storage.persistence_settings import PERSISTENCE_SYNC, PersistenceSync
from coordinated.sidecar.web.access_settings import TOKENS_FILE
from coordinated.sidecar.web.http_chunks import chunk

log = logging.getLogger("coordinated.node")
R = TypeVar("R")  # what a request answers
READ_BARRIER_TIMEOUT_MS = 30_000
STORE_CLOSE_TIMEOUT_S = 10.0
# On a graceful stop the node closes its current history segment and waits this long for the archive to take it,
# so that a node that is stopped for good (a scale-down) leaves its whole history in object storage.
ARCHIVE_FLUSH_TIMEOUT_S = 10.0
_LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# How long after a request's own timeout the shell stops waiting for the core's answer (a lost completion), and
# how often it looks for such requests.
LOST_COMPLETION_MARGIN_S = 5.0
LOST_COMPLETION_SWEEP_S = 1.0


class Node:
    def __init__(self, config: NodeConfig) -> None:
        """Opens the data directory; raises DataDirError (naming the file) if it cannot be used."""
        self.config = config
        settings = config.settings
        prepare_data_dir(config.data_dir)
        self.lock = DataDirLock(config.data_dir)
        # Decides from the whole directory (node id, slots, history, hooks) whether to start fresh, load or
        # refuse; on a fresh start it also makes the node id.
        # How the node's states derive from one another: its core records them, its stores diff by them.
        self.derivations = Derivations()
        self.persisted = FilePersistedState(
            config.data_dir,
            settings[CLUSTER_NAME],
            deferred_sync=settings[PERSISTENCE_SYNC] is PersistenceSync.BACKGROUND,
            derivations=self.derivations,
        )
        self.node_id = self.persisted.node_id
        # Every S3 request of the node (the archive's, the snapshot repositories') runs on this store's thread.
        self.object_store = ObjectStore()
        self.archive = self._archive(ArchiveSettings.from_settings(settings))
        # Files of the data directory besides the store's (which `persisted.files` watches): lost under the node,
        # they would be missing at the next start.
        self.file_watch = FileWatch()
        self.file_watch.watch(config.data_dir / NODE_ID_FILE, "the node id file")
        self.file_watch.watch(self.lock.path, "the data directory's lock file", fd=self.lock.fd)
        summary = self.persisted.history_summary
        policy = RetentionPolicy.from_settings(settings)
        self.history = HistoryWriter(
            self.history_dir,
            policy.segment_size,
            settings[HISTORY_FSYNC],
            marks=(summary.term, summary.accepted),
            on_rotate=lambda path: self.history_maintenance.segment_closed(path),
        )
        # Compression, retention, and the watch over the files and the volume. With an archive, each compressed
        # segment wakes its uploader, and retention deletes only what the archive holds.
        self.history_maintenance = HistoryMaintenance(
            self.history,
            config.data_dir,
            policy,
            self.history_identity,
            on_segment_closed=self.archive.on_segment_closed if self.archive is not None else None,
            is_archived=self.archive.is_archived if self.archive is not None else None,
        )
        recovered = recovered_state_event(self.node_id, config.node_name, self.persisted.last_accepted_state, summary)
        if recovered is not None:
            self.history.append(recovered)
        secret_file = settings[SECRET_FILE]
        self.auth = TransportAuth.from_file(secret_file) if secret_file else None
        snapshot_secret_file = settings[SNAPSHOT_SECRET_FILE]
        self.snapshot_secret = Path(snapshot_secret_file).read_bytes().strip() if snapshot_secret_file else None
        tokens_file = settings[TOKENS_FILE]
        self.tokens = Tokens(tokens_file) if tokens_file else None
        # Who a client request is made as: without a token realm, nobody in particular (nothing is checked).
        realms = build_authenticators(settings)
        self.authentication = Authentication(self.tokens, realms) if self.tokens is not None or realms else None
        # What a principal may do, by this node's applied roles and role mappings (compiled once per principal).
        self.authorizer = Authorizer()
        if self.tokens is not None:
            self.tokens.on_change = self._tokens_changed
        self.refusals = Refusals()  # transport connections refused either way, for health
        transport_tls = TRANSPORT_TLS.files(settings)
        self.transport_tls = ReloadingContext(transport_tls, Side.CLIENT) if transport_tls is not None else None
        patterns = settings[TRANSPORT_SSL_TRUST_RESTRICTIONS]
        self.transport_trust = TrustRestrictions(patterns) if transport_tls is not None and patterns else None
        self.local_node = DiscoveryNode(self.node_id, config.node_name, config.transport_address, settings[NODE_ROLES])
        self.version = node_version()  # this node's release and wire version
        self.loop: asyncio.AbstractEventLoop | None = None
        self.coordinator: Coordinator | None = None
        # For health (did the last write fail?), and so that the change log keeps each accepted state until it
        # is applied (its comparison of applied states stays in proportion to the change).
        self.persist_monitor = MonitoredPersistedState(self.persisted, lambda state: self.key_watches.log.hold(state))
        self.group_commit = GroupCommit(self.persisted, self._execute, self._on_sync_failure)
        self.metrics = NodeMetrics(self.status_snapshot)
        self.metrics.registry.register(HistoryCollector(lambda: self.history_maintenance.status))
        self.metrics.registry.register(QuotaCollector(self.quota_statuses))
        self.metrics.registry.register(
            CertificateCollector({"transport": transport_tls, "http": HTTP_TLS.files(settings)})
        )
        self.hooks = HookManager(
            config.data_dir / HOOKS_FILE, settings[HOOKS_TIMEOUT] / 1000, settings[HOOKS_UNIX_SOCKET_DIR]
        )
        self.sender: PeerSender | None = None
        self.applied_state: ClusterState = self.persisted.last_accepted_state.replace(master_node=None)
        self._applied_event = asyncio.Event()
        # request id -> (the future its handler awaits, the loop time after which the shell gives up on it)
        self._pending: dict[int, tuple[asyncio.Future[ClientResult], float]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._archiver: asyncio.Task[None] | None = None
        self._request_ids = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._probing = False
        self.unresolved_seeds: list[str] = []
        self.stopping = False
        # Key watches (the client API's), parked here until an applied state changes their prefix.
        self.key_watches = WatchHub(ChangeLog(settings[CHANGE_LOG_SIZE], self.derivations))
        self.watch_streams = StreamHub(self.key_watches.log, settings[STREAM_BUFFER_SIZE], chunk)
        self.stream_quotas = StreamQuotas()  # this node's streams, for the quotas' max_watch_streams
        self.quota_usage = QuotaUsage(self.derivations)  # every quota's usage in the applied state
        self._progress: asyncio.Task[None] | None = None
        self.listings = Listings(
            self.derivations
        )  # range reads: the sorted keys of the applied state, and pinned listings
        self.shared_read_barrier = SharedBarrier(lambda: self.call(ReadBarrier(), READ_BARRIER_TIMEOUT_MS))
        # Watch connections by peer address, to the peers the core's last `WatchPeers` named (see _watch_peers).
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._watch_wanted: frozenset[str] = frozenset()

    # -- lifecycle ---------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        assert self.loop is not None
        return int(self.loop.time() * 1000)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._applied_event = asyncio.Event()
        cfg, settings = self.config, self.config.settings
        self.sender = PeerSender(
            cfg.transport_address,
            self._on_send_failure,
            self.auth,
            request_timeout_s=settings[TRANSPORT_REQUEST_TIMEOUT] / 1000,
            connect_timeout_s=settings[TRANSPORT_CONNECT_TIMEOUT] / 1000,
            retries=settings[TRANSPORT_RETRIES],
            queue_size=settings[TRANSPORT_QUEUE_SIZE],
            tls_client=self.transport_tls,
            peer_name=self.peer_name,
            max_chunk_size=settings[TRANSPORT_MAX_CHUNK_SIZE],
            refusals=self.refusals,
            trust=self.transport_trust,
            version=self.version,
        )
        await self.sender.start()
        await self.hooks.start()
        self.coordinator = Coordinator(
            local_node=self.local_node,
            settings=settings,
            persisted=self.persist_monitor,
            rng=random.Random(),
            now=self.now_ms(),
            derivations=self.derivations,
            version=self.version,
        )
        self._run(self.coordinator.start)
        self._sweeper = self.loop.create_task(self._sweep_lost_completions())
        self._progress = self.loop.create_task(self._stream_progress(settings[STREAM_PROGRESS_INTERVAL] / 1000))
        self.history_maintenance.start()
        if self.archive is not None:
            self._archiver = self.loop.create_task(self.archive.run())

    async def stop(self, handover_timeout_s: float = 2.0) -> None:
        """Graceful stop: a master hands over leadership first; the handover message leaves before we close."""
        if self.coordinator is not None and not self.stopping:
            self._run(self.coordinator.stop)
        self.stopping = True
        # What the core decided before the stop (the handover, say) leaves once its writes are durable.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.group_commit.drain(), handover_timeout_s)
        self.group_commit.close()  # anything still held is dropped, as a crash would
        if self._timer is not None:
            self._timer.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._progress is not None:
            self._progress.cancel()
        self.close_client_waits()
        for task in self._watches.values():
            task.cancel()
        self._watches.clear()
        if self.sender is not None:
            await self.sender.flush(handover_timeout_s)
            await self.sender.close()
        await self.hooks.close()
        if self.authentication is not None:
            await self.authentication.close()  # the realms' own resources (a verifier's HTTP client, say)
        for future, _ in self._pending.values():
            if not future.done():
                future.set_result(ClusterError("node_closed_exception", "the node is stopping", 503, True))
        await self.history_maintenance.stop()
        if self.coordinator is not None:
            self._record_stop()
        await self._flush_archive()
        self.history.close()
        try:
            await asyncio.wait_for(self.group_commit.drain(), STORE_CLOSE_TIMEOUT_S)
        except TimeoutError:
            # A sync hangs in its thread (a stuck disk): closing the store under it is not safe; the process
            # exit releases it.
            log.error("the store's sync did not return within %ss; not closing the store", STORE_CLOSE_TIMEOUT_S)
        else:
            self.persisted.close()
        self.lock.release()

    def close_client_waits(self) -> None:
        """Ends every streaming watch (with its last line) and answers every long-polling watch: the node is
        stopping. Idempotent."""
        self.watch_streams.close()
        self.key_watches.close()

    # -- feeding the core --------------------------------------------------------------------------------

    def _run(self, call: Callable[[int], list[Effect]], now: int | None = None) -> None:
        if self.stopping:
            return
        try:
            effects = call(self.now_ms() if now is None else now)
        except Exception:
            # A bug in the core must not take the node down; it is logged loudly instead.
            log.exception("the coordinator failed to handle an event")
            effects = []
        self.group_commit.submit(effects)
        self._arm_timer()

    def current_term(self) -> int:
        """The node's current term, as its store holds it, for the transport to drop stale chunked states."""
        return self.persisted.current_term

    def _on_sync_failure(self, reason: str) -> None:
        self.persist_monitor.failure = reason

    def handle_message(self, sender: str, message: Message) -> None:
        assert self.coordinator is not None
        coordinator = self.coordinator
        self._run(lambda now: coordinator.handle_message(sender, message, now))

    def handle_undecodable(self, frame: Undecodable, problem: str) -> None:
        """A peer's frame that does not decode as a message (a newer node's): the core answers or drops it."""
        assert self.coordinator is not None
        coordinator = self.coordinator
        self._run(lambda now: coordinator.handle_undecodable(frame.sender, frame.kind, frame.request_id, problem, now))

    def _on_send_failure(self, destination: str, message: Message) -> None:
        assert self.coordinator is not None
        coordinator = self.coordinator
        self._run(lambda now: coordinator.handle_send_failure(destination, message, now))

    def _arm_timer(self) -> None:
        assert self.coordinator is not None and self.loop is not None
        deadline = None if self.stopping else self.coordinator.next_deadline()
        if deadline == self._timer_at and (deadline is None or self._timer is not None):
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = deadline
        if deadline is not None:
            self._timer = self.loop.call_at(deadline / 1000, self._on_timer, deadline)

    def _watch_peers(self) -> None:
        """Hold a watch connection to each peer the core named in its last `WatchPeers` (the peers whose death
        it must learn at once: `coordination.peer_watch`), and to none while stopping."""
        wanted = frozenset() if self.stopping else self._watch_wanted
        for address in set(self._watches) - wanted:
            self._watches.pop(address).cancel()
        for address in wanted - set(self._watches):
            self._watches[address] = asyncio.get_running_loop().create_task(self._watch(address))

    async def _watch(self, address: str) -> None:
        assert self.sender is not None and self.sender.session is not None
        loop = asyncio.get_running_loop()
        this = asyncio.current_task()
        started = loop.time()
        reason = await watch_until_closed(
            self.sender.session, address, self.auth, self.transport_tls, self.transport_trust
        )
        if loop.time() - started < 0.05:
            # Could not even connect (a peer still starting, say): do not report it at a high rate.
            await asyncio.sleep(0.5)
        if self._watches.get(address) is not this or self.stopping:
            return
        del self._watches[address]
        log.info("connection to %s lost (%s)", address, reason)
        coordinator = self.coordinator
        assert coordinator is not None
        self._run(lambda now: coordinator.handle_peer_disconnected(address, now))
        self._watch_peers()  # connect again if the core still wants this peer watched

    def _on_timer(self, deadline: int) -> None:
        assert self.coordinator is not None
        self._timer = None
        self._timer_at = None
        # call_at may fire a hair before the deadline in integer milliseconds; never tick "early".
        self._run(self.coordinator.tick, now=max(self.now_ms(), deadline))

    # -- effects -----------------------------------------------------------------------------------------

    def _execute(self, effects: list[Effect]) -> None:
        folded = -1  # the index of an `applied` event already written with the `committed` before it
        for index, effect in enumerate(effects):
            if index == folded:
                continue
            if isinstance(effect, RecordHistory) and folds_with_next(effects, index):
                self.record_history(effect.event, folded_applied=effects[index + 1])
                folded = index + 1
            elif isinstance(effect, Send) and effect.destination == self.local_node.transport_address:
                # After this callback, so that the sends queued before it reach the network first.
                assert self.loop is not None
                self.loop.call_soon(self.handle_message, effect.destination, effect.message)
            elif isinstance(effect, Send):
                assert self.sender is not None
                self.sender.send(effect.destination, effect.message)
            elif isinstance(effect, RecordHistory):
                self.record_history(effect.event)
            elif isinstance(effect, StateApplied):
                self._on_applied(effect.state)
            elif isinstance(effect, RequestCompleted):
                pending = self._pending.pop(effect.request_id, None)
                if pending is not None and not pending[0].done():
                    pending[0].set_result(effect.result)
            elif isinstance(effect, ProbeSeeds):
                if not self._probing:
                    self._probing = True
                    asyncio.get_running_loop().create_task(self._resolve_seeds())
            elif isinstance(effect, PublicationFinished):
                self.metrics.on_publication(effect)
            elif isinstance(effect, WatchPeers):
                self._watch_wanted = effect.addresses
                self._watch_peers()
            elif isinstance(effect, Log):
                log.log(_LOG_LEVELS.get(effect.level, logging.INFO), effect.message)
            else:
                assert_never(effect)

    async def _flush_archive(self) -> None:
        """Close the current segment and give the archive a bounded time to upload what is pending."""
        if self.archive is not None and self._archiver is not None:
            self.history.rotate()
            try:
                await self.history_maintenance.run_once()  # compresses it: the archive takes compressed segments
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
        await self.object_store.close()

    def _archive(self, settings: ArchiveSettings | None) -> SegmentArchive | None:
        if settings is None:
            return None

        def cluster_uuid() -> str | None:
            state = self.persisted.last_accepted_state
            return state.cluster_uuid if state.cluster_uuid_committed else None

        return SegmentArchive(
            settings,
            self.object_store.bucket(settings.client, settings.bucket),
            self.node_id,
            cluster_uuid,
            lambda: compressed_segments(self.history_dir),
            self._on_archived,
        )

    def _on_archived(self, segment: Path, location: str) -> None:
        """An `archived` event, about the node's term and accepted configuration like its other non-state events."""
        state = self.persisted.last_accepted_state
        self.record_history(
            HistoryEvent(
                cluster_uuid=state.cluster_uuid if state.cluster_uuid_committed else NO_CLUSTER_UUID,
                node=self.node_id,
                node_name=self.local_node.name,
                type=EventType.ARCHIVED,
                term=self.current_term(),
                last_committed_config=state.last_committed_config.node_ids,
                last_accepted_config=state.last_accepted_config.node_ids,
                location=location,
            )
        )

    def record_history(self, event: HistoryEvent, folded_applied: Effect | None = None) -> None:
        """Append an event to this node's history: the core's, or the shell's own (a snapshot taken). With
        `folded_applied` (the RecordHistory right after a follower's `committed` of the same state), both are
        one format-2 line."""
        if isinstance(folded_applied, RecordHistory):
            self.history.append(folded_applied.event, folds_commit=True)
            self.metrics.on_history(event.type)
            self.metrics.on_history(folded_applied.event.type)
            return
        self.history.append(event)
        self.metrics.on_history(event.type)

    def _record_stop(self) -> None:
        """The `stopped` event: the core has stopped and every effect it left held was dropped above, so no
        event of this process's core can follow it (see EventType.STOPPED). Written before the archive takes
        the last segment, so that a node stopped for good leaves it in object storage too."""
        self.record_history(
            msgspec.structs.replace(self.history_identity(), type=EventType.STOPPED, reason="graceful stop")
        )

    def history_identity(self) -> HistoryEvent:
        """The node's own fields for the history's own events (`retention_cut`, `history_lost`): its cluster,
        current term and configurations, as the core fills them in for a `term` event."""
        state = self.persisted.last_accepted_state
        return HistoryEvent(
            cluster_uuid=state.cluster_uuid,
            node=self.node_id,
            node_name=self.local_node.name,
            type=EventType.TERM,
            term=self.persisted.current_term,
            last_committed_config=state.last_committed_config.node_ids,
            last_accepted_config=state.last_accepted_config.node_ids,
        )

    def _on_applied(self, state: ClusterState) -> None:
        before = self.applied_state
        self.listings.on_applied(before, state)
        self.quota_usage.advance(before, state)
        self.applied_state = state
        if state.security is not before.security and self.watch_streams.streams:
            # Before this node acknowledges the change: no stream serves a principal by the old rules.
            self.watch_streams.refuse_streams(self._stream_missing)
        # Wake every long-poll; each re-checks its own version.
        self._applied_event.set()
        self._applied_event = asyncio.Event()
        self.key_watches.on_applied(state)
        if state.master_node is None:
            self.watch_streams.lost_master()
        step = self.key_watches.log.newest
        if step is not None and self.watch_streams.streams:
            # Two turns of the event loop later: after the effects of this state (an apply's ack to the master, a
            # write's answer, whose handler resumes in the next turn) have gone out.
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, self.watch_streams.deliver, step)
        self.hooks.notify(state, self.node_id)

    async def _resolve_seeds(self) -> None:
        """Resolve every seed afresh; a DNS name stands for all of its addresses (a headless Service)."""
        assert self.loop is not None and self.coordinator is not None
        try:
            addresses: list[str] = []
            unresolved: list[str] = []
            for seed in self.config.settings[SEED_HOSTS]:  # a node-level setting: the applied state cannot set it
                host, _, port = seed.rpartition(":")
                host = host.strip("[]")
                try:
                    infos = await self.loop.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
                except (OSError, UnicodeError) as error:
                    unresolved.append(f"{seed} ({error})")
                    continue
                for family, _, _, _, sockaddr in infos:
                    ip = str(sockaddr[0])
                    address = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
                    if address not in addresses:
                        addresses.append(address)
            if unresolved != self.unresolved_seeds and unresolved:
                log.warning("cannot resolve seed hosts: %s", ", ".join(unresolved))
            self.unresolved_seeds = unresolved
        finally:
            self._probing = False
        coordinator = self.coordinator
        self._run(lambda now: coordinator.handle_seed_addresses(addresses, now))

    def quota_statuses(self) -> list[QuotaStatus]:
        """Every quota of the applied state with its usage (watch streams: this node's own)."""
        state = self.applied_state
        security = state.security_metadata()
        if security is None or not security.quotas:
            return []
        usage = self.quota_usage.at(state).usage
        statuses = []
        for name, quota in sorted(security.quotas.items()):
            counted = usage.get(name)
            used = {"watch_streams": self.stream_quotas.count(quota.prefix)}
            if counted is not None:
                used.update(keys=counted.keys, bytes=counted.bytes, sessions=counted.sessions)
            statuses.append(QuotaStatus(name, quota.prefix, quota.limits(), used))
        return statuses

    def _tokens_changed(self, principals: frozenset[Principal]) -> None:
        """The tokens file changed: the open streams of a principal whose tokens are all gone end."""

        def gone(principal: Principal, prefixes: tuple[str, ...]) -> str | None:
            if principal.realm != REALM_FILE or principal in principals:
                return None
            return "its token is no longer in the tokens file"

        if self.watch_streams.streams:
            self.watch_streams.refuse_streams(gone, "may no longer watch: ")

    def _stream_missing(self, principal: Principal, prefixes: tuple[str, ...]) -> str | None:
        permissions = self.permissions(principal)
        return permissions.missing(KeyAccess(READ, prefix, prefix=True) for prefix in prefixes)

    # -- for the client API ------------------------------------------------------------------------------

    def access_control_off(self) -> str | None:
        """Why what needs access control (roles, role mappings, quotas, a session's prefix) is refused now, or
        None once this node's applied state has it on: the members that lack feature [access_control], or, once
        every member has it, that the next published state turns it on."""
        if self.applied_state.security_metadata() is not None:
            return None
        versions = self.coordinator.status().versions if self.coordinator is not None else None
        if versions is not None and not versions.features.get(ACCESS_CONTROL.name, False):
            nodes = self.applied_state.nodes
            lacking = {
                nodes[node_id].name if node_id in nodes else node_id: version
                for node_id, version in versions.node_versions.items()
                if version is None or not version.has(ACCESS_CONTROL)
            }
            return feature_not_available(ACCESS_CONTROL, lacking).reason
        return (
            f"access control is not on yet: every node has feature {ACCESS_CONTROL.describe()}, and the next "
            "state the master publishes turns it on; retry"
        )

    def permissions(self, principal: Principal) -> Permissions:
        """What `principal` may do, by the roles and role mappings of this node's applied state."""
        return self.authorizer.permissions(principal, self.applied_state.security_metadata())

    async def call(self, request: ClientRequest[R], timeout_ms: int | None = None) -> R | ClusterError:
        """`submit`, typed by the request (a `ClientRequest[R]` answers an R): any other answer becomes an internal
        error here, once, rather than in every handler."""
        return checked_result(request, await self.submit(request, timeout_ms))

    async def submit(self, request: ClientRequest[Any], timeout_ms: int | None = None) -> ClientResult:
        """The request goes to the core as made by the principal of the client request being handled (the access
        middleware's `CURRENT_PRINCIPAL`), which the master authorizes it for."""
        assert self.coordinator is not None and self.loop is not None
        principal = CURRENT_PRINCIPAL.get()
        if self.stopping:
            return ClusterError("node_closed_exception", "the node is stopping", 503)
        request_id = next(self._request_ids)
        future: asyncio.Future[ClientResult] = self.loop.create_future()
        # The core times the request out itself; the give-up time is only a safety net against a lost
        # completion (see `_sweep_lost_completions`).
        give_up_at = self.loop.time() + (timeout_ms or 30_000) / 1000 + LOST_COMPLETION_MARGIN_S
        self._pending[request_id] = (future, give_up_at)
        coordinator = self.coordinator
        submitted = request if principal is None else Authenticated(request, principal)
        self._run(lambda now: coordinator.submit(request_id, submitted, now, timeout_ms))
        return await future

    async def _stream_progress(self, interval_s: float) -> None:
        """Progress lines to the idle watch streams, one round every interval."""
        while True:
            await asyncio.sleep(interval_s)
            self.watch_streams.progress()

    async def _sweep_lost_completions(self) -> None:
        """Answers the requests whose completion the core never reported in time: one pass every
        LOST_COMPLETION_SWEEP_S rather than a timer per request, which every write would create and cancel."""
        assert self.loop is not None
        while True:
            await asyncio.sleep(LOST_COMPLETION_SWEEP_S)
            now = self.loop.time()
            for request_id in [rid for rid, (_, give_up_at) in self._pending.items() if give_up_at <= now]:
                future, _ = self._pending.pop(request_id)
                if not future.done():
                    future.set_result(
                        ClusterError("timeout_exception", "no result from the coordinator in time", 503, True)
                    )

    async def wait_for_version(self, version: int, timeout_s: float) -> bool:
        """True once this node has applied `version` or later, False on timeout."""
        assert self.loop is not None
        deadline = self.loop.time() + timeout_s
        while self.applied_state.version < version:
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._applied_event.wait(), remaining)
            except TimeoutError:
                return False
        return True

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        assert self.loop is not None
        deadline = self.loop.time() + timeout_s
        while not predicate():
            remaining = deadline - self.loop.time()
            if remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._applied_event.wait(), remaining)
            except TimeoutError:
                return predicate()
        return True

    def peer_name(self, address: str) -> str:
        """The node name at a transport address, for metric labels: from the applied state, the last accepted
        one (a node that is joining), or the peers discovery found; UNKNOWN_PEER for a seed host not yet probed."""
        states = (self.applied_state, self.persisted.last_accepted_state)
        for state in states:
            for node in state.nodes.values():
                if node.transport_address == address:
                    return node.name
        if self.coordinator is not None:
            return self.coordinator.status().peer_names.get(address, UNKNOWN_PEER)
        return UNKNOWN_PEER

    def status_snapshot(self) -> StatusSnapshot | None:
        """What the metrics report, read at scrape time; None before the core starts."""
        coordinator = self.coordinator
        if coordinator is None:
            return None
        state, core = self.applied_state, coordinator.status()
        return StatusSnapshot(
            current_term=core.term,
            mode=core.mode,
            applied_version=state.version,
            applied_nodes=len(state.nodes),
            elections_won=core.elections_won,
            failed_publications=core.failed_publications,
            lagging_nodes_removed=core.lagging_nodes_removed,
            history_bytes=self.history.total_bytes(),
            persisted_bytes=self.persisted.bytes_written,
            sent_bytes=dict(self.sender.bytes_sent) if self.sender is not None else None,
            dropped_messages=self.sender.dropped if self.sender is not None else 0,
            follower_lag=dict(core.follower_lag) if core.follower_lag is not None else None,
            watches_waiting=self.key_watches.parked,
            watch_streams=self.watch_streams.streams,
            change_log_events=self.key_watches.log.events,
            sessions_active=len(state.sessions),
            ephemeral_keys=len(state.kv_sessions),
            archive=self.archive.status() if self.archive is not None else None,
            state_bytes=core.state_bytes,
            max_state_bytes=core.max_state_bytes,
            problems=count_by_kind(self.problems()),
        )

    def problems(self) -> list[NodeProblem]:
        """What is wrong with this node now (see `problems`)."""
        found: list[NodeProblem] = []
        if self.persist_monitor.failure:
            found.append(NodeProblem(ProblemKind.PERSISTENCE, self.persist_monitor.failure))
        for lost in (*self.persisted.files.problems(), *self.file_watch.problems()):
            found.append(NodeProblem(ProblemKind.DATA_FILE, lost.describe()))
        if self.authentication is not None:
            for problem in self.authentication.problems():
                found.append(NodeProblem(ProblemKind.TOKENS_FILE, problem))
            for problem in self.authentication.realm_problems():
                found.append(NodeProblem(ProblemKind.AUTH_REALM, problem))
        for refusal in self.refusals.recent():
            found.append(NodeProblem(ProblemKind.TRANSPORT, refusal.describe()))
        history = self.history_maintenance.status
        if history.disk_problem:
            found.append(NodeProblem(ProblemKind.DISK, history.disk_problem))
        if history.history_problem:
            found.append(NodeProblem(ProblemKind.HISTORY, history.history_problem))
        archive_problem = self.archive.status().problem if self.archive is not None else None
        if archive_problem:
            found.append(NodeProblem(ProblemKind.ARCHIVE, archive_problem))
        if self.archive is not None and history.unarchived_deleted:
            found.append(
                NodeProblem(
                    ProblemKind.ARCHIVE,
                    f"{history.unarchived_deleted} closed history segments were deleted before the archive had "
                    "them (the data volume was past history.disk.watermark.flood_stage): the archive lacks them",
                )
            )
        return found

    @property
    def history_dir(self) -> Path:
        return self.config.data_dir / "history"
