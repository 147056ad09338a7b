"""The coordinator: Zen2's modes, discovery, elections, publication and fault detection, without I/O.

Public API (used by the sidecar and the simulator):

    coordinator = Coordinator(local_node=..., settings=..., persisted=..., rng=random.Random(seed), now=now_ms)
    effects = coordinator.start(now)
    effects = coordinator.handle_message(sender_address, message, now)
    effects = coordinator.handle_send_failure(destination_address, message, now)  # connection refused/closed
    effects = coordinator.handle_seed_addresses(addresses, now)                     # answer to ProbeSeeds
    effects = coordinator.handle_peer_disconnected(address, now)                    # a peer's connection closed
    effects = coordinator.tick(now)                      # call at or after coordinator.next_deadline
    effects = coordinator.submit(request_id, request, now, timeout_ms=None)         # a ClientRequest
    effects = coordinator.stop(now)                      # graceful stop: a master hands over first

Every call returns a list of effects, which the shell carries out in order. Time is in milliseconds on any
monotonic clock the shell chooses. The core never blocks and never sleeps; timeouts are its own timers.
Messages a node sends to itself are handled inside the same call, before it returns.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from msgspec.structs import replace

from coordinated.coordination import client
from coordinated.coordination.batch import BatchContext, execute_batch, improve_configuration
from coordinated.coordination.client import (
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    ClientRequest,
    ClientResult,
    ClusterError,
    Committed,
    KvDelete,
    KvGet,
    KvPut,
    LinearizableRead,
    ReadBarrier,
    ReadValue,
    UpdateSettings,
)
from coordinated.coordination.effects import (
    Effect,
    Log,
    ProbeSeeds,
    PublicationFinished,
    RecordHistory,
    RequestCompleted,
    Send,
    StateApplied,
)
from coordinated.coordination.foreign_clusters import ForeignClusters
from coordinated.coordination.master_service import MasterService, Priority, Task
from coordinated.coordination.messages import (
    ApplyCommit,
    ApplyCommitResponse,
    FollowerCheck,
    FollowerCheckResponse,
    ForwardedRequest,
    ForwardedResponse,
    Join,
    JoinRequest,
    JoinResponse,
    LeaderCheck,
    LeaderCheckResponse,
    LeadershipProbe,
    LeadershipProbeResponse,
    Message,
    PeersRequest,
    PeersResponse,
    PreVoteRequest,
    PreVoteResponse,
    PublishRequest,
    PublishResponse,
    StartJoinRequest,
)
from coordinated.coordination.publication import Publication, TargetState
from coordinated.coordination.reconfigurator import reconfigure
from coordinated.coordination.safety import CoordinationState, CoordinationStateRejected, PersistedState
from coordinated.coordination.settings import CoordinationSettings
from coordinated.coordination.state import (
    UNKNOWN_UUID,
    ClusterState,
    DiscoveryNode,
    IncompatibleDiffError,
    VotingConfiguration,
    apply_diff,
    compute_diff,
)
from coordinated.coordination.timers import Timers
from coordinated.coordination.validation import request_problem

DEFAULT_REQUEST_TIMEOUT_MS = 30_000
JOIN_TIMEOUT_MS = 10_000


class Mode(StrEnum):
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"
    FOLLOWER = "FOLLOWER"


@dataclass
class _Forward:
    request: ClientRequest
    reply: Callable[[ClientResult], None]


@dataclass
class _ReadRound:
    round_id: int
    term: int
    reads: list[tuple[LinearizableRead, ClusterState, Callable[[ClientResult], None]]]
    confirmed: set[str]


@dataclass
class _ExclusionWait:
    node_ids: frozenset[str]
    deadline: int
    reply: Callable[[ClientResult], None]


class Coordinator:
    def __init__(
        self,
        *,
        local_node: DiscoveryNode,
        settings: CoordinationSettings,
        persisted: PersistedState,
        rng: random.Random,
        now: int,
    ) -> None:
        self.local_node = local_node
        self.base_settings = settings
        self.persisted = persisted
        self.rng = rng
        self.now = now
        self.coordination_state = CoordinationState(local_node.id, persisted)
        self.mode = Mode.CANDIDATE
        self.leader: DiscoveryNode | None = None
        self.max_term_seen = persisted.current_term
        # What is visible locally. Until a master publishes, the last-accepted state under a no-master view.
        self.applied_state = persisted.last_accepted_state.replace(master_node=None)
        self.last_join: Join | None = None
        self.last_applied: tuple[int, int] = (0, 0)
        self.next_vote_collection_at = 0
        self.stopped = False
        self.timers = Timers()
        self._out: list[Effect] = []
        self._loopback: deque[tuple[str, Message]] = deque()
        self._next_request_id = 0
        # discovery
        self.peers: dict[str, DiscoveryNode] = {}  # transport address -> node, for peers that answered
        self.unreachable: set[str] = set()  # addresses whose last probe failed
        self.seed_addresses: tuple[str, ...] = ()
        self.foreign_clusters = ForeignClusters()  # peers that answered with another cluster UUID
        self.peers_seen_terms: dict[str, int] = {}
        self.discovered_master: DiscoveryNode | None = None
        self.join_request_in_flight: str | None = None
        self.join_retry_at = 0
        # elections
        self.election_attempt = 0
        self.pre_vote_round = 0
        self.pre_votes: set[str] = set()
        self.election_started_in_round = False
        self.pending_joins: dict[str, tuple[DiscoveryNode, int, str]] = {}  # node id -> (node, request id, addr)
        # leader
        self.master_service = MasterService()
        self.publication: Publication | None = None
        self.applied_in_current_term = False
        self.follower_failures: dict[str, int] = {}
        # node id -> (request id, address) of the follower check awaiting an answer. Keyed by node id, not
        # address: a node that comes back at a new address (a rescheduled pod) must stay checked.
        self.follower_checks_in_flight: dict[str, tuple[int, str]] = {}
        self.node_applied_version: dict[str, int] = {}
        self.read_queue: list[tuple[LinearizableRead, Callable[[ClientResult], None]]] = []
        self.read_round: _ReadRound | None = None
        self.exclusion_waits: list[_ExclusionWait] = []
        self.removal_waits: list[tuple[int, Callable[[ClientResult], None]]] = []  # (deadline, reply)
        # follower
        self.leader_check_failures = 0
        self.leader_check_id = 0
        self.forwards: dict[int, _Forward] = {}
        # counters for metrics
        self.elections_won = 0
        self.failed_publications = 0
        self.lagging_nodes_removed = 0

    # ------------------------------------------------------------------------------------------------------
    # public API

    @property
    def settings(self) -> CoordinationSettings:
        return self.base_settings.with_dynamic(self.applied_state.persistent_settings)

    @property
    def current_term(self) -> int:
        return self.coordination_state.current_term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self.coordination_state.last_accepted_state

    @property
    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def start(self, now: int) -> list[Effect]:
        return self._step(now, self._start)

    def handle_message(self, sender: str, message: Message, now: int) -> list[Effect]:
        return self._step(now, lambda: self._dispatch(sender, message))

    def handle_send_failure(self, destination: str, message: Message, now: int) -> list[Effect]:
        return self._step(now, lambda: self._on_send_failure(destination, message))

    def handle_peer_disconnected(self, address: str, now: int) -> list[Effect]:
        """A connection to a peer closed: a leader or follower check fails at once, without a timeout."""
        return self._step(now, lambda: self._on_peer_disconnected(address))

    def handle_seed_addresses(self, addresses: Sequence[str], now: int) -> list[Effect]:
        return self._step(now, lambda: self._probe(addresses))

    def tick(self, now: int) -> list[Effect]:
        def fire_due() -> None:
            while (callback := self.timers.pop_due(self.now)) is not None:
                callback()
                self._drain_loopback()

        return self._step(now, fire_due)

    def submit(self, request_id: int, request: ClientRequest, now: int, timeout_ms: int | None = None) -> list[Effect]:
        def reply(result: ClientResult) -> None:
            self._out.append(RequestCompleted(request_id, result))

        timeout = DEFAULT_REQUEST_TIMEOUT_MS if timeout_ms is None else timeout_ms
        return self._step(now, lambda: self._handle_client_request(request, reply, timeout, forwarded=False))

    def stop(self, now: int) -> list[Effect]:
        def stop() -> None:
            if self.mode is Mode.LEADER:
                candidates = self._abdication_candidates(require_not_excluded=True)
                if candidates:
                    self._abdicate_to(self.rng.choice(candidates))
            self.stopped = True

        return self._step(now, stop)

    @property
    def formation_problem(self) -> str | None:
        """Why this node has not joined a cluster, or None if it has a master."""
        if self.mode is not Mode.CANDIDATE:
            return None
        state = self.last_accepted_state
        reasons: list[str] = []
        if not self.local_node.master_eligible:
            reasons.append("this node is not master-eligible and has not discovered a master")
        elif state.last_accepted_config.is_empty():
            names = self.base_settings.initial_master_nodes
            if not names:
                reasons.append(
                    "this node has not joined a bootstrapped cluster and cluster.initial_master_nodes is empty"
                )
            else:
                found = {node.name for node in self._discovered_nodes()}
                missing = sorted(set(names) - found)
                reasons.append(
                    f"cluster bootstrap is waiting for cluster.initial_master_nodes {list(names)}; "
                    f"not yet discovered: {missing}"
                )
        else:
            found_ids = {node.id for node in self._discovered_nodes()}
            for label, config in (
                ("last committed", state.last_committed_config),
                ("last accepted", state.last_accepted_config),
            ):
                if not config.has_quorum(found_ids):
                    missing = [node_id for node_id in config.node_ids if node_id not in found_ids]
                    reasons.append(
                        f"an election needs a quorum of the {label} voting configuration {list(config.node_ids)}; "
                        f"missing {missing}"
                    )
            if not reasons:
                reasons.append(f"an election is in progress (current term {self.current_term})")
        if self.unreachable:
            reasons.append(f"cannot reach {sorted(self.unreachable)}")
        return "master not discovered yet: " + "; ".join(reasons)

    def invariant(self) -> None:
        """Checks the core's own invariants; raises AssertionError."""
        self.coordination_state.invariant()
        if self.mode is Mode.LEADER:
            if not self.coordination_state.election_won:
                raise AssertionError("leader without an election won")
            if self.leader != self.local_node:
                raise AssertionError("leader does not name itself")
        if self.mode is Mode.FOLLOWER and (self.leader is None or self.leader.id == self.local_node.id):
            raise AssertionError("follower without another leader")
        if self.mode is Mode.CANDIDATE and self.leader is not None:
            raise AssertionError("candidate with a leader")
        if self.applied_state.version > self.last_accepted_state.version and self.applied_state.master_node:
            raise AssertionError("applied a state newer than the last accepted one")

    # ------------------------------------------------------------------------------------------------------
    # the step: run one event, then everything the node sent itself

    def _step(self, now: int, action: Callable[[], None]) -> list[Effect]:
        self.now = max(self.now, now)
        action()
        self._drain_loopback()
        out, self._out = self._out, []
        return out

    def _drain_loopback(self) -> None:
        while self._loopback:
            sender, message = self._loopback.popleft()
            self._dispatch(sender, message)

    def _send(self, address: str, message: Message) -> None:
        if address == self.local_node.transport_address:
            self._loopback.append((address, message))
        else:
            self._out.append(Send(address, message))

    def _log(self, level: str, message: str) -> None:
        self._out.append(Log(level, message))

    def _new_request_id(self) -> int:
        self._next_request_id += 1
        return self._next_request_id

    def _history(self, event_type: str, state: ClusterState | None = None, **extra: Any) -> None:
        basis = state or self.last_accepted_state
        event: dict[str, Any] = {
            "cluster_uuid": basis.cluster_uuid,
            "node": self.local_node.id,
            "node_name": self.local_node.name,
            "type": event_type,
            "term": basis.term if state is not None else self.current_term,
            "version": state.version if state is not None else None,
            "state_uuid": state.state_uuid if state is not None else None,
            "parent_uuid": state.parent_uuid if state is not None else None,
            "master": state.master_node if state is not None else None,
            "last_committed_config": list(basis.last_committed_config.node_ids),
            "last_accepted_config": list(basis.last_accepted_config.node_ids),
            "quorum": None,
        }
        event.update(extra)
        self._out.append(RecordHistory(event))

    # ------------------------------------------------------------------------------------------------------
    # dispatch

    def _dispatch(self, sender: str, message: Message) -> None:
        if self.stopped:
            return
        handler = self._handlers.get(type(message))
        if handler is None:
            self._log("warning", f"ignoring unexpected message {type(message).__name__}")
            return
        handler(self, sender, message)

    def _on_send_failure(self, destination: str, message: Message) -> None:
        if isinstance(message, PeersRequest):
            self.unreachable.add(destination)
            self.peers.pop(destination, None)
            self._on_found_peers_updated()
        elif isinstance(message, FollowerCheck):
            for node_id, (request_id, address) in list(self.follower_checks_in_flight.items()):
                if request_id == message.request_id and address == destination:
                    self._follower_check_failed(node_id, request_id, disconnected=True)
        elif isinstance(message, LeaderCheck):
            if self.mode is Mode.FOLLOWER and self.leader and self.leader.transport_address == destination:
                self._become_candidate(f"leader {self.leader.name} disconnected")
        elif isinstance(message, PublishRequest | ApplyCommit):
            self._publication_target_failed(self._node_id_at(destination), "disconnected")
        elif isinstance(message, JoinRequest):
            if self.join_request_in_flight == destination:
                self.join_request_in_flight = None
        elif isinstance(message, ForwardedRequest):
            lost = client.not_master_error("lost the connection to the master", maybe_applied=True)
            self._finish_forward(message.request_id, lost)

    def _on_peer_disconnected(self, address: str) -> None:
        if self.mode is Mode.FOLLOWER and self.leader is not None and self.leader.transport_address == address:
            self._become_candidate(f"lost the connection to leader {self.leader.name}")
        elif self.mode is Mode.LEADER:
            node_id = self._node_id_at(address)
            if node_id is not None and node_id != self.local_node.id:
                self._remove_node(node_id, "disconnected")

    def _committed_uuid(self) -> str:
        state = self.last_accepted_state
        return state.cluster_uuid if state.cluster_uuid_committed else UNKNOWN_UUID

    def _foreign(self, cluster_uuid: str, sender: str) -> bool:
        """A message from a node of another cluster: its terms must not disturb this one."""
        ours = self._committed_uuid()
        if UNKNOWN_UUID in (ours, cluster_uuid) or ours == cluster_uuid:
            if ours == cluster_uuid != UNKNOWN_UUID:
                self.foreign_clusters.agrees(sender)
            return False
        warning = self.foreign_clusters.saw(sender, cluster_uuid, ours, self.now)  # reported in health, too
        debug = f"ignoring {sender}: it belongs to cluster [{cluster_uuid}], this node to [{ours}]"
        self._log("warning" if warning else "debug", warning or debug)
        return True

    def _node_id_at(self, address: str) -> str | None:
        for node in self.last_accepted_state.nodes.values():
            if node.transport_address == address:
                return node.id
        return None

    # ------------------------------------------------------------------------------------------------------
    # start, modes

    def _start(self) -> None:
        self._become_candidate("node started", initial=True)

    def _become_candidate(self, reason: str, initial: bool = False) -> None:
        if self.mode is Mode.CANDIDATE and not initial:
            return
        previous = self.mode
        self._log("info" if not initial else "debug", f"becoming CANDIDATE: {reason}")
        if previous is Mode.LEADER:
            self._history("stepped_down", reason=reason)
            self._stop_leading(reason)
        self._fail_forwards("the master changed")
        self.mode = Mode.CANDIDATE
        self.leader = None
        self.discovered_master = None
        self.join_request_in_flight = None
        self.timers.cancel("leader_check")
        self.timers.cancel("leader_check_timeout")
        if self.applied_state.master_node is not None or initial:
            self.applied_state = self.applied_state.replace(master_node=None)
            self._out.append(StateApplied(self.applied_state))
        self.timers.schedule("find_peers", self.now, self._find_peers_round)
        self.timers.schedule(
            "formation_warning", self.now + self.settings.cluster_formation_warning_timeout, self._warn_formation
        )

    def _become_follower(self, leader: DiscoveryNode, reason: str) -> None:
        if self.mode is Mode.FOLLOWER and self.leader == leader:
            return
        previous = self.mode
        if previous is Mode.LEADER:
            self._history("stepped_down", reason=reason)
            self._stop_leading(reason)
        if self.leader != leader:
            self._fail_forwards("the master changed")
        self._log("info", f"following {leader.name} in term {self.current_term}: {reason}")
        self.mode = Mode.FOLLOWER
        self.leader = leader
        accepted = self.last_accepted_state
        if (
            self.applied_state.master_node is None
            and accepted.master_node == leader.id
            and accepted.term_version() == self.last_applied
        ):
            # Back with the master whose state this node had applied (it was a candidate for a while, and the
            # master never removed it): show that master again instead of waiting for its next publication.
            self.applied_state = accepted
            self._out.append(StateApplied(accepted))
        self.join_request_in_flight = None
        self.pending_joins_reject("this node is now a follower")
        self._stop_elections()
        for key in ("find_peers", "formation_warning"):
            self.timers.cancel(key)
        self.leader_check_failures = 0
        # A check still in flight was sent to the previous leader: neither its answer (that node may say it is
        # no longer the master) nor its timeout may count against this one.
        self.leader_check_id = 0
        self.timers.cancel("leader_check_timeout")
        self.timers.schedule("leader_check", self.now + self.settings.leader_check_interval, self._send_leader_check)

    def _become_leader(self) -> None:
        self._log("info", f"elected as master in term {self.current_term}")
        self.mode = Mode.LEADER
        self.leader = self.local_node
        self.elections_won += 1
        self.applied_in_current_term = False
        self._history("elected")
        self._stop_elections()
        for key in ("find_peers", "formation_warning"):
            self.timers.cancel(key)
        joins = self.pending_joins
        self.pending_joins = {}
        self.master_service.add(
            Task("elected-as-master", Priority.URGENT, ("elected", self.local_node), lambda result: None)
        )
        for node, request_id, address in joins.values():
            self._add_join_task(node, request_id, address)
        self._run_master_service()

    def _stop_leading(self, reason: str) -> None:
        """Leaving LEADER mode: fail what the master was doing for others."""
        if self.publication is not None:
            publication, self.publication = self.publication, None
            self.timers.cancel("publish_timeout")
            for task in publication.tasks:
                task.reply(client.failed_publication_error(f"master stepped down: {reason}"))
            self._publication_finished(publication, committed=publication.committed)
        for task in self.master_service.take_all():
            task.reply(client.not_master_error(f"no longer master: {reason}"))
        for node_id in list(self.follower_failures):
            self.timers.cancel(("follower_check", node_id))
            self.timers.cancel(("follower_check_timeout", node_id))
            self.timers.cancel(("lag", node_id))
        self.follower_failures.clear()
        self.follower_checks_in_flight.clear()
        self.node_applied_version.clear()
        self._fail_reads(f"no longer master: {reason}")
        for wait in self.exclusion_waits:
            wait.reply(client.not_master_error(f"no longer master: {reason}"))
        self.exclusion_waits.clear()
        for _, reply in self.removal_waits:
            reply(client.not_master_error(f"no longer master: {reason}"))
        self.removal_waits.clear()
        self.timers.cancel("task_expiry")
        self.timers.cancel("exclusion_waits")

    def pending_joins_reject(self, reason: str) -> None:
        for node, request_id, address in self.pending_joins.values():
            if node.id != self.local_node.id:
                self._send(address, JoinResponse(request_id, ok=False, reason=reason))
        self.pending_joins = {}

    # ------------------------------------------------------------------------------------------------------
    # terms

    def _update_max_term_seen(self, term: int) -> None:
        self.max_term_seen = max(self.max_term_seen, term)
        if self.mode is Mode.LEADER and self.max_term_seen > self.current_term and self.publication is None:
            # Someone is in a newer term: move past it and win again rather than wait to be deposed.
            self._log("info", f"saw term {self.max_term_seen} > {self.current_term}; starting a new election")
            if self._ensure_term_at_least(self.local_node, self.max_term_seen) is not None:
                self._start_election()

    def _ensure_term_at_least(self, candidate: DiscoveryNode, term: int) -> Join | None:
        if self.current_term < term:
            return self._join_leader_in_term(candidate, term)
        return None

    def _join_leader_in_term(self, candidate: DiscoveryNode, term: int) -> Join | None:
        try:
            join = self.coordination_state.handle_start_join(candidate.id, term)
        except CoordinationStateRejected as rejected:
            self._log("debug", f"not joining term {term}: {rejected}")
            return None
        except OSError as error:
            self._log("warning", f"failed to persist term {term}: {error}")
            self._become_candidate("failed to persist the term")
            return None
        self.last_join = join
        self.max_term_seen = max(self.max_term_seen, term)
        self._history("term")
        if self.mode is not Mode.CANDIDATE:
            self._become_candidate(f"joining term {term}")
        return join

    # ------------------------------------------------------------------------------------------------------
    # discovery

    def _find_peers_round(self) -> None:
        if self.mode is not Mode.CANDIDATE:
            return
        self._out.append(ProbeSeeds())
        known = {node.transport_address for node in self.last_accepted_state.nodes.values()}
        known.update(self.peers)
        self._probe(sorted(known))
        self._on_found_peers_updated()  # a lone node may have all it needs to bootstrap or win
        if self.mode is Mode.CANDIDATE:
            self.timers.schedule("find_peers", self.now + self.settings.find_peers_interval, self._find_peers_round)

    def _probe(self, addresses: Sequence[str]) -> None:
        if self.mode is not Mode.CANDIDATE:
            return
        request = PeersRequest(
            source=self.local_node,
            known_peers=tuple(self.peers.values()),
            cluster_name=self.base_settings.cluster_name,
        )
        for address in addresses:
            if address != self.local_node.transport_address:
                self._send(address, request)

    def _on_peers_request(self, sender: str, request: PeersRequest) -> None:
        if request.cluster_name != self.base_settings.cluster_name:
            self._log("warning", f"ignoring discovery from {sender}: cluster name [{request.cluster_name}] differs")
            return
        if self.mode is Mode.CANDIDATE:
            self._add_peer(request.source)
            known = tuple(self.peers.values())
        else:
            known = tuple(self.last_accepted_state.nodes.values())
        master = self.leader if self.mode is not Mode.CANDIDATE else None
        self._send(
            request.source.transport_address,
            PeersResponse(self.local_node, master, known, self.current_term, self._committed_uuid()),
        )

    def _on_peers_response(self, sender: str, response: PeersResponse) -> None:
        if self._foreign(response.cluster_uuid, sender):
            return
        self.unreachable.discard(sender)
        self.peers_seen_terms[response.source.id] = response.term
        if self.mode is not Mode.CANDIDATE:
            return
        self._add_peer(response.source)
        if response.master is not None:
            self._on_master_discovered(response.master)
            return
        for peer in response.known_peers:
            if peer.transport_address not in self.peers and peer.id != self.local_node.id:
                self._send(
                    peer.transport_address,
                    PeersRequest(self.local_node, tuple(self.peers.values()), self.base_settings.cluster_name),
                )
        self._update_max_term_seen(response.term)
        self._on_found_peers_updated()

    def _add_peer(self, node: DiscoveryNode) -> None:
        if node.id == self.local_node.id:
            return
        for address, known in list(self.peers.items()):
            if known.id == node.id and address != node.transport_address:
                del self.peers[address]  # the node moved
        self.peers[node.transport_address] = node

    def _discovered_nodes(self) -> list[DiscoveryNode]:
        return [self.local_node, *self.peers.values()]

    def _on_master_discovered(self, master: DiscoveryNode) -> None:
        if master.id == self.local_node.id:
            return
        self.discovered_master = master
        if self.join_request_in_flight == master.transport_address and self.now < self.join_retry_at:
            return  # wait for the answer; a lost request is retried after the join timeout
        self.join_request_in_flight = master.transport_address
        self.join_retry_at = self.now + JOIN_TIMEOUT_MS
        join = self.last_join
        if join is not None and (join.target_id != master.id or join.term != self.current_term):
            join = None
        self._send_join_request(master, self.current_term, join)

    def _on_found_peers_updated(self) -> None:
        if self.mode is not Mode.CANDIDATE:
            return
        self._maybe_bootstrap()
        votes = {node.id for node in self._discovered_nodes()}
        if self.local_node.master_eligible and self.coordination_state.is_election_quorum(votes):
            if not self.timers.is_scheduled("election"):
                self.election_attempt = 0
                self._schedule_election(grace=0)
        else:
            self._stop_elections()

    def _warn_formation(self) -> None:
        problem = self.formation_problem
        if problem:
            self._log("warning", problem)
            self.timers.schedule(
                "formation_warning", self.now + self.settings.cluster_formation_warning_timeout, self._warn_formation
            )

    # ------------------------------------------------------------------------------------------------------
    # bootstrap

    def _maybe_bootstrap(self) -> None:
        names = self.base_settings.initial_master_nodes
        state = self.last_accepted_state
        if not names or not self.local_node.master_eligible or not state.last_accepted_config.is_empty():
            return
        if self.local_node.name not in names:
            return
        if any(term > 0 for term in self.peers_seen_terms.values()) or self.current_term > 0:
            return  # a cluster exists already: join it rather than bootstrap another
        by_name = {node.name: node for node in self._discovered_nodes() if node.master_eligible}
        if not all(name in by_name for name in names):
            return
        config = VotingConfiguration.of(by_name[name].id for name in names)
        initial = state.replace(
            coordination=replace(state.coordination, last_committed_config=config, last_accepted_config=config)
        )
        try:
            self.coordination_state.set_initial_state(initial)
        except (CoordinationStateRejected, OSError) as error:
            self._log("warning", f"bootstrap failed: {error}")
            return
        self._log("info", f"bootstrapped with initial voting configuration {list(config.node_ids)}")

    # ------------------------------------------------------------------------------------------------------
    # elections

    def _schedule_election(self, grace: int) -> None:
        settings = self.settings
        self.election_attempt += 1
        max_delay = min(
            settings.election_max_timeout,
            settings.election_initial_timeout + (self.election_attempt - 1) * settings.election_back_off_time,
        )
        delay = self.rng.randint(1, max(1, max_delay)) + grace
        self.timers.schedule("election", self.now + delay, self._election_timer_fired)

    def _election_timer_fired(self) -> None:
        if self.mode is not Mode.CANDIDATE:
            return
        self._start_pre_vote()
        self._schedule_election(grace=self.settings.election_duration)

    def _stop_elections(self) -> None:
        self.timers.cancel("election")
        self.pre_vote_round += 1
        self.pre_votes = set()

    def _local_node_may_win(self, state: ClusterState) -> bool:
        node_id = self.local_node.id
        return (
            node_id in state.last_committed_config
            or node_id in state.last_accepted_config
            or node_id not in state.coordination.excluded_ids()
        )

    def _start_pre_vote(self) -> None:
        state = self.last_accepted_state
        if not self.local_node.master_eligible or not self._local_node_may_win(state):
            return
        self.pre_vote_round += 1
        self.pre_votes = {self.local_node.id}
        self.election_started_in_round = False
        request = PreVoteRequest(self.local_node, self.current_term, self._committed_uuid())
        for node in self.peers.values():
            if node.master_eligible:
                self._send(node.transport_address, request)
        self._check_pre_votes()

    def _on_pre_vote_request(self, sender: str, request: PreVoteRequest) -> None:
        if self._foreign(request.cluster_uuid, sender):
            return
        self._update_max_term_seen(request.current_term)
        if self.leader is not None and self.leader.id != request.source.id:
            return  # a node that knows a live leader does not help anyone disrupt it
        state = self.last_accepted_state
        self._send(
            request.source.transport_address,
            PreVoteResponse(self.local_node, self.current_term, state.term, state.version, self._committed_uuid()),
        )

    def _on_pre_vote_response(self, sender: str, response: PreVoteResponse) -> None:
        if self._foreign(response.cluster_uuid, sender):
            return
        self._update_max_term_seen(response.current_term)
        if self.mode is not Mode.CANDIDATE or not self.pre_votes:
            return
        state = self.last_accepted_state
        if (response.last_accepted_term, response.last_accepted_version) > (state.term, state.version):
            return  # it has newer state, so it would not vote for us
        self.pre_votes.add(response.source.id)
        self._check_pre_votes()

    def _check_pre_votes(self) -> None:
        if self.election_started_in_round or not self.coordination_state.is_election_quorum(self.pre_votes):
            return
        self.election_started_in_round = True
        self._start_election()

    def _start_election(self) -> None:
        term = max(self.current_term, self.max_term_seen) + 1
        request = StartJoinRequest(self.local_node, term, self._committed_uuid())
        self._log("debug", f"starting election for term {term}")
        self._send(self.local_node.transport_address, request)
        for node in self.peers.values():
            if node.master_eligible:
                self._send(node.transport_address, request)
        if self.mode is Mode.LEADER or self.mode is Mode.FOLLOWER:
            for node in self.last_accepted_state.nodes.values():
                if node.master_eligible and node.transport_address not in self.peers:
                    self._send(node.transport_address, request)

    def _on_start_join(self, sender: str, request: StartJoinRequest) -> None:
        if self._foreign(request.cluster_uuid, sender):
            return
        if request.term <= self.current_term:
            self._log("debug", f"ignoring start-join for term {request.term} <= {self.current_term}")
            return
        join = self._join_leader_in_term(request.candidate, request.term)
        if join is None:
            return
        self._send_join_request(request.candidate, request.term, join)

    def _send_join_request(self, target: DiscoveryNode, min_term: int, join: Join | None) -> None:
        state = self.last_accepted_state
        self._send(
            target.transport_address,
            JoinRequest(
                source=self.local_node,
                request_id=self._new_request_id(),
                min_term=min_term,
                join=join,
                cluster_uuid=state.cluster_uuid,
                cluster_uuid_committed=state.cluster_uuid_committed,
            ),
        )

    def _on_join_request(self, sender: str, request: JoinRequest) -> None:
        state = self.last_accepted_state
        reply_to = request.source.transport_address
        if (
            request.cluster_uuid_committed
            and request.cluster_uuid != state.cluster_uuid
            and (state.cluster_uuid_committed or state.cluster_uuid != UNKNOWN_UUID)
        ):
            reason = (
                f"join from {request.source.name} rejected: it belongs to cluster [{request.cluster_uuid}] "
                f"but this cluster is [{state.cluster_uuid}]"
            )
            self._log("warning", reason)
            self._send(reply_to, JoinResponse(request.request_id, ok=False, reason=reason))
            return
        won_before = self.coordination_state.election_won and self.mode is Mode.LEADER
        if request.join is not None:
            self._handle_join(request.join)
        if self.mode is Mode.LEADER and self.coordination_state.election_won:
            if request.source.id == self.local_node.id:
                return
            self._add_join_task(request.source, request.request_id, reply_to)
            self._run_master_service()
        elif self.mode is Mode.CANDIDATE:
            self.pending_joins[request.source.id] = (request.source, request.request_id, reply_to)
            if self.coordination_state.election_won and not won_before:
                self._become_leader()
        else:
            self._send(reply_to, JoinResponse(request.request_id, ok=False, reason="join target is a follower"))

    def _handle_join(self, join: Join) -> None:
        own_join = self._ensure_term_at_least(self.local_node, join.term)
        if own_join is not None:
            self._handle_join(own_join)
        try:
            self.coordination_state.handle_join(join)
        except CoordinationStateRejected as rejected:
            self._log("debug", f"join from {join.voter_id} not counted: {rejected}")

    def _add_join_task(self, node: DiscoveryNode, request_id: int, address: str) -> None:
        def reply(result: ClientResult) -> None:
            if node.id == self.local_node.id:
                return
            ok = isinstance(result, Committed)
            reason = result.reason if isinstance(result, ClusterError) else ""
            self._send(address, JoinResponse(request_id, ok=ok, reason=reason))

        self.master_service.add(Task(f"node-join [{node.name}]", Priority.URGENT, ("join", node), reply))

    def _on_join_response(self, sender: str, response: JoinResponse) -> None:
        if self.join_request_in_flight == sender:
            self.join_request_in_flight = None
        if not response.ok:
            self._log("debug", f"join rejected by {sender}: {response.reason}")

    # ------------------------------------------------------------------------------------------------------
    # the master service

    def _run_master_service(self) -> None:
        if self.mode is not Mode.LEADER or self.publication is not None:
            return
        for task in self.master_service.take_expired(self.now):
            task.reply(client.timeout_error(f"failed to process [{task.source}] within its timeout"))
        if not self.master_service.pending:
            self._schedule_task_expiry()
            return
        tasks = self.master_service.take_batch()
        base = self.last_accepted_state
        try:
            new_state, results = execute_batch(base, [task.payload for task in tasks], self._batch_context())
        except CoordinationStateRejected as rejected:
            for task in tasks:
                task.reply(client.not_master_error(str(rejected)))
            return
        if new_state is None:
            # Nothing changed: no publication needed; the tasks see the current state.
            for task, result in zip(tasks, results, strict=True):
                task.reply(result or Committed(base.term, base.version))
            self._after_publication(base)
            return
        try:
            self.coordination_state.handle_client_value(new_state)
        except CoordinationStateRejected as rejected:
            self._log("warning", f"cannot publish version {new_state.version}: {rejected}")
            for task in tasks:
                task.reply(client.not_master_error(str(rejected)))
            self._become_candidate(f"publication refused: {rejected}")
            return
        self._publish(new_state, base, tasks, results)
        self._schedule_task_expiry()

    def _schedule_task_expiry(self) -> None:
        expiry = self.master_service.next_expiry()
        if expiry is None:
            self.timers.cancel("task_expiry")
        else:
            self.timers.schedule("task_expiry", expiry, self._run_master_service)

    def _batch_context(self) -> BatchContext:
        return BatchContext(
            master=self.local_node,
            term=self.current_term,
            voters=frozenset(self.coordination_state.join_votes),
            max_exclusions=self.settings.max_voting_config_exclusions,
            auto_shrink=self.settings.auto_shrink_voting_configuration,
            new_uuid=self._random_uuid,
        )

    def _improve_configuration(self, state: ClusterState) -> ClusterState:
        context = self._batch_context()
        return improve_configuration(state, self.local_node.id, context.voters, context.auto_shrink)

    def _random_uuid(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    # ------------------------------------------------------------------------------------------------------
    # publication (master side)

    def _publish(
        self,
        state: ClusterState,
        previous: ClusterState,
        tasks: list[Task],
        results: list[ClientResult | None],
    ) -> None:
        publication = Publication(state, previous, tasks, results, started_at=self.now)
        self.publication = publication
        diff = compute_diff(previous, state)
        for node in state.nodes.values():
            publication.targets[node.id] = TargetState.SENT_PUBLISH
            if node.id == self.local_node.id:
                continue
            if node.id not in previous.nodes:
                message = PublishRequest(self.local_node, state.term, state.version, state=state)
            else:
                message = PublishRequest(self.local_node, state.term, state.version, diff=diff)
            self._send(node.transport_address, message)
        # The master's own copy goes last, through the shell, so that it is written to disk while the
        # followers write theirs rather than before they are even sent theirs.
        own_copy = PublishRequest(self.local_node, state.term, state.version, state=state)
        self._out.append(Send(self.local_node.transport_address, own_copy))
        self.timers.schedule("publish_timeout", self.now + self.settings.publish_timeout, self._publish_timed_out)

    def _on_publish_response(self, sender: str, response: PublishResponse) -> None:
        publication = self.publication
        if response.join is not None and self.mode is not Mode.FOLLOWER:
            self._handle_join(response.join)
        if publication is None or self.mode is not Mode.LEADER or response.version != publication.version:
            return
        target = publication.targets.get(response.source_id)
        if target is not TargetState.SENT_PUBLISH:
            return
        node = publication.state.nodes[response.source_id]
        if response.need_full_state:
            full = PublishRequest(self.local_node, publication.state.term, publication.version, state=publication.state)
            self._send(node.transport_address, full)
            return
        if not response.ok and node.id == self.local_node.id:
            # The master must hold what it publishes; without its own copy it cannot go on as master.
            self._fail_publication(f"the master did not accept its own publication: {response.reason}")
            return
        if not response.ok:
            self._log("debug", f"{node.name} rejected publication of version {publication.version}: {response.reason}")
            self._publication_target_failed(node.id, response.reason)
            return
        try:
            commit = self.coordination_state.handle_publish_response(
                response.source_id, response.term, response.version
            )
        except CoordinationStateRejected as rejected:
            self._log("debug", f"publish ack from {node.name} not counted: {rejected}")
            return
        publication.targets[node.id] = TargetState.ACKED
        if commit is not None:
            publication.committed_at = self.now
            publication.quorum = tuple(sorted(self.coordination_state.publish_votes))
            self._history("committed", publication.state, quorum=list(publication.quorum))
            for node_id in sorted(publication.ids_in(TargetState.ACKED)):
                self._send_apply_commit(publication, node_id)
        elif publication.committed:
            self._send_apply_commit(publication, node.id)

    def _send_apply_commit(self, publication: Publication, node_id: str) -> None:
        publication.targets[node_id] = TargetState.SENT_APPLY_COMMIT
        node = publication.state.nodes[node_id]
        self._send(node.transport_address, ApplyCommit(self.local_node.id, publication.state.term, publication.version))

    def _on_apply_commit_response(self, sender: str, response: ApplyCommitResponse) -> None:
        publication = self.publication
        if response.ok:
            previous = self.node_applied_version.get(response.source_id, 0)
            self.node_applied_version[response.source_id] = max(previous, response.version)
        if publication is None or response.version != publication.version:
            return
        if publication.targets.get(response.source_id) is TargetState.SENT_APPLY_COMMIT:
            publication.targets[response.source_id] = TargetState.APPLIED if response.ok else TargetState.FAILED
            self._check_publication_progress()

    def _publication_target_failed(self, node_id: str | None, reason: str) -> None:
        publication = self.publication
        if publication is None or node_id is None or node_id not in publication.targets:
            return
        if publication.targets[node_id] in (TargetState.APPLIED, TargetState.FAILED):
            return
        publication.targets[node_id] = TargetState.FAILED
        self._check_publication_progress()

    def _check_publication_progress(self) -> None:
        publication = self.publication
        if publication is None:
            return
        last_committed = self.coordination_state.last_committed_config
        if not publication.committed:
            if not publication.publish_quorum_possible(last_committed):
                self._fail_publication("a publish quorum is no longer possible")
            return
        if publication.targets.get(self.local_node.id) is not TargetState.APPLIED:
            return  # the master applies last, and only what it holds
        if publication.all_targets_done() or publication.applied_by_quorum(last_committed):
            self._complete_publication()

    def _publish_timed_out(self) -> None:
        publication = self.publication
        if publication is None:
            return
        if publication.committed:
            self._complete_publication()
        else:
            self._fail_publication(f"not committed within cluster.publish.timeout [{self.settings.publish_timeout}ms]")

    def _fail_publication(self, reason: str) -> None:
        publication = self.publication
        assert publication is not None
        self.failed_publications += 1
        self._log("warning", f"publication of version {publication.version} failed: {reason}")
        self._become_candidate(f"publication of version {publication.version} failed: {reason}")

    def _complete_publication(self) -> None:
        publication = self.publication
        assert publication is not None
        self.publication = None
        self.timers.cancel("publish_timeout")
        state = self.last_accepted_state  # committed: last committed config caught up with the accepted one
        if state.state_uuid != publication.state.state_uuid:
            raise AssertionError(
                f"completing publication of {publication.state.state_uuid} but holding {state.state_uuid}"
            )
        self._apply(state)
        self.applied_in_current_term = True
        self._publication_finished(publication, committed=True)
        for task, result in zip(publication.tasks, publication.results, strict=True):
            task.reply(result or Committed(state.term, state.version))
        self._start_lag_detection(publication)
        self._sync_follower_checks(state)
        self._after_publication(state)

    def _publication_finished(self, publication: Publication, committed: bool) -> None:
        commit_ms = None if publication.committed_at is None else publication.committed_at - publication.started_at
        self._out.append(
            PublicationFinished(
                version=publication.version,
                committed=committed,
                commit_latency_ms=commit_ms,
                total_latency_ms=self.now - publication.started_at,
            )
        )

    def _after_publication(self, state: ClusterState) -> None:
        if self.mode is not Mode.LEADER:
            return
        self._serve_reads_if_possible()
        self._check_exclusion_waits()
        if not self._local_node_may_win(state):
            candidates = self._abdication_candidates(require_not_excluded=True)
            if candidates:
                self._abdicate_to(self.rng.choice(candidates))
                return
        self._improve_voting_configuration(state)
        self._run_master_service()

    def _improve_voting_configuration(self, state: ClusterState) -> None:
        if self._collect_missing_votes(state):
            return
        if self._improve_configuration(state) != state and not any(
            task.source == "reconfigure" for task in self.master_service.pending
        ):
            self.master_service.add(Task("reconfigure", Priority.URGENT, ("reconfigure", None), lambda result: None))
            self._run_master_service()

    def _collect_missing_votes(self, state: ClusterState) -> bool:
        """Start a new term if the best configuration needs votes that this term cannot give.

        A node that rejoins in the master's current term, having voted for someone else in it, cannot vote
        for this master until the next term; without its vote it cannot enter the voting configuration.
        """
        if self.now < self.next_vote_collection_at or state.last_committed_config != state.last_accepted_config:
            return False
        excluded = state.coordination.excluded_ids()
        healthy = {
            node.id
            for node in state.nodes.values()
            if node.master_eligible
            and node.id not in excluded
            and (node.id == self.local_node.id or self.node_applied_version.get(node.id, 0) >= state.version)
        }
        desired = reconfigure(
            healthy,
            excluded,
            self.local_node.id,
            state.last_accepted_config,
            self.settings.auto_shrink_voting_configuration,
        )
        if desired == state.last_accepted_config or self._improve_configuration(state) != state:
            return False
        missing = [
            node_id for node_id in desired.node_ids if not self.coordination_state.contains_join_vote_from(node_id)
        ]
        if not missing:
            return False
        self.next_vote_collection_at = self.now + self.settings.election_max_timeout
        self._log("info", f"starting a new term to collect the votes of {missing} for the voting configuration")
        self._start_election()
        return True

    def _abdication_candidates(self, require_not_excluded: bool) -> list[DiscoveryNode]:
        state = self.last_accepted_state
        excluded = state.coordination.excluded_ids()
        candidates = []
        for node in state.nodes.values():
            if node.id == self.local_node.id or not node.master_eligible:
                continue
            if require_not_excluded and node.id in excluded:
                continue
            if self.node_applied_version.get(node.id, 0) < state.version:
                continue  # it must hold the latest state to win
            if node.id in state.last_committed_config or node.id in state.last_accepted_config:
                candidates.append(node)
        # It must be able to win: every node that has applied the latest state would vote for it.
        voters = {node_id for node_id, version in self.node_applied_version.items() if version >= state.version}
        voters.add(self.local_node.id)
        if not (state.last_committed_config.has_quorum(voters) and state.last_accepted_config.has_quorum(voters)):
            return []
        return sorted(candidates, key=lambda node: node.id)

    def _abdicate_to(self, node: DiscoveryNode) -> None:
        term = max(self.current_term, self.max_term_seen) + 1
        self._log("info", f"abdicating to {node.name} with term {term}")
        request = StartJoinRequest(node, term, self._committed_uuid())
        for other in self.last_accepted_state.nodes.values():
            if other.master_eligible:
                self._send(other.transport_address, request)
        self._become_candidate(f"abdicated to {node.name}")

    # ------------------------------------------------------------------------------------------------------
    # publication (receiver side)

    def _on_publish_request(self, sender: str, request: PublishRequest) -> None:
        source = request.source
        accepted = self.last_accepted_state
        if request.state is not None:
            state = request.state
        else:
            assert request.diff is not None
            try:
                state = apply_diff(accepted, request.diff)
            except IncompatibleDiffError:
                self._send(
                    source.transport_address,
                    PublishResponse(self.local_node.id, request.term, request.version, ok=False, need_full_state=True),
                )
                return
        reject = self._validate_publication(state)
        if reject is None:
            self._ensure_term_at_least(source, state.term)
            try:
                response = self.coordination_state.handle_publish_request(state)
            except CoordinationStateRejected as rejected:
                reject = str(rejected)
            except OSError as error:
                reject = f"failed to persist the accepted state: {error}"
                self._log("warning", reject)
        if reject is not None:
            self._send(
                source.transport_address,
                PublishResponse(self.local_node.id, request.term, request.version, ok=False, reason=reject),
            )
            return
        self._history("accepted", state)
        if source.id != self.local_node.id:
            self._become_follower(source, "received a publication")
            self._update_max_term_seen(state.term)
        join = self.last_join
        if join is not None and (join.target_id != source.id or join.term != state.term):
            join = None
        self._send(source.transport_address, replace(response, join=join))

    def _validate_publication(self, state: ClusterState) -> str | None:
        local = self.last_accepted_state
        if state.cluster_name != self.base_settings.cluster_name:
            return f"cluster name [{state.cluster_name}] is not [{self.base_settings.cluster_name}]"
        if local.cluster_uuid_committed and state.cluster_uuid != local.cluster_uuid:
            return f"state belongs to cluster [{state.cluster_uuid}], this node to [{local.cluster_uuid}]"
        if self.local_node.id not in state.nodes:
            return "this node is not in the published state"
        if state.term < self.current_term:
            return f"publication term {state.term} is older than current term {self.current_term}"
        return None

    def _on_apply_commit(self, sender: str, commit: ApplyCommit) -> None:
        try:
            self.coordination_state.handle_commit(commit)
        except CoordinationStateRejected as rejected:
            self._log("debug", f"commit of version {commit.version} rejected: {rejected}")
            self._send(sender, ApplyCommitResponse(self.local_node.id, commit.term, commit.version, ok=False))
            return
        except OSError as error:
            self._log("warning", f"failed to persist the commit: {error}")
            if commit.source_id == self.local_node.id:
                self._become_candidate(f"failed to persist the commit of version {commit.version}")
                return
            self._send(sender, ApplyCommitResponse(self.local_node.id, commit.term, commit.version, ok=False))
            return
        state = self.last_accepted_state
        if commit.source_id == self.local_node.id:
            # The master commits its own copy here; it applies last, when the publication completes.
            publication = self.publication
            if publication is not None and publication.version == commit.version:
                publication.targets[self.local_node.id] = TargetState.APPLIED
                self._check_publication_progress()
            return
        self._history("committed", state)
        self._apply(state)
        self._send(sender, ApplyCommitResponse(self.local_node.id, commit.term, commit.version, ok=True))

    def _apply(self, state: ClusterState) -> None:
        if state.term_version() <= self.last_applied:
            return  # applied (term, version) strictly increases on every node
        self.last_applied = state.term_version()
        self._history("applied", state)
        self.applied_state = state
        self._out.append(StateApplied(state))

    # ------------------------------------------------------------------------------------------------------
    # fault detection: the leader checks its followers

    def _sync_follower_checks(self, state: ClusterState) -> None:
        for node_id in list(self.follower_failures):
            if node_id not in state.nodes:
                del self.follower_failures[node_id]
                self.timers.cancel(("follower_check", node_id))
                self.timers.cancel(("follower_check_timeout", node_id))
        for node_id, node in state.nodes.items():
            if node_id == self.local_node.id:
                continue
            in_flight = self.follower_checks_in_flight.get(node_id)
            if in_flight is not None and in_flight[1] != node.transport_address:
                # It rejoined from a new address: what was sent to the old one proves nothing either way.
                del self.follower_checks_in_flight[node_id]
                self.timers.cancel(("follower_check_timeout", node_id))
                self.follower_failures[node_id] = 0
                self._schedule_follower_check(node_id, self.now)
            elif node_id not in self.follower_failures:
                self.follower_failures[node_id] = 0
                self._schedule_follower_check(node_id, self.now)

    def _schedule_follower_check(self, node_id: str, at: int) -> None:
        self.timers.schedule(("follower_check", node_id), at, lambda: self._send_follower_check(node_id))

    def _send_follower_check(self, node_id: str) -> None:
        node = self.last_accepted_state.nodes.get(node_id)
        if self.mode is not Mode.LEADER or node is None:
            return
        request_id = self._new_request_id()
        self.follower_checks_in_flight[node_id] = (request_id, node.transport_address)
        self._send(node.transport_address, FollowerCheck(self.local_node, self.current_term, request_id))
        self.timers.schedule(
            ("follower_check_timeout", node_id),
            self.now + self.settings.follower_check_timeout,
            lambda: self._follower_check_failed(node_id, request_id, disconnected=False),
        )

    def _on_follower_check_response(self, sender: str, response: FollowerCheckResponse) -> None:
        node_id = response.source_id
        in_flight = self.follower_checks_in_flight.get(node_id)
        if in_flight is None or in_flight[0] != response.request_id or self.mode is not Mode.LEADER:
            return
        if not response.ok:
            self._update_max_term_seen(response.term)
            if self.mode is Mode.LEADER:
                self._follower_check_failed(node_id, response.request_id, disconnected=False)
            return
        del self.follower_checks_in_flight[node_id]
        self.timers.cancel(("follower_check_timeout", node_id))
        self.follower_failures[node_id] = 0
        self._catch_up(node_id, response)
        self._schedule_follower_check(node_id, self.now + self.settings.follower_check_interval)

    def _catch_up(self, node_id: str, response: FollowerCheckResponse) -> None:
        """Resend what a follower missed (a lost publication or commit) instead of waiting for the lag detector."""
        state = self.last_accepted_state
        node = state.nodes.get(node_id)
        self.node_applied_version[node_id] = max(self.node_applied_version.get(node_id, 0), response.applied_version)
        if self.publication is not None or node is None:
            return
        if response.applied_version >= state.version:
            if node.master_eligible and node_id not in state.last_accepted_config and self.applied_in_current_term:
                self._improve_voting_configuration(state)  # a healthy node that could vote but does not yet
            return
        if (response.accepted_term, response.accepted_version) < (state.term, state.version):
            self._send(node.transport_address, PublishRequest(self.local_node, state.term, state.version, state=state))
        elif (response.accepted_term, response.accepted_version) == (state.term, state.version):
            self._send(node.transport_address, ApplyCommit(self.local_node.id, state.term, state.version))

    def _follower_check_failed(self, node_id: str, request_id: int, disconnected: bool) -> None:
        in_flight = self.follower_checks_in_flight.get(node_id)
        if self.mode is not Mode.LEADER or in_flight is None or in_flight[0] != request_id:
            return
        del self.follower_checks_in_flight[node_id]
        self.timers.cancel(("follower_check_timeout", node_id))
        failures = self.follower_failures.get(node_id, 0) + 1
        self.follower_failures[node_id] = failures
        if disconnected or failures >= self.settings.follower_check_retry_count:
            reason = "disconnected" if disconnected else f"failed {failures} consecutive follower checks"
            self._remove_node(node_id, reason)
        else:
            self._schedule_follower_check(node_id, self.now + self.settings.follower_check_interval)

    def _remove_node(self, node_id: str, reason: str) -> None:
        node = self.last_accepted_state.nodes.get(node_id)
        self.follower_failures.pop(node_id, None)
        self.timers.cancel(("follower_check", node_id))
        self.timers.cancel(("follower_check_timeout", node_id))
        self.timers.cancel(("lag", node_id))
        if node is None:
            return
        self._log("info", f"removing {node.name} from the cluster: {reason}")
        self._publication_target_failed(node_id, reason)
        if self.mode is Mode.LEADER:
            self.master_service.add(
                Task(f"node-left [{node.name}]", Priority.IMMEDIATE, ("left", node_id), lambda r: None)
            )
            self._run_master_service()

    def _on_follower_check(self, sender: str, request: FollowerCheck) -> None:
        leader = request.source
        if self.mode is Mode.FOLLOWER and self.leader == leader and request.term == self.current_term:
            ok = True
        elif request.term < self.current_term or (self.mode is Mode.LEADER and request.term == self.current_term):
            ok = False
        else:
            self._ensure_term_at_least(leader, request.term)
            self._become_follower(leader, "received a follower check")
            ok = True
        self._send(
            leader.transport_address,
            FollowerCheckResponse(
                self.local_node.id,
                request.request_id,
                ok,
                self.current_term,
                accepted_term=self.last_accepted_state.term,
                accepted_version=self.last_accepted_state.version,
                applied_version=self.last_applied[1],
            ),
        )

    # lag detection: a node that does not apply a committed state in time is removed

    def _start_lag_detection(self, publication: Publication) -> None:
        for node_id in publication.state.nodes:
            if node_id == self.local_node.id or self.timers.is_scheduled(("lag", node_id)):
                continue
            if self.node_applied_version.get(node_id, 0) < publication.version:
                self.timers.schedule(
                    ("lag", node_id),
                    self.now + self.settings.follower_lag_timeout,
                    partial(self._check_lag, node_id, publication.version),
                )

    def _check_lag(self, node_id: str, version: int) -> None:
        if self.mode is not Mode.LEADER or node_id not in self.last_accepted_state.nodes:
            return
        applied = self.node_applied_version.get(node_id, 0)
        if applied < version:
            self.lagging_nodes_removed += 1
            self._remove_node(
                node_id, f"lagging: has not applied version {version} within cluster.follower_lag.timeout"
            )
        elif applied < self.last_accepted_state.version:
            latest = self.last_accepted_state.version
            deadline = self.now + self.settings.follower_lag_timeout
            self.timers.schedule(("lag", node_id), deadline, partial(self._check_lag, node_id, latest))

    # ------------------------------------------------------------------------------------------------------
    # fault detection: followers check their leader

    def _send_leader_check(self) -> None:
        if self.mode is not Mode.FOLLOWER or self.leader is None:
            return
        self.leader_check_id = self._new_request_id()
        self._send(self.leader.transport_address, LeaderCheck(self.local_node.id, self.leader_check_id))
        request_id = self.leader_check_id
        self.timers.schedule(
            "leader_check_timeout",
            self.now + self.settings.leader_check_timeout,
            lambda: self._leader_check_failed(request_id),
        )

    def _leader_check_failed(self, request_id: int) -> None:
        if self.mode is not Mode.FOLLOWER or request_id != self.leader_check_id:
            return
        self.leader_check_failures += 1
        if self.leader_check_failures >= self.settings.leader_check_retry_count:
            self._become_candidate(f"leader failed {self.leader_check_failures} consecutive checks")
        else:
            self._send_leader_check()

    def _on_leader_check(self, sender: str, request: LeaderCheck) -> None:
        if self.mode is not Mode.LEADER:
            response = LeaderCheckResponse(request.request_id, ok=False, reason="this node is no longer the master")
        elif request.source_id not in self.last_accepted_state.nodes:
            response = LeaderCheckResponse(request.request_id, ok=False, reason="the node is not in the cluster")
        else:
            response = LeaderCheckResponse(request.request_id, ok=True)
        self._send(sender, response)

    def _on_leader_check_response(self, sender: str, response: LeaderCheckResponse) -> None:
        if self.mode is not Mode.FOLLOWER or response.request_id != self.leader_check_id:
            return
        self.timers.cancel("leader_check_timeout")
        if not response.ok:
            self._become_candidate(f"leader rejected the check: {response.reason}")
            return
        self.leader_check_failures = 0
        self.timers.schedule("leader_check", self.now + self.settings.leader_check_interval, self._send_leader_check)

    # ------------------------------------------------------------------------------------------------------
    # client requests

    def _handle_client_request(
        self, request: ClientRequest, reply: Callable[[ClientResult], None], timeout: int, forwarded: bool
    ) -> None:
        if self.mode is Mode.LEADER:
            self._execute_on_master(request, reply, timeout)
            return
        if self.mode is Mode.FOLLOWER and self.leader is not None and not forwarded:
            self._forward(request, reply, timeout)
            return
        if forwarded:
            reply(client.not_master_error("this node is not the master"))
            return
        block = self.settings.no_master_block
        if isinstance(request, KvGet) and block != "all":
            state = self.applied_state
            reply(
                ReadValue(
                    key=request.key,
                    found=request.key in state.kv,
                    value=state.kv.get(request.key),
                    term=state.term,
                    version=state.version,
                    linearizable=False,
                )
            )
            return
        reply(client.no_master_error(block))

    def _forward(self, request: ClientRequest, reply: Callable[[ClientResult], None], timeout: int) -> None:
        assert self.leader is not None
        forward_id = self._new_request_id()
        self.forwards[forward_id] = _Forward(request, reply)
        self._send(self.leader.transport_address, ForwardedRequest(self.local_node.id, forward_id, request))
        self.timers.schedule(("forward", forward_id), self.now + timeout, lambda: self._forward_timed_out(forward_id))

    def _finish_forward(self, forward_id: int, result: ClientResult) -> None:
        forward = self.forwards.pop(forward_id, None)
        if forward is not None:
            self.timers.cancel(("forward", forward_id))
            forward.reply(result)

    def _forward_timed_out(self, forward_id: int) -> None:
        timed_out = ClusterError(
            type="timeout_exception", reason="no answer from the master in time", status=503, maybe_applied=True
        )
        self._finish_forward(forward_id, timed_out)

    def _fail_forwards(self, reason: str) -> None:
        for forward_id in list(self.forwards):
            self._finish_forward(forward_id, client.not_master_error(reason, maybe_applied=True))

    def _on_forwarded_request(self, sender: str, request: ForwardedRequest) -> None:
        def reply(result: ClientResult) -> None:
            self._send(sender, ForwardedResponse(request.request_id, result))

        self._handle_client_request(request.request, reply, DEFAULT_REQUEST_TIMEOUT_MS, forwarded=True)

    def _on_forwarded_response(self, sender: str, response: ForwardedResponse) -> None:
        self._finish_forward(response.request_id, response.result)

    def _execute_on_master(self, request: ClientRequest, reply: Callable[[ClientResult], None], timeout: int) -> None:
        # Every request is checked here too, forwarded or not: a peer may have skipped the API's checks.
        problem = request_problem(request, self.last_accepted_state, self.settings.max_voting_config_exclusions)
        if problem is not None:
            reply(client.bad_request(problem))
            return
        if isinstance(request, KvGet | ReadBarrier):
            self.read_queue.append((request, reply))
            self._serve_reads_if_possible()
            return
        if isinstance(request, ClearVotingConfigExclusions) and request.wait_for_removal:
            excluded = self.last_accepted_state.coordination.excluded_ids()
            if any(node_id in self.last_accepted_state.nodes for node_id in excluded):
                self._wait_for_removal(request, reply, self.now + timeout)
                return
        deadline = self.now + timeout
        if isinstance(request, AddVotingConfigExclusions):
            inner = reply

            def reply(result: ClientResult, request: AddVotingConfigExclusions = request) -> None:
                if isinstance(result, Committed):
                    self._wait_for_exclusions(request, inner, deadline)
                else:
                    inner(result)

        priority = (
            Priority.URGENT
            if isinstance(request, AddVotingConfigExclusions | ClearVotingConfigExclusions)
            else (Priority.HIGH if isinstance(request, UpdateSettings) else Priority.NORMAL)
        )
        self.master_service.add(Task(_describe(request), priority, ("client", request), reply, deadline))
        self._run_master_service()

    def _wait_for_exclusions(
        self, request: AddVotingConfigExclusions, reply: Callable[[ClientResult], None], deadline: int
    ) -> None:
        state = self.last_accepted_state
        by_name = {e.node_name: e.node_id for e in state.coordination.voting_config_exclusions}
        ids = frozenset([by_name.get(name, name) for name in request.node_names] + list(request.node_ids))
        self.exclusion_waits.append(_ExclusionWait(ids, deadline, reply))
        self._check_exclusion_waits()

    def _wait_for_removal(
        self, request: ClearVotingConfigExclusions, reply: Callable[[ClientResult], None], deadline: int
    ) -> None:
        def when_removed(result: ClientResult) -> None:
            if isinstance(result, ClusterError):
                reply(result)
                return
            task = Task("clear-voting-config-exclusions", Priority.URGENT, ("client", request), reply, deadline)
            self.master_service.add(task)
            self._run_master_service()

        self.removal_waits.append((deadline, when_removed))
        self._check_exclusion_waits()

    def _check_exclusion_waits(self) -> None:
        state = self.last_accepted_state
        config_ids = set(state.last_committed_config.node_ids) | set(state.last_accepted_config.node_ids)
        remaining: list[_ExclusionWait] = []
        for wait in self.exclusion_waits:
            if not (wait.node_ids & config_ids):
                wait.reply(Committed(state.term, state.version))
            elif wait.deadline <= self.now:
                wait.reply(
                    client.timeout_error(
                        f"timed out waiting for voting config exclusions {sorted(wait.node_ids)} to take effect"
                    )
                )
            else:
                remaining.append(wait)
        self.exclusion_waits = remaining
        excluded = state.coordination.excluded_ids()
        still_present = any(node_id in state.nodes for node_id in excluded)
        removal_remaining = []
        for deadline, reply in self.removal_waits:
            if not still_present:
                reply(Committed(state.term, state.version))
            elif deadline <= self.now:
                reply(client.timeout_error("timed out waiting for the excluded nodes to leave the cluster"))
            else:
                removal_remaining.append((deadline, reply))
        self.removal_waits = removal_remaining
        deadlines = [w.deadline for w in self.exclusion_waits] + [d for d, _ in self.removal_waits]
        if deadlines:
            self.timers.schedule("exclusion_waits", min(deadlines), self._check_exclusion_waits)
        else:
            self.timers.cancel("exclusion_waits")

    # linearizable reads: confirm leadership with a quorum, then answer from the state applied at arrival

    def _serve_reads_if_possible(self) -> None:
        if self.mode is not Mode.LEADER or not self.applied_in_current_term or self.read_round is not None:
            return
        if not self.read_queue:
            return
        state = self.applied_state
        reads = [(request, state, reply) for request, reply in self.read_queue]
        self.read_queue = []
        round_id = self._new_request_id()
        self.read_round = _ReadRound(round_id, self.current_term, reads, {self.local_node.id})
        probe = LeadershipProbe(self.local_node.id, self.current_term, round_id)
        config_ids = set(state.last_committed_config.node_ids) | set(state.last_accepted_config.node_ids)
        for node_id in sorted(config_ids):
            node = state.nodes.get(node_id)
            if node is not None and node_id != self.local_node.id:
                self._send(node.transport_address, probe)
        self.timers.schedule("read_round", self.now + self.settings.leader_check_timeout, self._read_round_timed_out)
        self._check_read_round()

    def _on_leadership_probe(self, sender: str, probe: LeadershipProbe) -> None:
        ok = probe.term == self.current_term and (self.leader is None or self.leader.id == probe.source_id)
        self._send(sender, LeadershipProbeResponse(self.local_node.id, self.current_term, probe.request_id, ok))

    def _on_leadership_probe_response(self, sender: str, response: LeadershipProbeResponse) -> None:
        self._update_max_term_seen(response.term)
        read_round = self.read_round
        if read_round is None or response.request_id != read_round.round_id or not response.ok:
            return
        read_round.confirmed.add(response.source_id)
        self._check_read_round()

    def _check_read_round(self) -> None:
        read_round = self.read_round
        if read_round is None or self.mode is not Mode.LEADER or read_round.term != self.current_term:
            return
        state = self.last_accepted_state
        votes = read_round.confirmed
        if not (state.last_committed_config.has_quorum(votes) and state.last_accepted_config.has_quorum(votes)):
            return
        self.read_round = None
        self.timers.cancel("read_round")
        for request, read_state, reply in read_round.reads:
            if isinstance(request, ReadBarrier):
                reply(Committed(read_state.term, read_state.version))
                continue
            reply(
                ReadValue(
                    key=request.key,
                    found=request.key in read_state.kv,
                    value=read_state.kv.get(request.key),
                    term=read_state.term,
                    version=read_state.version,
                )
            )
        self._serve_reads_if_possible()

    def _read_round_timed_out(self) -> None:
        read_round, self.read_round = self.read_round, None
        if read_round is None:
            return
        for _, _, reply in read_round.reads:
            reply(client.timeout_error("could not confirm leadership with a quorum in time"))
        self._serve_reads_if_possible()

    def _fail_reads(self, reason: str) -> None:
        read_round, self.read_round = self.read_round, None
        self.timers.cancel("read_round")
        replies = [reply for _, reply in self.read_queue]
        if read_round is not None:
            replies.extend(reply for _, _, reply in read_round.reads)
        self.read_queue = []
        for reply in replies:
            reply(client.not_master_error(reason))

    _handlers: dict[type, Callable[[Coordinator, str, Any], None]] = {}


def _describe(request: ClientRequest) -> str:
    if isinstance(request, KvPut | KvDelete | KvGet):
        return f"{type(request).__name__} [{request.key}]"
    return type(request).__name__


Coordinator._handlers = {
    PeersRequest: Coordinator._on_peers_request,
    PeersResponse: Coordinator._on_peers_response,
    PreVoteRequest: Coordinator._on_pre_vote_request,
    PreVoteResponse: Coordinator._on_pre_vote_response,
    StartJoinRequest: Coordinator._on_start_join,
    JoinRequest: Coordinator._on_join_request,
    JoinResponse: Coordinator._on_join_response,
    PublishRequest: Coordinator._on_publish_request,
    PublishResponse: Coordinator._on_publish_response,
    ApplyCommit: Coordinator._on_apply_commit,
    ApplyCommitResponse: Coordinator._on_apply_commit_response,
    FollowerCheck: Coordinator._on_follower_check,
    FollowerCheckResponse: Coordinator._on_follower_check_response,
    LeaderCheck: Coordinator._on_leader_check,
    LeaderCheckResponse: Coordinator._on_leader_check_response,
    LeadershipProbe: Coordinator._on_leadership_probe,
    LeadershipProbeResponse: Coordinator._on_leadership_probe_response,
    ForwardedRequest: Coordinator._on_forwarded_request,
    ForwardedResponse: Coordinator._on_forwarded_response,
}
