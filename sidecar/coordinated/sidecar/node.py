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
from coordinated.coordination.history import HistoryEvent
from coordinated.coordination.messages import Message
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.requests.keys import ReadBarrier
from coordinated.coordination.security import REALM_FILE
from coordinated.coordination.settings import CLUSTER_NAME, NODE_ROLES
from coordinated.coordination.state import Derivations, DiscoveryNode
from coordinated.coordination.wire_versions import ACCESS_CONTROL
from coordinated.release import node_version
from coordinated.s3.object_store import Bucket, ObjectStore
from coordinated.s3.s3_settings import S3ClientSettings
from coordinated.sidecar.auth.authenticators import Authentication, build_authenticators
from coordinated.sidecar.auth.principal import CURRENT_PRINCIPAL
from coordinated.sidecar.auth.tokens_file import Tokens
from coordinated.sidecar.config import NodeConfig
from coordinated.sidecar.events.history import folds_with_next
from coordinated.sidecar.events.history_metrics import HistoryCollector
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.events.node_history import NodeHistory
from coordinated.sidecar.features.hooks import HookManager
from coordinated.sidecar.features.hooks_settings import HOOKS_TIMEOUT, HOOKS_UNIX_SOCKET_DIR
from coordinated.sidecar.features.key_services import KeyServices
from coordinated.sidecar.features.snapshot_settings import SNAPSHOT_SECRET_FILE
from coordinated.sidecar.observability.certificates import CertificateCollector
from coordinated.sidecar.observability.metrics import UNKNOWN_PEER, NodeMetrics, StatusSnapshot
from coordinated.sidecar.observability.node_status import NodeStatus
from coordinated.sidecar.observability.problems import NodeProblem, ProblemKind, count_by_kind
from coordinated.sidecar.observability.quota_metrics import QuotaCollector, QuotaStatus
from coordinated.sidecar.peers.auth import TransportAuth
from coordinated.sidecar.peers.auth_settings import SECRET_FILE
from coordinated.sidecar.peers.framing import Undecodable
from coordinated.sidecar.peers.refusals import Refusals
from coordinated.sidecar.peers.sender import PeerSender, watch_until_closed
from coordinated.sidecar.peers.tls import ReloadingContext, TrustRestrictions
from coordinated.sidecar.peers.tls_settings import HTTP_TLS, TRANSPORT_SSL_TRUST_RESTRICTIONS, TRANSPORT_TLS, Side
from coordinated.sidecar.peers.transport_settings import (
    TRANSPORT_CONNECT_TIMEOUT,
    TRANSPORT_MAX_CHUNK_SIZE,
    TRANSPORT_QUEUE_SIZE,
    TRANSPORT_REQUEST_TIMEOUT,
    TRANSPORT_RETRIES,
)
from coordinated.sidecar.storage.node_store import NodeStore
from coordinated.sidecar.storage.persistence import HISTORY_DIR, HOOKS_FILE
from coordinated.sidecar.storage.persistence_settings import PERSISTENCE_SYNC, PersistenceSync
from coordinated.sidecar.web.access_settings import TOKENS_FILE
from coordinated.sidecar.web.http_chunks import chunk

