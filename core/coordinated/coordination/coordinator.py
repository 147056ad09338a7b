"""The coordinator, without I/O: the public API, the step loop, dispatch, modes and terms, wiring the
components of Zen2 (docs/protocol.md lists them), which report back through callbacks.

Public API (used by the sidecar and the simulator):

    coordinator = Coordinator(local_node=..., settings=..., persisted=..., rng=random.Random(seed), now=now_ms)
    effects = coordinator.start(now)
    effects = coordinator.handle_message(sender_address, message, now)
    effects = coordinator.handle_send_failure(destination_address, message, now)  # connection refused/closed
    effects = coordinator.handle_seed_addresses(addresses, now)                     # answer to ProbeSeeds
    effects = coordinator.handle_peer_disconnected(address, now)                    # a peer's connection closed
    effects = coordinator.handle_undecodable(sender, kind, request_id, why, now)     # an undecodable message (VersionExchange)
    effects = coordinator.tick(now)                      # call at or after coordinator.next_deadline()
    effects = coordinator.submit(request_id, request, now, timeout_ms=None)         # a ClientRequest
    effects = coordinator.stop(now)                      # graceful stop: a master hands over first
    status = coordinator.status()                        # a frozen snapshot: mode, term, peers, problems

Every call returns a list of effects, which the shell carries out in order. The shells read the node only through
these methods, `status()` and the effects, never through its fields or the components behind it. Time is in
milliseconds on any monotonic clock the shell chooses. The core never blocks and never sleeps; timeouts are its own timers.
Messages a node sends to itself are handled inside the same call, before it returns.
"""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinated.coordination import client
from coordinated.coordination import messages as m
from coordinated.coordination.batch import MAX_STATE_SIZE
from coordinated.coordination.client import DEFAULT_REQUEST_TIMEOUT_MS, ClientResult, Committed, Submitted
from coordinated.coordination.client_requests import NO_MASTER_BLOCK, ClientRequests
from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.counters import successor
from coordinated.coordination.diff_history import CatchUp
from coordinated.coordination.effects import Effect, RequestCompleted, StateApplied
from coordinated.coordination.elections import ElectionScheduler, PreVoteCollector
from coordinated.coordination.followers_checker import FollowersChecker, LagDetector
from coordinated.coordination.formation import ClusterBootstrapService, ClusterFormationFailureHelper
from coordinated.coordination.forwarding import Forwarder
from coordinated.coordination.handover import Handover
from coordinated.coordination.history import EventType
from coordinated.coordination.joins import JoinHelper
from coordinated.coordination.leader_checker import LeaderChecker, answer_leader_check
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.master_tasks import MasterTasks, MasterTasksListener
from coordinated.coordination.node_versions import NodeVersions
from coordinated.coordination.peer_finder import PeerFinder
from coordinated.coordination.peer_watch import PeerWatch
from coordinated.coordination.publication import Publication, PublicationListener, catch_up_message
from coordinated.coordination.publish_handler import PublishHandler, PublishListener
from coordinated.coordination.reads import ReadService
from coordinated.coordination.safety import CoordinationState, CoordinationStateRejected, PersistedState
from coordinated.coordination.sessions import SessionLeases
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState, Derivations, DiscoveryNode
from coordinated.coordination.status import CoordinatorStatus, NoMasterBlock, follower_lag, health_of
from coordinated.coordination.tasks import ElectedAsMaster, NodeLeft, Reconfigure
from coordinated.coordination.timers import Timers
from coordinated.coordination.version_exchange import VersionExchange
from coordinated.coordination.wire_versions import NodeVersion

__all__ = ["Coordinator", "Mode"]


