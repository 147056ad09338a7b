"""A deterministic simulation of a whole cluster: virtual time, a seeded RNG, a faulty network, crashes,
restarts, failing disks and clients. The same seed reproduces the same run exactly.

After every step it checks the core's invariants on every node and the cluster-wide safety properties;
a violation raises `SafetyViolation` naming the seed.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed, ReadBarrier
from coordinated.coordination.coordinator import Coordinator, Mode
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
from coordinated.coordination.elections import ELECTION_DURATION, ELECTION_MAX_TIMEOUT
from coordinated.coordination.followers_checker import (
    FOLLOWER_CHECK_INTERVAL,
    FOLLOWER_CHECK_RETRY_COUNT,
    FOLLOWER_CHECK_TIMEOUT,
)
from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.history import NO_CLUSTER_UUID, HistoryEvent
from coordinated.coordination.leader_checker import (
    LEADER_CHECK_INTERVAL,
    LEADER_CHECK_RETRY_COUNT,
    LEADER_CHECK_TIMEOUT,
)
from coordinated.coordination.messages import Message, decode_envelope
from coordinated.coordination.offline_recovery import plan_remove_settings
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.publication import PUBLISH_TIMEOUT
from coordinated.coordination.ranges import RangeEntry, range_page
from coordinated.coordination.reconfigurator import AUTO_SHRINK_VOTING_CONFIGURATION
from coordinated.coordination.recovery import LoadRecord, Refuse, recovered_state_event
from coordinated.coordination.registry import default_settings
from coordinated.coordination.settings import CLUSTER_NAME, NODE_NAME, NODE_ROLES, Settings
from coordinated.coordination.state import ClusterState, DiscoveryNode
from coordinated.coordination.state_index import SortedKeys
from coordinated.simulation.linearizability import Operation, TxnOperation
from coordinated.simulation.network import Link, Network
from coordinated.simulation.node_invariants import check_node_invariants
from coordinated.simulation.recorder import OperationRecorder
from coordinated.simulation.storage import FlakyPersistedState, InjectedIOError, StorageFault, summarize_events

__all__ = ["FlakyPersistedState", "InjectedIOError", "SafetyViolation", "SimNode", "SimulatedCluster", "StorageFault"]

# Fast-but-realistic settings for the simulator: default fault detection, short election backoff.
SIM_SETTINGS = default_settings()


def stabilisation_time(settings: Settings) -> int:
    """Virtual time in which a healed cluster must settle (after Elasticsearch's DEFAULT_STABILISATION_TIME)."""
    election_delay = settings[ELECTION_MAX_TIMEOUT] + settings[ELECTION_DURATION] * 4
    leader_failure = (settings[LEADER_CHECK_INTERVAL] + settings[LEADER_CHECK_TIMEOUT]) * settings[
        LEADER_CHECK_RETRY_COUNT
    ]
    follower_failure = (settings[FOLLOWER_CHECK_INTERVAL] + settings[FOLLOWER_CHECK_TIMEOUT]) * settings[
        FOLLOWER_CHECK_RETRY_COUNT
    ]
    return leader_failure + election_delay + settings[PUBLISH_TIMEOUT] + election_delay + follower_failure + 2_000


def _roles(master_eligible: bool) -> tuple[str, ...]:
    return ("master",) if master_eligible else ()


class SafetyViolation(AssertionError):
    pass


@dataclass
class SimNode:
    index: int
    node: DiscoveryNode
    persisted: FlakyPersistedState
    settings: Settings
    coordinator: Coordinator | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    seq: int = 0
    boots: int = 0
    refused: str | None = None  # why the node refused to start from its storage; it then stays down

    @property
    def address(self) -> str:
        return self.node.transport_address

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def alive(self) -> bool:
        return self.coordinator is not None

    def running(self) -> Coordinator:
        if self.coordinator is None:
            raise RuntimeError(f"{self.name} is not running")
        return self.coordinator


@dataclass
class PendingOp:
    client: int
    node: int
    request: ClientRequest
    invoked: int
    on_done: Callable[[ClientResult], None] | None = None


class SimulatedCluster:
    def __init__(
        self,
        seed: int,
        node_count: int = 3,
        *,
        settings: Settings = SIM_SETTINGS,
        master_eligible: list[bool] | None = None,
        initial_master_nodes: int | None = None,
        check_safety: bool = True,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self.network = Network(random.Random(self.rng.getrandbits(64)))
        self.check_safety = check_safety
        self.nodes: list[SimNode] = []
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._sequence = itertools.count()
        self._request_ids = itertools.count(1)
        self._pending: dict[tuple[int, int], PendingOp] = {}
        self.recorder = OperationRecorder()  # what the clients did, for the linearizability checkers
        self.logs: list[tuple[int, str, str, str]] = []
        self.publications: list[PublicationFinished] = []
        self.steps = 0
        # Tests can watch every message sent: tap(sender name, destination address, message).
        self.tap: Callable[[str, str, Message], None] | None = None
        # cluster-wide safety bookkeeping
        # Per cluster UUID (a node of another cluster may be present): who won each term, the state of each
        # (term, version), and the committed states by version as (term, state_uuid).
        self._elected: dict[tuple[str, int], str] = {}
        self._state_by_version: dict[tuple[str, int, int], str] = {}
        self._committed: dict[str, dict[int, tuple[int, str]]] = {}
        self._parents: dict[str, tuple[str | None, int]] = {}
        # A node's copy of a state that `remove_settings` rewrote offline -> the state it stands for.
        self._rewritten: dict[str, str] = {}
        # What each state_uuid was recorded with, as the audit's unique-state-per-version compares it.
        self._content: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._committed_config: dict[tuple[str, str], Any] = {}
        self._unknown_uuid_owner: dict[int, str] = {}
        # Sessions, as the applied (committed) states show them: when each was created (its version), and
        # when a node first applied a later state without it.
        self._session_created: dict[str, int] = {}
        # Range reads waiting for a node to apply their barrier's version: node index -> (boots, version, then).
        self._apply_waiters: dict[int, list[tuple[int, int, Callable[[ClusterState | None], None]]]] = {}
        self.session_ended_at: dict[str, int] = {}
        # When some node was master (in LEADER mode): closed intervals, and the start of the open one.
        self.master_intervals: list[tuple[int, int]] = []
        self._master_since: int | None = None
        eligible = master_eligible or [True] * node_count
        base = settings.with_values({SEED_HOSTS: ()})
        names = [f"node{index}" for index in range(node_count)]
        bootstrap_count = node_count if initial_master_nodes is None else initial_master_nodes
        bootstrap = tuple(name for name, ok in zip(names, eligible, strict=True) if ok)[:bootstrap_count]
        for index in range(node_count):
            self.add_node(
                eligible[index],
                base.with_values(
                    {NODE_NAME: names[index], NODE_ROLES: _roles(eligible[index]), INITIAL_MASTER_NODES: bootstrap}
                ),
            )

    # ---------------------------------------------------------------------------------------------------
    # nodes

    def add_node(self, master_eligible: bool = True, settings: Settings | None = None) -> SimNode:
        index = len(self.nodes)
        name = f"node{index}"
        node_settings = settings or SIM_SETTINGS.with_values(
            {NODE_NAME: name, NODE_ROLES: _roles(master_eligible), INITIAL_MASTER_NODES: ()}
        )
        node = DiscoveryNode(
            id=f"{name}-{self.rng.getrandbits(32):08x}",
            name=name,
            transport_address=f"{name}:9300",
            roles=("master",) if master_eligible else (),
        )
        persisted = FlakyPersistedState(node_settings[CLUSTER_NAME], random.Random(self.rng.getrandbits(64)), node.id)
        sim_node = SimNode(index, node, persisted, node_settings)
        self.nodes.append(sim_node)
        self.start_node(index)
        return sim_node

    def start_node(self, index: int) -> None:
        sim_node = self.nodes[index]
        if sim_node.alive or sim_node.refused is not None:
            return
        if sim_node.boots:
            # A restarted process reads its storage back and obeys the sidecar's startup rule.
            history = summarize_events(sim_node.history)
            decision = sim_node.persisted.reopen(history)
            if isinstance(decision, Refuse):
                sim_node.refused = decision.reason
                self.logs.append((self.now, sim_node.name, "error", f"refusing to start: {decision.reason}"))
                return
            if isinstance(decision, LoadRecord):
                self.logs.extend((self.now, sim_node.name, "warning", warning) for warning in decision.warnings)
                # As the sidecar does: a state that a failed write left on the disk is recorded before it is used.
                recovered = recovered_state_event(
                    sim_node.node.id, sim_node.name, sim_node.persisted.last_accepted_state, history
                )
                if recovered is not None:
                    self._run_effects(sim_node, [RecordHistory(recovered)])
        sim_node.boots += 1
        sim_node.coordinator = Coordinator(
            local_node=sim_node.node,
            settings=sim_node.settings,
            persisted=sim_node.persisted,
            rng=random.Random(self.rng.getrandbits(64)),
            now=self.now,
        )
        self._run_effects(sim_node, sim_node.coordinator.start(self.now))

    def crash(self, index: int) -> None:
        """Stop a node at once; what it persisted survives, everything else is lost."""
        sim_node = self.nodes[index]
        sim_node.coordinator = None
        self._note_mastership()
        self._wake_apply_waiters(sim_node, None)
        for key in [key for key in self._pending if key[0] == index]:
            self._complete_op(key, ClusterError("node_closed", "the node crashed", 503, maybe_applied=True))

    def remove_settings(self, index: int, patterns: Sequence[str]) -> None:
        """`coordinated node-tool remove-settings` on a stopped node: its history event, then its new record."""
        sim_node = self.nodes[index]
        assert not sim_node.alive, "the node tool runs on a stopped node"
        persisted = sim_node.persisted
        uuid = f"{self.rng.getrandbits(128):032x}"
        plan = plan_remove_settings(
            sim_node.node.id, persisted.current_term, persisted.last_accepted_state, patterns, uuid
        )
        self._run_effects(sim_node, [RecordHistory(msgspec.convert(plan.event, HistoryEvent))])
        persisted.set_last_accepted_state(plan.state)

    def restart(self, index: int, new_address: str | None = None) -> None:
        """Crash and start a node; with `new_address` it comes back elsewhere, as a rescheduled pod gets a new IP."""
        self.crash(index)
        if new_address is not None:
            sim_node = self.nodes[index]
            sim_node.node = msgspec.structs.replace(sim_node.node, transport_address=new_address)
        self.start_node(index)

    def lose_data(self, index: int) -> None:
        """Crash a node and start it again on an empty disk, under the same name and address: a pod that gets a
        new, empty claim after its volume was lost for good. It is a new node (a new id, no history), and it
        has no bootstrap list (the operator empties it once the cluster has bootstrapped): it can only join."""
        self.crash(index)
        sim_node = self.nodes[index]
        node = msgspec.structs.replace(sim_node.node, id=f"{sim_node.name}-{self.rng.getrandbits(32):08x}")
        settings = sim_node.settings.with_values({INITIAL_MASTER_NODES: ()})
        persisted = FlakyPersistedState(settings[CLUSTER_NAME], random.Random(self.rng.getrandbits(64)), node.id)
        self.nodes[index] = SimNode(index, node, persisted, settings)
        self.start_node(index)

    def storage_fault(self, index: int, fault: StorageFault) -> None:
        """Crash a node, damage its storage as `fault` says, and start it again: it loads what the startup
        rule allows, or refuses and stays down."""
        self.crash(index)
        self.nodes[index].persisted.apply_fault(fault, self.rng)
        self.start_node(index)

    def close_connection(self, index: int, address: str) -> None:
        """Tell a node that its connection to `address` closed (as a kernel would on a peer's death)."""
        sim_node = self.nodes[index]
        self._run_effects(sim_node, sim_node.running().handle_peer_disconnected(address, self.now))

    def node_by_name(self, name: str) -> SimNode:
        return next(node for node in self.nodes if node.name == name)

    def addresses(self) -> list[str]:
        return [node.address for node in self.nodes]

    # ---------------------------------------------------------------------------------------------------
    # the event loop

    def schedule(self, at: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (at, next(self._sequence), action))

    def _next_event_time(self) -> tuple[int, int | None]:
        """The time of the next queued event or node timer, and the node whose timer it is (or None)."""
        best = self._queue[0][0] if self._queue else math.inf
        best_node: int | None = None
        for sim_node in self.nodes:
            if sim_node.coordinator is not None:
                deadline = sim_node.coordinator.next_deadline
                if deadline is not None and deadline < best:
                    best, best_node = deadline, sim_node.index
        return (int(best) if best != math.inf else -1), best_node

    def step(self, until: int) -> bool:
        at, node_index = self._next_event_time()
        if at < 0 or at > until:
            self.now = until
            return False
        self.now = max(self.now, at)
        if node_index is not None:
            sim_node = self.nodes[node_index]
            self._run_effects(sim_node, sim_node.running().tick(self.now))
        else:
            _, _, action = heapq.heappop(self._queue)
            action()
        self.steps += 1
        if self.check_safety:
            self.check_invariants()
        self._note_mastership()
        return True

    def _note_mastership(self) -> None:
        leading = any(node.coordinator is not None and node.coordinator.mode is Mode.LEADER for node in self.nodes)
        if leading and self._master_since is None:
            self._master_since = self.now
        elif not leading and self._master_since is not None:
            self.master_intervals.append((self._master_since, self.now))
            self._master_since = None

    def master_time(self, start: int, end: int) -> int:
        """How long within [start, end] some node was master: the time in which masters count a session down."""
        intervals = [*self.master_intervals]
        if self._master_since is not None:
            intervals.append((self._master_since, self.now))
        return sum(max(0, min(end, stop) - max(start, begin)) for begin, stop in intervals)

    def run_for(self, duration: int) -> None:
        until = self.now + duration
        while self.step(until):
            pass

    def run_until(self, condition: Callable[[], bool], timeout: int, step: int = 100) -> bool:
        deadline = self.now + timeout
        while self.now < deadline:
            if condition():
                return True
            self.run_for(min(step, deadline - self.now))
        return condition()

    # ---------------------------------------------------------------------------------------------------
    # effects

    def _run_effects(self, sim_node: SimNode, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(sim_node, effect.destination, effect.message)
            elif isinstance(effect, RecordHistory):
                sim_node.seq += 1
                event = effect.event.to_dict()
                event["seq"] = sim_node.seq
                event["ts"] = self.now / 1000
                sim_node.history.append(event)
                self._track(sim_node, event)
            elif isinstance(effect, ProbeSeeds):
                self.schedule(self.now, partial(self._deliver_seeds, sim_node.index))
            elif isinstance(effect, RequestCompleted):
                self._complete_op((sim_node.index, effect.request_id), effect.result)
            elif isinstance(effect, PublicationFinished):
                self.publications.append(effect)
            elif isinstance(effect, Log):
                self.logs.append((self.now, sim_node.name, effect.level, effect.message))
            elif isinstance(effect, StateApplied):
                self._check_sessions(effect.state)
                self._wake_apply_waiters(sim_node, effect.state)

    def _deliver_seeds(self, index: int) -> None:
        sim_node = self.nodes[index]
        if sim_node.coordinator is not None:
            self._run_effects(sim_node, sim_node.coordinator.handle_seed_addresses(self.addresses(), self.now))

    def _send(self, sender: SimNode, destination: str, message: Message) -> None:
        if self.tap is not None:
            self.tap(sender.name, destination, message)
        if destination == sender.address:  # a node's message to itself does not cross the network
            boots = sender.boots
            self.schedule(self.now, lambda: self._deliver(sender, sender, boots, message))
            return
        target = next((node for node in self.nodes if node.address == destination), None)
        link = self.network.link(sender.address, destination)
        if link is Link.BLACKHOLE:  # nothing comes back, not even a refusal (an unused IP, a dropping firewall)
            return
        if target is None or link is Link.DISCONNECTED or not target.alive:
            self.schedule(self.now + 1, lambda: self._fail_send(sender.index, sender.boots, destination, message))
            return
        if self.network.dropped():
            return
        at = self.now + self.network.delay(sender.address, destination)
        target_boots = target.boots
        self.schedule(at, lambda: self._deliver(sender, target, target_boots, message))

    def _deliver(self, sender: SimNode, target: SimNode, target_boots: int, message: Message) -> None:
        link = self.network.link(sender.address, target.address)
        if target.coordinator is None or target.boots != target_boots or link is Link.DISCONNECTED:
            # The connection it travelled on is gone: the sender notices.
            self.schedule(self.now + 1, lambda: self._fail_send(sender.index, sender.boots, target.address, message))
            return
        if link is Link.BLACKHOLE:
            return
        self._run_effects(target, target.coordinator.handle_message(sender.address, message, self.now))

    def deliver_late(self, sender: SimNode, target: SimNode, message: Message) -> None:
        """Deliver `message` now, whatever the links say: an answer that sat in the buffers of a paused process
        (SIGSTOP) or of a slow link, and arrives after the receiver has moved on."""
        if target.coordinator is not None:
            self._run_effects(target, target.coordinator.handle_message(sender.address, message, self.now))

    def deliver_from_wire(self, target: SimNode, sender_address: str, data: bytes) -> str | None:
        """Hand `target` an encoded envelope as the sidecar's transport would: decoded first, and refused (with
        the reason returned) if it does not decode; None once delivered. For tests that forge peer messages."""
        try:
            envelope = decode_envelope(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            return str(error)
        if target.coordinator is not None:
            self._run_effects(target, target.coordinator.handle_message(sender_address, envelope.message, self.now))
        return None

    def _fail_send(self, index: int, boots: int, destination: str, message: Message) -> None:
        sim_node = self.nodes[index]
        if sim_node.coordinator is not None and sim_node.boots == boots:
            self._run_effects(sim_node, sim_node.coordinator.handle_send_failure(destination, message, self.now))

    # ---------------------------------------------------------------------------------------------------
    # clients

    def submit(
        self,
        node_index: int,
        request: ClientRequest,
        client: int = 0,
        on_done: Callable[[ClientResult], None] | None = None,
        timeout: int = 10_000,
    ) -> None:
        sim_node = self.nodes[node_index]
        request_id = next(self._request_ids)
        op = PendingOp(client, node_index, request, self.now, on_done)
        if sim_node.coordinator is None:
            self.recorder.record(
                client, request, self.now, ClusterError("connect_exception", "node is down", 503), self.now
            )
            if on_done:
                on_done(ClusterError("connect_exception", "node is down", 503))
            return
        self._pending[(node_index, request_id)] = op
        self._run_effects(sim_node, sim_node.coordinator.submit(request_id, request, self.now, timeout))

    def _complete_op(self, key: tuple[int, int], result: ClientResult) -> None:
        op = self._pending.pop(key, None)
        if op is None:
            return
        self.recorder.record(op.client, op.request, op.invoked, result, self.now)
        if op.on_done is not None:
            op.on_done(result)

    @property
    def operations(self) -> list[Operation]:
        return self.recorder.operations

    @property
    def txn_operations(self) -> list[TxnOperation]:
        return self.recorder.txn_operations

    @property
    def range_operations(self) -> list[TxnOperation]:
        return self.recorder.range_operations

    def read_range(
        self,
        node_index: int,
        prefix: str,
        limit: int,
        client: int,
        on_done: Callable[[list[RangeEntry] | None], None],
    ) -> None:
        """A linearizable range read as the sidecar serves one: a read barrier through the node, a wait until the
        node has applied the barrier's version, then every page (of at most `limit` keys) from the state it
        then holds. Recorded with the first page's interval; `on_done` gets the entries, or None if it failed."""
        invoked = self.now

        def read(state: ClusterState | None) -> None:
            if state is None:
                on_done(None)
                return
            index = SortedKeys().at(state)
            entries: list[RangeEntry] = []
            after: str | None = None
            while True:
                page = range_page(state, index.with_prefix(prefix, after), limit)
                entries.extend(page.keys)
                after = page.next
                if not page.more:
                    break
            self.recorder.record_range(client, invoked, self.now, prefix, entries)
            on_done(entries)

        def after_barrier(result: ClientResult) -> None:
            if isinstance(result, Committed):
                self.when_applied(node_index, result.version, read)
            else:
                on_done(None)

        self.submit(node_index, ReadBarrier(), client=client, on_done=after_barrier)

    def when_applied(self, node_index: int, version: int, then: Callable[[ClusterState | None], None]) -> None:
        """Calls `then` with the node's applied state once it is at `version` or later; with None if the node
        stops first, or has not got there within 10 s."""
        sim_node = self.nodes[node_index]
        if sim_node.coordinator is None:
            then(None)
            return
        if sim_node.coordinator.applied_state.version >= version:
            then(sim_node.coordinator.applied_state)
            return
        waiter = (sim_node.boots, version, then)
        waiters = self._apply_waiters.setdefault(node_index, [])
        waiters.append(waiter)

        def give_up() -> None:
            if waiter in waiters:
                waiters.remove(waiter)
                then(None)

        self.schedule(self.now + 10_000, give_up)

    def _wake_apply_waiters(self, sim_node: SimNode, state: ClusterState | None) -> None:
        waiters = self._apply_waiters.get(sim_node.index)
        if not waiters:
            return
        ready = [w for w in waiters if state is None or w[0] != sim_node.boots or w[1] <= state.version]
        for waiter in ready:
            waiters.remove(waiter)
            boots, _, then = waiter
            then(state if state is not None and boots == sim_node.boots else None)

    def finish_pending_operations(self) -> None:
        """Operations still open when the run ends have unknown outcomes."""
        for key in list(self._pending):
            self._complete_op(key, ClusterError("unfinished", "the run ended", 503, maybe_applied=True))

    # ---------------------------------------------------------------------------------------------------
    # safety checks, after every step

    def _track(self, sim_node: SimNode, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "elected":
            term = event["term"]
            winner = self._elected.setdefault((event["cluster_uuid"], term), event["node"])
            if winner != event["node"]:
                self._violation(f"two masters elected in term {term}: {winner} and {event['node']}")
        elif kind in ("accepted", "committed", "applied"):
            cluster_uuid = event["cluster_uuid"]
            key = (cluster_uuid, event["term"], event["version"])
            uuid = self._state_by_version.setdefault(key, event["state_uuid"])
            if uuid != event["state_uuid"]:
                self._violation(f"two states for (term, version) {key}: {uuid} and {event['state_uuid']}")
            master = self._elected.get((cluster_uuid, event["term"]))
            # A first election is recorded before the cluster UUID exists; it belongs to the first cluster seen
            # in that term, not to a state of another cluster that a node loaded from its storage.
            if (
                master is None
                and (NO_CLUSTER_UUID, event["term"]) in self._elected
                and self._unknown_uuid_owner.setdefault(event["term"], cluster_uuid) == cluster_uuid
            ):
                master = self._elected[(NO_CLUSTER_UUID, event["term"])]
            if master is not None and event["master"] != master:
                self._violation(f"state {key} names master {event['master']} but {master} was elected")
            self._parents[event["state_uuid"]] = (event["parent_uuid"], event["version"])
            self._check_content(event)
            if kind == "committed" or kind == "applied":
                self._check_committed(self._committed.setdefault(cluster_uuid, {}), event)
        elif kind == "settings_removed":
            # The same (term, version) as the state it replaced, under a new uuid: it stands for that state.
            self._rewritten[event["state_uuid"]] = event["parent_uuid"]

    def _check_content(self, event: dict[str, Any]) -> None:
        """Every event of one state_uuid carries the same state. A commit makes the last-committed configuration
        equal to the last-accepted one, so a `committed` or `applied` event may carry that marked form."""
        key = (event["cluster_uuid"], event["state_uuid"])
        fields = ("term", "version", "parent_uuid", "master", "last_accepted_config")
        content = tuple(event[name] for name in fields)
        known = self._content.setdefault(key, content)
        if known != content:
            self._violation(f"state {key[1]} recorded with different content: {known} and {content}")
        committed_config = event["last_committed_config"]
        if event["type"] == "accepted" or committed_config != event["last_accepted_config"]:
            first = self._committed_config.setdefault(key, committed_config)
            if first != committed_config:
                self._violation(
                    f"state {key[1]} recorded with last_committed_config {first} and {committed_config} "
                    f"(a {event['type']} event on {event['node']})"
                )

    def _check_committed(self, committed: dict[int, tuple[int, str]], event: dict[str, Any]) -> None:
        version, term, uuid = event["version"], event["term"], event["state_uuid"]
        known = committed.get(version)
        if known is not None:
            if known[1] != uuid:
                self._violation(f"two committed states at version {version}: {known[1]} and {uuid}")
            return
        committed[version] = (term, uuid)
        versions = sorted(committed)
        position = versions.index(version)
        if position > 0:
            self._check_descends(committed, versions[position - 1], version)
        if position + 1 < len(versions):
            self._check_descends(committed, version, versions[position + 1])

    def _check_descends(self, committed: dict[int, tuple[int, str]], older_version: int, newer_version: int) -> None:
        older_term, older_uuid = committed[older_version]
        newer_term, current = committed[newer_version]
        if newer_term < older_term:
            self._violation(f"committed term went back from {older_term} to {newer_term} at version {newer_version}")
        uuid: str | None = current
        while uuid is not None and uuid in self._parents:
            parent, version = self._parents[uuid]
            if version <= older_version:
                break
            uuid = parent
        while uuid is not None and uuid in self._rewritten:
            uuid = self._rewritten[uuid]
        if uuid != older_uuid:
            self._violation(
                f"committed version {newer_version} does not descend from committed version {older_version}"
            )

    def _check_sessions(self, state: ClusterState) -> None:
        """An ephemeral key exists only with its session: ending a session deletes its keys in that state.
        Also notes when each session first disappears from an applied state."""
        for key, session in state.kv_sessions.items():
            if session not in state.sessions or key not in state.kv:
                self._violation(f"version {state.version} holds ephemeral key {key} of ended session {session}")
        if state.master_node is None or (not state.sessions and not self._session_created):
            return  # a no-master view may be a node's last-accepted state, loaded at start and not committed
        for session_id, held in state.sessions.items():
            self._session_created.setdefault(session_id, held.create_version)
        for session_id, created in self._session_created.items():
            if session_id not in state.sessions and state.version > created:
                self.session_ended_at.setdefault(session_id, self.now)

    def check_invariants(self) -> None:
        for sim_node in self.nodes:
            if sim_node.coordinator is not None:
                try:
                    check_node_invariants(sim_node.coordinator)
                except AssertionError as error:
                    self._violation(f"{sim_node.name}: {error}")
        leaders: dict[tuple[str, int], str] = {}
        for sim_node in self.nodes:
            coordinator = sim_node.coordinator
            if coordinator is not None and coordinator.mode is Mode.LEADER:
                term = (coordinator.last_accepted_state.cluster_uuid, coordinator.current_term)
                if term in leaders:
                    self._violation(f"two leaders in term {term}: {leaders[term]} and {sim_node.name}")
                leaders[term] = sim_node.name

    def _violation(self, message: str) -> None:
        raise SafetyViolation(f"[seed {self.seed}, t={self.now}ms] {message}")

    # ---------------------------------------------------------------------------------------------------
    # stability

    def connected_nodes(self) -> list[SimNode]:
        """Running nodes with working links to every other running node."""
        running = [node for node in self.nodes if node.alive]
        addresses = [node.address for node in running]
        return [node for node in running if not self.network.is_isolated(node.address, addresses)]

    def leader(self) -> SimNode | None:
        leaders = [node for node in self.nodes if node.alive and node.running().mode is Mode.LEADER]
        return leaders[0] if len(leaders) == 1 else None

    def stabilise(self, duration: int | None = None) -> None:
        """Run until the cluster has had time to settle, then check that it did."""
        settings = self.nodes[0].settings
        self.run_for(stabilisation_time(settings) if duration is None else duration)
        self.assert_stable()

    def assert_stable(self) -> None:
        connected = self.connected_nodes()
        connected_names = {node.name for node in connected}
        leaders = [node for node in connected if node.running().mode is Mode.LEADER]
        if len(leaders) != 1:
            self._violation(f"expected one leader among {sorted(connected_names)}, found {[n.name for n in leaders]}")
        leader = leaders[0].running()
        applied = leader.applied_state
        if leader.publication is not None or applied.version != leader.last_accepted_state.version:
            self._violation("the leader is still publishing after stabilisation")
        for sim_node in self.nodes:
            if not sim_node.alive:
                continue
            coordinator = sim_node.running()
            if sim_node.name in connected_names and coordinator is not leader:
                if coordinator.mode is not Mode.FOLLOWER or coordinator.leader != leader.local_node:
                    self._violation(f"{sim_node.name} is {coordinator.mode} instead of following the leader")
                if coordinator.applied_state.version != applied.version:
                    self._violation(
                        f"{sim_node.name} applied version {coordinator.applied_state.version}, "
                        f"leader is at {applied.version}"
                    )
            elif sim_node.name not in connected_names and (
                coordinator.mode is not Mode.CANDIDATE or coordinator.applied_state.master_node is not None
            ):
                self._violation(f"disconnected {sim_node.name} is {coordinator.mode}, expected a no-master candidate")
        eligible = [node for node in connected if node.node.master_eligible]
        config = applied.last_committed_config
        expected = len(eligible) - (len(eligible) + 1) % 2
        # Without auto-shrink a configuration keeps the nodes that left: it may be larger than the live nodes need.
        shrinks = leader.settings[AUTO_SHRINK_VOTING_CONFIGURATION]
        if len(eligible) >= 3 and (len(config) != expected if shrinks else len(config) < expected):
            self._violation(f"voting configuration {list(config.node_ids)} has size {len(config)}, expected {expected}")
        if not config.has_quorum({node.node.id for node in eligible}):
            self._violation(f"connected nodes have no quorum of the voting configuration {list(config.node_ids)}")

    # ---------------------------------------------------------------------------------------------------
    # output

    def write_histories(self, directory: Path) -> list[Path]:
        """Each node's history as JSON Lines (the history event of docs/protocol.md)."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for sim_node in self.nodes:
            path = directory / f"{sim_node.name}.jsonl"
            with path.open("w") as file:
                for event in sim_node.history:
                    file.write(json.dumps(event, sort_keys=True) + "\n")
            paths.append(path)
        return paths