log = logging.getLogger("coordinated.node")
R = TypeVar("R")  # what a request answers
READ_BARRIER_TIMEOUT_MS = 30_000
STORE_CLOSE_TIMEOUT_S = 10.0
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
        # How the node's states derive from one another: its core records them, its stores diff by them.
        self.derivations = Derivations()
        self.store = NodeStore(
            config.data_dir,
            settings[CLUSTER_NAME],
            deferred_sync=settings[PERSISTENCE_SYNC] is PersistenceSync.BACKGROUND,
            derivations=self.derivations,
            read_history=read_history_summary,
            # So that the change log keeps each accepted state until it is applied (its comparison of applied
            # states stays in proportion to the change).
            on_accepted=lambda state: self.keys.change_log.hold(state),
            execute=self._execute,
        )
        self.node_id = self.store.node_id
        persisted = self.store.persisted
        # Every S3 request of the node (the archive's, the snapshot repositories') runs on this store's thread.
        self.object_store = ObjectStore()
        self.metrics = NodeMetrics(self.status_snapshot)
        self.history = NodeHistory(
            config.data_dir,
            config.data_dir / HISTORY_DIR,
            settings,
            persisted,
            persisted.history_summary,
            self.node_id,
            config.node_name,
            self.object_store,
            self.metrics.on_history,
        )
        self.metrics.registry.register(HistoryCollector(lambda: self.history.status))
        secret_file = settings[SECRET_FILE]
        self.auth = TransportAuth.from_file(secret_file) if secret_file else None
        snapshot_secret_file = settings[SNAPSHOT_SECRET_FILE]
        self._snapshot_secret = Path(snapshot_secret_file).read_bytes().strip() if snapshot_secret_file else None
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
        self.metrics.registry.register(QuotaCollector(self.quota_statuses))
        self.metrics.registry.register(
            CertificateCollector({"transport": transport_tls, "http": HTTP_TLS.files(settings)})
        )
        self.hooks = HookManager(
            config.data_dir / HOOKS_FILE, settings[HOOKS_TIMEOUT] / 1000, settings[HOOKS_UNIX_SOCKET_DIR]
        )
        self.sender: PeerSender | None = None
        # request id -> (the future its handler awaits, the loop time after which the shell gives up on it)
        self._pending: dict[int, tuple[asyncio.Future[ClientResult], float]] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._request_ids = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._probing = False
        self._unresolved_seeds: list[str] = []
        self.stopping = False
        self.keys = KeyServices(
            settings,
            self.derivations,
            persisted.last_accepted_state.replace(master_node=None),
            chunk,
            lambda: self.call(ReadBarrier(), READ_BARRIER_TIMEOUT_MS),
            self._stream_missing,
        )
        # Watch connections by peer address, to the peers the core's last `WatchPeers` named (see _watch_peers).
        self._watches: dict[str, asyncio.Task[None]] = {}
        self._watch_wanted: frozenset[str] = frozenset()

    # -- lifecycle ---------------------------------------------------------------------------------------

    def now_ms(self) -> int:
        assert self.loop is not None
        return int(self.loop.time() * 1000)

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.keys.start()
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
            persisted=self.store.monitored,
            rng=random.Random(),
            now=self.now_ms(),
            derivations=self.derivations,
            version=self.version,
        )
        self._run(self.coordinator.start)
        self._sweeper = self.loop.create_task(self._sweep_lost_completions())
        self.history.start()

    async def stop(self, handover_timeout_s: float = 2.0) -> None:
        """Graceful stop: a master hands over leadership first; the handover message leaves before we close."""
        if self.coordinator is not None and not self.stopping:
            self._run(self.coordinator.stop)
        self.stopping = True
        group_commit = self.store.group_commit
        # What the core decided before the stop (the handover, say) leaves once its writes are durable.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(group_commit.drain(), handover_timeout_s)
        group_commit.close()  # anything still held is dropped, as a crash would
        if self._timer is not None:
            self._timer.cancel()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self.keys.stop()
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
        await self.history.stop(stopped=self.coordinator is not None)
        await self.object_store.close()
        await self.store.close(STORE_CLOSE_TIMEOUT_S)

    def close_unstarted(self) -> None:
        """Closes what opening the node took (its history segment, its store, the data directory's lock), for a
        node that will not start."""
        self.history.writer.close()
        self.store.persisted.close()
        self.store.lock.release()

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
        self.store.group_commit.submit(effects)
        self._arm_timer()

    def current_term(self) -> int:
        """The node's current term, as its store holds it, for the transport to drop stale chunked states."""
        return self.store.persisted.current_term

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
                self.history.record(effect.event, folded_applied=effects[index + 1])
                folded = index + 1
            elif isinstance(effect, Send) and effect.destination == self.local_node.transport_address:
                # After this callback, so that the sends queued before it reach the network first.
                assert self.loop is not None
                self.loop.call_soon(self.handle_message, effect.destination, effect.message)
            elif isinstance(effect, Send):
                assert self.sender is not None
                self.sender.send(effect.destination, effect.message)
            elif isinstance(effect, RecordHistory):
                self.history.record(effect.event)
            elif isinstance(effect, StateApplied):
                self.keys.on_applied(effect.state)
                self.hooks.notify(effect.state, self.node_id)
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
            if unresolved != self._unresolved_seeds and unresolved:
                log.warning("cannot resolve seed hosts: %s", ", ".join(unresolved))
            self._unresolved_seeds = unresolved
        finally:
            self._probing = False
        coordinator = self.coordinator
        self._run(lambda now: coordinator.handle_seed_addresses(addresses, now))

    def quota_statuses(self) -> list[QuotaStatus]:
        """Every quota of the applied state with its usage (watch streams: this node's own)."""
        state = self.keys.applied_state
        security = state.security_metadata()
        if security is None or not security.quotas:
            return []
        usage = self.keys.quota_usage.at(state).usage
        statuses = []
        for name, quota in sorted(security.quotas.items()):
            counted = usage.get(name)
            used = {"watch_streams": self.keys.stream_quotas.count(quota.prefix)}
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

        if self.keys.watch_streams.streams:
            self.keys.watch_streams.refuse_streams(gone, "may no longer watch: ")

    def _stream_missing(self, principal: Principal, prefixes: tuple[str, ...]) -> str | None:
        permissions = self.permissions(principal)
        return permissions.missing(KeyAccess(READ, prefix, prefix=True) for prefix in prefixes)

    # -- for the client API ------------------------------------------------------------------------------

    def access_control_off(self) -> str | None:
        """Why what needs access control (roles, role mappings, quotas, a session's prefix) is refused now, or
        None once this node's applied state has it on: the members that lack feature [access_control], or, once
        every member has it, that the next published state turns it on."""
        state = self.keys.applied_state
        if state.security_metadata() is not None:
            return None
        versions = self.coordinator.status().versions if self.coordinator is not None else None
        if versions is not None and not versions.features.get(ACCESS_CONTROL.name, False):
            nodes = state.nodes
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
        return self.authorizer.permissions(principal, self.keys.applied_state.security_metadata())

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

    def record_history(self, event: HistoryEvent) -> None:
        """Append one of the shell's own events (a snapshot taken or restored) to this node's history."""
        self.history.record(event)

    def snapshot_secret(self) -> bytes | None:
        """The key that seals this node's snapshots (`snapshot.secret_file`); None without one."""
        return self._snapshot_secret

    def snapshot_bucket(self, client: S3ClientSettings, bucket: str) -> Bucket:
        """A snapshot repository's bucket, on the node's object store (whose thread every S3 request runs on)."""
        return self.object_store.bucket(client, bucket)

    def peer_name(self, address: str) -> str:
        """The node name at a transport address, for metric labels: from the applied state, the last accepted
        one (a node that is joining), or the peers discovery found; UNKNOWN_PEER for a seed host not yet probed."""
        states = (self.keys.applied_state, self.store.persisted.last_accepted_state)
        for state in states:
            for node in state.nodes.values():
                if node.transport_address == address:
                    return node.name
        if self.coordinator is not None:
            return self.coordinator.status().peer_names.get(address, UNKNOWN_PEER)
        return UNKNOWN_PEER

    def status(self) -> NodeStatus:
        """A frozen snapshot of this node, what the client API and health read of it (besides `call`, the key
        services and `problems`)."""
        coordinator = self.coordinator
        return NodeStatus(
            node_id=self.node_id,
            node_name=self.local_node.name,
            transport_address=self.local_node.transport_address,
            settings=self.config.settings,
            history_dir=self.history.directory,
            applied_state=self.keys.applied_state,
            core=coordinator.status() if coordinator is not None else None,
            unresolved_seeds=tuple(self._unresolved_seeds),
            persistence_failure=self.store.failure,
            history=self.history.status,
        )

    def status_snapshot(self) -> StatusSnapshot | None:
        """What the metrics report, read at scrape time: the node's status and its parts' counters; None before
        the core starts."""
        status = self.status()
        state, core = status.applied_state, status.core
        if core is None:
            return None
        return StatusSnapshot(
            current_term=core.term,
            mode=core.mode,
            applied_version=state.version,
            applied_nodes=len(state.nodes),
            elections_won=core.elections_won,
            failed_publications=core.failed_publications,
            lagging_nodes_removed=core.lagging_nodes_removed,
            history_bytes=self.history.writer.total_bytes(),
            persisted_bytes=self.store.persisted.bytes_written,
            sent_bytes=dict(self.sender.bytes_sent) if self.sender is not None else None,
            dropped_messages=self.sender.dropped if self.sender is not None else 0,
            follower_lag=dict(core.follower_lag) if core.follower_lag is not None else None,
            watches_waiting=self.keys.key_watches.parked,
            watch_streams=self.keys.watch_streams.streams,
            change_log_events=self.keys.change_log.events,
            sessions_active=len(state.sessions),
            ephemeral_keys=len(state.kv_sessions),
            archive=self.history.archive_status(),
            state_bytes=core.state_bytes,
            max_state_bytes=core.max_state_bytes,
            problems=count_by_kind(self.problems()),
        )

    def problems(self) -> list[NodeProblem]:
        """What is wrong with this node now (see `problems`): its checks look at the data directory."""
        found: list[NodeProblem] = []
        if self.store.failure:
            found.append(NodeProblem(ProblemKind.PERSISTENCE, self.store.failure))
        for lost in self.store.lost_files():
            found.append(NodeProblem(ProblemKind.DATA_FILE, lost.describe()))
        if self.authentication is not None:
            for problem in self.authentication.problems():
                found.append(NodeProblem(ProblemKind.TOKENS_FILE, problem))
            for problem in self.authentication.realm_problems():
                found.append(NodeProblem(ProblemKind.AUTH_REALM, problem))
        for refusal in self.refusals.recent():
            found.append(NodeProblem(ProblemKind.TRANSPORT, refusal.describe()))
        history = self.history.status
        if history.disk_problem:
            found.append(NodeProblem(ProblemKind.DISK, history.disk_problem))
        if history.history_problem:
            found.append(NodeProblem(ProblemKind.HISTORY, history.history_problem))
        archive = self.history.archive_status()
        if archive is not None and archive.problem:
            found.append(NodeProblem(ProblemKind.ARCHIVE, archive.problem))
        if archive is not None and history.unarchived_deleted:
            found.append(
                NodeProblem(
                    ProblemKind.ARCHIVE,
                    f"{history.unarchived_deleted} closed history segments were deleted before the archive had "
                    "them (the data volume was past history.disk.watermark.flood_stage): the archive lacks them",
                )
            )
        return found