class Coordinator:
    def __init__(
        self,
        *,
        local_node: DiscoveryNode,
        settings: Settings,
        persisted: PersistedState,
        rng: random.Random,
        now: int,
        derivations: Derivations | None = None,  # the node's (a new one if not given): its stores read it too
        version: NodeVersion | None = None,  # this node's release and wire version (default: this tree's)
    ) -> None:
        self.local_node = local_node
        self.base_settings = settings
        self.coordination_state = CoordinationState(local_node.id, persisted)
        self.mode = Mode.CANDIDATE
        self.leader: DiscoveryNode | None = None
        self.max_term_seen = persisted.current_term
        # What is visible locally. Until a master publishes, the last-accepted state under a no-master view.
        self.applied_state = persisted.last_accepted_state.replace(master_node=None)
        self.last_applied: tuple[int, int] = (0, 0)
        self.stopped = False
        self.timers = Timers()
        self._settings_basis: Mapping[str, str] | None = None
        self._settings = settings
        self._out: list[Effect] = []
        self._loopback: deque[tuple[str, m.Message]] = deque()
        self.ctx = CoreContext(
            local_node=local_node,
            base_settings=settings,
            timers=self.timers,
            rng=rng,
            emit=self._out_append,
            loopback=lambda sender, message: self._loopback.append((sender, message)),
            new_request_id=itertools.count(1).__next__,
            current_settings=lambda: self.settings,
            accepted_state=lambda: self.coordination_state.last_accepted_state,
            term=lambda: self.coordination_state.current_term,
            mode=lambda: self.mode,
            now=now,
            derivations=derivations if derivations is not None else Derivations(),
            versions=NodeVersions(local_node, version),
        )
        ctx = self.ctx
        self.foreign_clusters = ctx.foreign_clusters
        self.peer_finder = PeerFinder(
            ctx,
            on_master_discovered=lambda master: self.joins.on_master_discovered(master),
            on_found_peers_updated=self._on_found_peers_updated,
            on_term_seen=self._update_max_term_seen,
        )
        self.bootstrap = ClusterBootstrapService(ctx, self.coordination_state.set_initial_state)
        self.joins = JoinHelper(ctx)
        self.formation = ClusterFormationFailureHelper(
            ctx, self.peer_finder.discovered_nodes, lambda: self.peer_finder.unreachable, self.joins.recent_rejection
        )
        self.election_scheduler: ElectionScheduler | None = None
        self.pre_votes = PreVoteCollector(
            ctx,
            is_election_quorum=self.coordination_state.is_election_quorum,
            start_election=self._start_election,
            on_term_seen=self._update_max_term_seen,
        )
        self.publish_handler = PublishHandler(
            ctx,
            self.coordination_state,
            PublishListener(
                before_accept=self._ensure_term_at_least,
                on_accepted=self._on_accepted,
                join_for=self.joins.join_for,
                on_committed=self._on_committed,
                on_own_commit=self._on_own_commit,
                on_own_commit_failed=self._become_candidate,
            ),
        )
        self.master_tasks = MasterTasks(
            ctx,
            self.coordination_state,
            MasterTasksListener(
                can_run=lambda: self.mode is Mode.LEADER and self.publication is None,
                publish=self._publish,
                unchanged=self._after_publication,
                refused=self._become_candidate,
                session_expired=lambda session_id: self.sessions.is_expired(session_id),
                checkpoint_session=lambda session_id, session: self.sessions.checkpoint(session_id, session),
            ),
        )
        self.sessions = SessionLeases(ctx, self.master_tasks.submit)
        self.publication: Publication | None = None
        self.applied_in_current_term = False
        self.followers_checker = FollowersChecker(
            ctx, on_node_failed=self._remove_node, on_healthy=self._catch_up, on_term_seen=self._update_max_term_seen
        )
        self.version_exchange = VersionExchange(ctx, self.master_tasks, self._remove_node)
        self.lag_detector = LagDetector(ctx, self._remove_node, lambda: self.requests.check_waits())
        self.catch_up = CatchUp(ctx)  # lagging and rejoining nodes get the diffs they missed
        self.handover = Handover(
            ctx,
            applied_versions=lambda: self.lag_detector.applied_versions,
            has_join_vote=self.coordination_state.contains_join_vote_from,
            improved=self.master_tasks.improved,
            start_election=self._start_election,
            abdicate_to=self._abdicate_to,
        )
        self.leader_checker: LeaderChecker | None = None
        self.forwarder = Forwarder(ctx)
        self.reads = ReadService(ctx, lambda: self.applied_state, self._reads_ready)
        self.requests = ClientRequests(
            ctx,
            leader=lambda: self.leader,
            submit_task=self.master_tasks.submit,
            forwarder=self.forwarder,
            reads=self.reads,
            renew_session=self.sessions.renew,
            applied_version=self.lag_detector.applied,
        )
        self.peer_watch = PeerWatch(local_node.id)
        self.elections_won = 0  # counters for metrics
        self.failed_publications = 0

    # ------------------------------------------------------------------------------------------------------
    # public API
    @property
    def settings(self) -> Settings:
        """The node's settings with the dynamic ones of the applied state, parsed once per applied state."""
        persistent = self.applied_state.persistent_settings
        if persistent is not self._settings_basis:
            self._settings_basis = persistent
            self._settings = self.base_settings.with_dynamic(persistent)
        return self._settings

    @property
    def current_term(self) -> int:
        return self.coordination_state.current_term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self.coordination_state.last_accepted_state

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def start(self, now: int) -> list[Effect]:
        return self._step(now, self._start)

    def handle_message(self, sender: str, message: m.Message, now: int) -> list[Effect]:
        return self._step(now, lambda: self._dispatch(sender, message))

    def handle_send_failure(self, destination: str, message: m.Message, now: int) -> list[Effect]:
        return self._step(now, lambda: self._on_send_failure(destination, message))

    def handle_peer_disconnected(self, address: str, now: int) -> list[Effect]:
        """A connection to a peer closed: a leader or follower check fails at once, without a timeout."""
        return self._step(now, lambda: self._on_peer_disconnected(address))

    def handle_seed_addresses(self, addresses: Sequence[str], now: int) -> list[Effect]:
        return self._step(now, lambda: self.peer_finder.probe(addresses))

    def tick(self, now: int) -> list[Effect]:
        def fire_due() -> None:
            while (callback := self.timers.pop_due(self.now)) is not None:
                callback()
                self._drain_loopback()

        return self._step(now, fire_due)

    def submit(self, request_id: int, request: Submitted, now: int, timeout_ms: int | None = None) -> list[Effect]:
        def reply(result: ClientResult) -> None:
            self._out.append(RequestCompleted(request_id, result))

        timeout = DEFAULT_REQUEST_TIMEOUT_MS if timeout_ms is None else timeout_ms
        return self._step(now, lambda: self.requests.handle(request, reply, timeout, forwarded=False))

    def stop(self, now: int) -> list[Effect]:
        def stop() -> None:
            if self.mode is Mode.LEADER:
                self.handover.abdicate_if_possible()
            self.stopped = True

        return self._step(now, stop)

    def handle_undecodable(self, sender: str, kind: str, request_id: int | None, why: str, now: int) -> list[Effect]:
        return self._step(now, lambda: self.version_exchange.on_undecodable(sender, kind, request_id, why))

    def status(self) -> CoordinatorStatus:
        """A frozen snapshot of this node's coordination, for the shells (they read no component)."""
        applied, accepted, leading = self.applied_state, self.last_accepted_state, self.mode is Mode.LEADER
        lag = self.lag_detector
        return CoordinatorStatus(
            node_id=self.local_node.id,
            mode=self.mode,
            term=self.current_term,
            leader=self.leader.id if self.leader is not None else None,
            applied_master=applied.master_node,
            applied_version=applied.version,
            last_accepted_term=accepted.term,
            last_accepted_version=accepted.version,
            last_committed_version=applied.version,
            health=health_of(applied),
            no_master_block=NoMasterBlock(self.settings[NO_MASTER_BLOCK], applied.master_node is None),
            formation_problem=self.formation.problem(),
            foreign_clusters=self.foreign_clusters.problem(applied.cluster_uuid, self.now),
            peer_names={address: peer.name for address, peer in self.peer_finder.peers.items()},
            follower_lag=follower_lag(applied, self.local_node.id, lag.applied_versions) if leading else None,
            state_bytes=self.master_tasks.state_size(applied) if leading else None,
            max_state_bytes=self.settings[MAX_STATE_SIZE],
            elections_won=self.elections_won,
            failed_publications=self.failed_publications,
            lagging_nodes_removed=lag.lagging_nodes_removed,
            versions=self.ctx.versions.status(applied),
            now=self.now,
        )

    @property
    def now(self) -> int:
        return self.ctx.now

    @property
    def leader_check_id(self) -> int:
        """The leader check awaiting an answer (0: none)."""
        return self.leader_checker.request_id if self.leader_checker is not None else 0

    # ------------------------------------------------------------------------------------------------------
    # the step: run one event, then everything the node sent itself

    def _step(self, now: int, action: Callable[[], None]) -> list[Effect]:
        self.ctx.now = max(self.ctx.now, now)
        action()
        self._drain_loopback()
        if (watch := self.peer_watch.update(self.mode, self.leader, self.applied_state.nodes)) is not None:
            self._out.append(watch)
        out, self._out = self._out, []
        return out

    def _drain_loopback(self) -> None:
        while self._loopback:
            sender, message = self._loopback.popleft()
            self._dispatch(sender, message)

    def _out_append(self, effect: Effect) -> None:
        self._out.append(effect)

    def _send(self, address: str, message: m.Message) -> None:
        self.ctx.send(address, message)

    def _log(self, level: str, message: str) -> None:
        self.ctx.log(level, message)

    def _history(self, event_type: EventType, state: ClusterState | None = None, **fields: Any) -> None:
        self.ctx.record_history(event_type, state, **fields)

    # ------------------------------------------------------------------------------------------------------
    # dispatch

    def _dispatch(self, sender: str, message: m.Message) -> None:
        if self.stopped:
            return
        handler = self._handlers.get(type(message))
        if handler is None:
            self._log("warning", f"ignoring unexpected message {type(message).__name__}")
            return
        handler(self, sender, message)

    def _on_send_failure(self, destination: str, message: m.Message) -> None:
        if isinstance(message, m.PeersRequest):
            self.peer_finder.on_probe_failed(destination)
        elif isinstance(message, m.FollowerCheck):
            self.followers_checker.on_send_failure(destination, message)
        elif isinstance(message, m.LeaderCheck):
            if self.mode is Mode.FOLLOWER and self.leader and self.leader.transport_address == destination:
                self._become_candidate(f"leader {self.leader.name} disconnected")
        elif isinstance(message, m.PublishRequest | m.ApplyCommit):
            self._publication_target_failed(self.ctx.node_id_at(destination))
        elif isinstance(message, m.JoinRequest):
            self.joins.on_send_failure(destination)
        elif isinstance(message, m.ForwardedRequest):
            self.forwarder.on_send_failure(message)

    def _on_peer_disconnected(self, address: str) -> None:
        if self.mode is Mode.FOLLOWER and self.leader is not None and self.leader.transport_address == address:
            self._become_candidate(f"lost the connection to leader {self.leader.name}")
        elif self.mode is Mode.LEADER:
            node_id = self.ctx.node_id_at(address)
            if node_id is not None and node_id != self.local_node.id:
                self._remove_node(node_id, "disconnected")

    # ------------------------------------------------------------------------------------------------------
    # modes: entering one closes the rounds of the others

    def _start(self) -> None:
        self._become_candidate("node started", initial=True)

    def _become_candidate(self, reason: str, initial: bool = False) -> None:
        if self.mode is Mode.CANDIDATE and not initial:
            return
        previous = self.mode
        self._log("info" if not initial else "debug", f"becoming CANDIDATE: {reason}")
        if previous is Mode.LEADER:
            self._history(EventType.STEPPED_DOWN, reason=reason)
            self._stop_leading(reason)
        self.forwarder.fail_all("the master changed")
        self.mode = Mode.CANDIDATE
        self.leader = None
        self.joins.request_in_flight = None
        if self.leader_checker is not None:
            self.leader_checker.close()
            self.leader_checker = None
        if self.applied_state.master_node is not None or initial:
            self.applied_state = self.applied_state.replace(master_node=None)
            self._out.append(StateApplied(self.applied_state))
        self.peer_finder.activate()
        self.formation.activate()

    def _become_follower(self, leader: DiscoveryNode, reason: str) -> None:
        if self.mode is Mode.FOLLOWER and self.leader == leader:
            return
        previous = self.mode
        if previous is Mode.LEADER:
            self._history(EventType.STEPPED_DOWN, reason=reason)
            self._stop_leading(reason)
        if self.leader != leader:
            self.forwarder.fail_all("the master changed")
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
        self.joins.request_in_flight = None
        self.joins.reject_pending("this node is now a follower")
        self._stop_elections()
        self.peer_finder.deactivate()
        self.formation.deactivate()
        # A check still in flight was sent to the previous leader: neither its answer (that node may say it is
        # no longer the master) nor its timeout may count against this one.
        if self.leader_checker is not None:
            self.leader_checker.close()
        self.leader_checker = LeaderChecker(self.ctx, leader, self._become_candidate)

    def _reads_ready(self) -> bool:
        # Every committed state applied here: followers may show one before the master applies it (applies last).
        return self.applied_in_current_term and (self.publication is None or not self.publication.committed)

    def _become_leader(self) -> None:
        self._log("info", f"elected as master in term {self.current_term}")
        self.mode = Mode.LEADER
        self.leader = self.local_node
        self.elections_won += 1
        self.applied_in_current_term = False
        self._history(EventType.ELECTED)
        self.sessions.promote(self.last_accepted_state)
        self._stop_elections()
        self.peer_finder.deactivate()
        self.formation.deactivate()
        joins = self.joins.take_pending()
        self.master_tasks.queue.add(Task("elected-as-master", Priority.URGENT, ElectedAsMaster(), lambda result: None))
        for task in self.joins.admitted_tasks(joins):
            self.master_tasks.queue.add(task)
        self.master_tasks.run()

    def _stop_leading(self, reason: str) -> None:
        """Leaving LEADER mode: fail what the master was doing for others."""
        if self.publication is not None:
            publication, self.publication = self.publication, None
            publication.close()
            for task in publication.tasks:
                task.reply(client.failed_publication_error(f"master stepped down: {reason}"))
            self._out.append(publication.finished(committed=publication.committed))
        self.master_tasks.fail_all(f"no longer master: {reason}")
        for node_id in self.followers_checker.checked_nodes():
            self.lag_detector.cancel(node_id)
        self.followers_checker.clear()
        self.lag_detector.clear_versions()
        self.reads.close(f"no longer master: {reason}")
        self.requests.close_waits(f"no longer master: {reason}")
        self.sessions.demote()

    # ------------------------------------------------------------------------------------------------------
    # terms

    def _update_max_term_seen(self, term: int) -> None:
        if (too_far := self.coordination_state.term_reach.problem(term, self.current_term)) is not None:
            return self._log("warning", f"ignoring a peer's term: {too_far}")
        self.max_term_seen = max(self.max_term_seen, term)
        if self.mode is Mode.LEADER and self.max_term_seen > self.current_term and self.publication is None:
            # Someone is in a newer term: move past it and win again rather than wait to be deposed.
            self._log("info", f"saw term {self.max_term_seen} > {self.current_term}; starting a new election")
            if self._ensure_term_at_least(self.local_node, self.max_term_seen) is not None:
                self._start_election()

    def _ensure_term_at_least(self, candidate: DiscoveryNode, term: int) -> m.Join | None:
        return self._join_leader_in_term(candidate, term) if self.current_term < term else None

    def _join_leader_in_term(self, candidate: DiscoveryNode, term: int) -> m.Join | None:
        try:
            join = self.coordination_state.handle_start_join(candidate.id, term)
        except CoordinationStateRejected as rejected:
            self._log("warning" if term > self.max_term_seen else "debug", f"not joining term {term}: {rejected}")
            return None
        except OSError as error:
            self._log("warning", f"failed to persist term {term}: {error}")
            self._become_candidate("failed to persist the term")
            return None
        self.joins.last_join = join
        self.max_term_seen = max(self.max_term_seen, term)
        self._history(EventType.TERM)
        if self.mode is not Mode.CANDIDATE:
            self._become_candidate(f"joining term {term}")
        return join

    # ------------------------------------------------------------------------------------------------------
    # discovery and elections

    def _on_found_peers_updated(self) -> None:
        if self.mode is not Mode.CANDIDATE:
            return
        self.bootstrap.maybe_bootstrap(self.peer_finder.discovered_nodes(), self.peer_finder.peers_seen_terms.values())
        votes = {node.id for node in self.peer_finder.discovered_nodes()}
        if self.local_node.master_eligible and self.coordination_state.is_election_quorum(votes):
            if self.election_scheduler is None or not self.election_scheduler.scheduled:
                self.election_scheduler = ElectionScheduler(self.ctx, self._start_pre_vote)
        else:
            self._stop_elections()

    def _stop_elections(self) -> None:
        if self.election_scheduler is not None:
            self.election_scheduler.close()
            self.election_scheduler = None
        self.pre_votes.close()

    def _start_pre_vote(self) -> None:
        if not self.local_node.master_eligible or not self.handover.local_node_may_win(self.last_accepted_state):
            return
        self.pre_votes.start_round(self.peer_finder.master_eligible_peers())

    def _next_term(self) -> int | None:
        term = successor(max(self.current_term, self.max_term_seen))
        if term is None:
            self._log("error", "the term has reached the largest 64-bit value: this node cannot start an election")
        return term

    def _start_election(self) -> None:
        if (term := self._next_term()) is None:
            return
        request = self.version_exchange.start_join(self.local_node, term)
        self._log("debug", f"starting election for term {term}")
        self._send(self.local_node.transport_address, request)
        for node in self.peer_finder.master_eligible_peers():
            self._send(node.transport_address, request)
        if self.mode is Mode.LEADER or self.mode is Mode.FOLLOWER:
            for node in self.last_accepted_state.nodes.values():
                if node.master_eligible and node.transport_address not in self.peer_finder.peers:
                    self._send(node.transport_address, request)

    def _on_start_join(self, sender: str, request: m.StartJoinRequest) -> None:
        if self.ctx.foreign(request.cluster_uuid, sender) or self.version_exchange.refuses(request):
            return
        if request.term <= self.current_term:
            self._log("debug", f"ignoring start-join for term {request.term} <= {self.current_term}")
            return
        join = self._join_leader_in_term(request.candidate, request.term)
        if join is None:
            return
        self.joins.send_join_request(request.candidate, request.term, join)

    def _on_join_request(self, sender: str, request: m.JoinRequest) -> None:
        if self.joins.refused_foreign(request):
            return
        won_before = self.coordination_state.election_won and self.mode is Mode.LEADER
        self.catch_up.on_join_request(request)
        if request.join is not None:
            self._handle_join(request.join)
        if self.mode is Mode.LEADER and self.coordination_state.election_won:
            if request.source.id != self.local_node.id and (task := self.joins.admitted(request)) is not None:
                self.master_tasks.submit(task)
        elif self.mode is Mode.CANDIDATE:
            self.joins.hold(request)
            if self.coordination_state.election_won and not won_before:
                self._become_leader()
        else:
            self.joins.reject(request.source, request.request_id, "join target is a follower")

    def _handle_join(self, join: m.Join) -> None:
        own_join = self._ensure_term_at_least(self.local_node, join.term)
        if own_join is not None:
            self._handle_join(own_join)
        try:
            self.coordination_state.handle_join(join)
        except CoordinationStateRejected as rejected:
            self._log("debug", f"join from {join.voter_id} not counted: {rejected}")

    # ------------------------------------------------------------------------------------------------------
    # the master's tasks

    def _publish(
        self, state: ClusterState, base: ClusterState, tasks: list[Task], results: list[ClientResult | None]
    ) -> None:
        self.sessions.published(base, state, [task.payload for task in tasks])
        self.publication = Publication(self.ctx, self._publication_listener, state, base, tasks, results)
        self.publication.start()

    # ------------------------------------------------------------------------------------------------------
    # publication (master side): the Publication round reports back here

    @property
    def _publication_listener(self) -> PublicationListener:
        return PublicationListener(
            accept_ack=lambda response: (
                self.coordination_state.handle_publish_response(response.source_id, response.term, response.version)
                is not None
            ),
            publish_votes=lambda: self.coordination_state.publish_votes,
            last_committed_config=lambda: self.coordination_state.last_committed_config,
            on_committed=lambda publication: self._history(
                EventType.COMMITTED, publication.state, quorum=publication.quorum
            ),
            on_failed=self._fail_publication,
            on_completed=self._complete_publication,
            catch_up_diff=self.catch_up.joiner_diff,
        )

    def _on_publish_response(self, sender: str, response: m.PublishResponse) -> None:
        if response.join is not None and self.mode is not Mode.FOLLOWER:
            self._handle_join(response.join)
        if self.publication is not None and self.mode is Mode.LEADER:
            self.publication.on_publish_response(response)
        elif self.mode is Mode.LEADER:
            self.catch_up.on_late_response(response)

    def _on_apply_commit_response(self, sender: str, response: m.ApplyCommitResponse) -> None:
        if response.ok:
            self._record_applied(response.source_id, response.version)
        if self.publication is not None:
            self.publication.on_apply_commit_response(response)

    def _record_applied(self, node_id: str, version: int) -> bool:
        """Record a follower's applied version (an apply answer, a follower check); True if it just reached the
        latest state. After its publication completed (a quorum sufficed) it only now counts as healthy."""
        state = self.last_accepted_state
        caught_up = self.lag_detector.applied(node_id) < state.version <= version
        self.lag_detector.record_applied(node_id, version)
        if caught_up and self.publication is None and self.applied_in_current_term:
            self._after_publication(state)  # a configuration or a handover that needs it, not at the next publication
        return caught_up

    def _publication_target_failed(self, node_id: str | None) -> None:
        if self.publication is not None:
            self.publication.target_failed(node_id)

    def _fail_publication(self, publication: Publication, reason: str) -> None:
        self.failed_publications += 1
        self._log("warning", f"publication of version {publication.version} failed: {reason}")
        self._become_candidate(f"publication of version {publication.version} failed: {reason}")

    def _complete_publication(self, publication: Publication) -> None:
        self.publication = None
        publication.close()
        state = self.last_accepted_state  # committed: last committed config caught up with the accepted one
        if state.state_uuid != publication.state.state_uuid:
            raise AssertionError(
                f"completing publication of {publication.state.state_uuid} but holding {state.state_uuid}"
            )
        applied_before = self.applied_state
        self._apply(state)
        self.applied_in_current_term = True
        self.sessions.committed(applied_before, state)
        self._out.append(publication.finished(committed=True))
        for task, result in zip(publication.tasks, publication.results, strict=True):
            task.reply(result or Committed(state.term, state.version))
        self.lag_detector.start(publication.state)
        self.followers_checker.sync(state)
        self._after_publication(state)

    def _after_publication(self, state: ClusterState) -> None:
        if self.mode is not Mode.LEADER:
            return
        self.reads.serve_if_possible()
        self.requests.check_waits()
        if not self.handover.local_node_may_win(state) and self.handover.abdicate_if_possible():
            return
        self._improve_voting_configuration(state)
        self.master_tasks.run()

    def _improve_voting_configuration(self, state: ClusterState) -> None:
        if self.handover.collect_missing_votes(state):
            return
        if self.master_tasks.improved(state) != state and not self.master_tasks.is_pending(Reconfigure):
            self.master_tasks.submit(Task("reconfigure", Priority.URGENT, Reconfigure(), lambda result: None))

    def _abdicate_to(self, node: DiscoveryNode) -> None:
        if (term := self._next_term()) is None:
            return
        self._log("info", f"abdicating to {node.name} with term {term}")
        request = self.version_exchange.start_join(node, term)
        for other in self.last_accepted_state.nodes.values():
            if other.master_eligible:
                self._send(other.transport_address, request)
        self._become_candidate(f"abdicated to {node.name}")

    # ------------------------------------------------------------------------------------------------------
    # publication (receiver side)

    def _on_accepted(self, source: DiscoveryNode, state: ClusterState) -> None:
        self.catch_up.on_accepted(state)
        self._history(EventType.ACCEPTED, state)
        if source.id != self.local_node.id:
            self._become_follower(source, "received a publication")
            self._update_max_term_seen(state.term)

    def _on_committed(self, state: ClusterState) -> None:
        self._history(EventType.COMMITTED, state)
        self._apply(state)

    def _on_own_commit(self, version: int) -> None:
        if self.publication is not None:
            self.publication.on_own_commit_applied(version)

    def _apply(self, state: ClusterState) -> None:
        if state.term_version() <= self.last_applied:
            return  # applied (term, version) strictly increases on every node
        self.last_applied = state.term_version()
        self._history(EventType.APPLIED, state)
        self.applied_state = state
        self._out.append(StateApplied(state))

    # ------------------------------------------------------------------------------------------------------
    # fault detection: the checkers report back here

    def _catch_up(self, node_id: str, response: m.FollowerCheckResponse) -> None:
        """Resend what a follower missed (a lost publication or commit) instead of waiting for the lag detector."""
        if self.version_exchange.on_follower_answer(node_id, response):
            return  # removed: it runs a release older than every node of the cluster
        state = self.last_accepted_state
        node = state.nodes.get(node_id)
        if self._record_applied(node_id, response.applied_version) or self.publication is not None or node is None:
            return
        if response.applied_version >= state.version:
            if node.master_eligible and node_id not in state.last_accepted_config and self.applied_in_current_term:
                self._improve_voting_configuration(state)  # a healthy node that could vote but does not yet
            return
        published = self.catch_up.as_published(state)
        missed = catch_up_message(self.local_node, published, response, self.catch_up.diff_since)
        if missed is not None:
            self._send(node.transport_address, missed)

    def _remove_node(self, node_id: str, reason: str) -> None:
        node = self.last_accepted_state.nodes.get(node_id)
        self.followers_checker.stop_checking(node_id)
        self.lag_detector.cancel(node_id)
        if node is None:
            return
        self._log("info", f"removing {node.name} from the cluster: {reason}")
        self._publication_target_failed(node_id)
        if self.mode is Mode.LEADER:
            task = Task(f"node-left [{node.name}]", Priority.IMMEDIATE, NodeLeft(node_id), lambda result: None)
            self.master_tasks.submit(task)

    def _on_follower_check(self, sender: str, request: m.FollowerCheck) -> None:
        leader = request.source
        if self.mode is Mode.FOLLOWER and self.leader == leader and request.term == self.current_term:
            ok = True
        elif request.term < self.current_term or (self.mode is Mode.LEADER and request.term == self.current_term):
            ok = False
        else:
            self._ensure_term_at_least(leader, request.term)
            ok = request.term == self.current_term  # not when the term was out of reach or failed to persist
            if ok:
                self._become_follower(leader, "received a follower check")
        state = self.last_accepted_state
        answer = m.FollowerCheckResponse(
            self.local_node.id,
            request.request_id,
            ok,
            self.current_term,
            state.term,
            state.version,
            self.last_applied[1],
            **self.version_exchange.answer_fields(request, ok),
        )
        self._send(leader.transport_address, answer)

    def _on_leader_check(self, sender: str, request: m.LeaderCheck) -> None:
        self._send(sender, answer_leader_check(request, self.mode is Mode.LEADER, self.last_accepted_state))

    def _on_leader_check_response(self, sender: str, response: m.LeaderCheckResponse) -> None:
        if self.mode is Mode.FOLLOWER and self.leader_checker is not None:
            self.leader_checker.on_response(response)

    # ------------------------------------------------------------------------------------------------------
    # responses to other nodes' rounds

    def _on_leadership_probe(self, sender: str, probe: m.LeadershipProbe) -> None:
        ok = probe.term == self.current_term and (self.leader is None or self.leader.id == probe.source_id)
        self._send(sender, m.LeadershipProbeResponse(self.local_node.id, self.current_term, probe.request_id, ok))

    def _on_leadership_probe_response(self, sender: str, response: m.LeadershipProbeResponse) -> None:
        self._update_max_term_seen(response.term)
        self.reads.on_probe_response(response)

    _handlers: dict[type, Callable[[Coordinator, str, Any], None]] = {}


Coordinator._handlers = {
    m.PeersRequest: lambda self, sender, message: self.peer_finder.on_peers_request(sender, message, self.leader),
    m.PeersResponse: lambda self, sender, message: self.peer_finder.on_peers_response(sender, message),
    m.PreVoteRequest: lambda self, sender, message: self.pre_votes.on_request(sender, message, self.leader),
    m.PreVoteResponse: lambda self, sender, message: self.pre_votes.on_response(sender, message),
    m.StartJoinRequest: Coordinator._on_start_join,
    m.JoinRequest: Coordinator._on_join_request,
    m.JoinResponse: lambda self, sender, message: self.joins.on_join_response(sender, message),
    m.PublishRequest: lambda self, sender, message: self.publish_handler.on_publish_request(message),
    m.PublishResponse: Coordinator._on_publish_response,
    m.ApplyCommit: lambda self, sender, message: self.publish_handler.on_apply_commit(sender, message),
    m.ApplyCommitResponse: Coordinator._on_apply_commit_response,
    m.FollowerCheck: Coordinator._on_follower_check,
    m.FollowerCheckResponse: lambda self, sender, message: self.followers_checker.on_response(message),
    m.LeaderCheck: Coordinator._on_leader_check,
    m.LeaderCheckResponse: Coordinator._on_leader_check_response,
    m.LeadershipProbe: Coordinator._on_leadership_probe,
    m.LeadershipProbeResponse: Coordinator._on_leadership_probe_response,
    m.ForwardedRequest: lambda self, sender, message: self.requests.on_forwarded_request(sender, message),
    m.ForwardedResponse: lambda self, sender, message: self.forwarder.on_response(message),
}
