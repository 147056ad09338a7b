"""A deterministic simulation of a whole cluster: virtual time, a seeded RNG, a faulty network, crashes,
restarts, failing disks and clients. The same seed reproduces the same run exactly.

After every step it checks the core's invariants on every node and the cluster-wide safety properties;
a violation raises `SafetyViolation` naming the seed.

SimulatedCluster owns the clients' requests and the stability checks; it composes the Scheduler (virtual time),
the MessageBus (the faulty network), the NodeLifecycle (add, start, crash, restart, lose a disk, damage
storage), the EffectInterpreter (what a coordinator returns) and the SafetyChecker.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed
from coordinated.coordination.coordinator import Mode
from coordinated.coordination.effects import Effect, PublicationFinished
from coordinated.coordination.elections import ELECTION_DURATION, ELECTION_MAX_TIMEOUT
from coordinated.coordination.followers_checker import (
    FOLLOWER_CHECK_INTERVAL,
    FOLLOWER_CHECK_RETRY_COUNT,
    FOLLOWER_CHECK_TIMEOUT,
)
from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.leader_checker import (
    LEADER_CHECK_INTERVAL,
    LEADER_CHECK_RETRY_COUNT,
    LEADER_CHECK_TIMEOUT,
)
from coordinated.coordination.messages import Message
from coordinated.coordination.peer_finder import SEED_HOSTS
from coordinated.coordination.publication import PUBLISH_TIMEOUT
from coordinated.coordination.ranges import RangeEntry, range_page
from coordinated.coordination.reconfigurator import AUTO_SHRINK_VOTING_CONFIGURATION
from coordinated.coordination.registry import default_settings
from coordinated.coordination.requests.keys import ReadBarrier
from coordinated.coordination.settings import NODE_NAME, NODE_ROLES, Settings
from coordinated.coordination.state import ClusterState
from coordinated.coordination.state_index import SortedKeys
from coordinated.coordination.wire_versions import NodeVersion
from coordinated.simulation.effect_interpreter import EffectInterpreter
from coordinated.simulation.lifecycle import NodeLifecycle, roles
from coordinated.simulation.linearizability import Operation, TxnOperation
from coordinated.simulation.message_bus import MessageBus
from coordinated.simulation.network import Network
from coordinated.simulation.recorder import OperationRecorder
from coordinated.simulation.safety_checker import SafetyChecker, SafetyViolation
from coordinated.simulation.scheduler import Scheduler
from coordinated.simulation.sim_node import SimNode
from coordinated.simulation.storage import FlakyPersistedState, InjectedIOError, StorageFault
from coordinated.simulation.versions import GatedFieldWatch

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


@dataclass
class PendingOp:
    client: int
    node: int
    request: ClientRequest[Any]
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
        versions: Sequence[NodeVersion] | None = None,  # each node's release (default: this tree's)
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.scheduler = Scheduler()
        self.network = Network(random.Random(self.rng.getrandbits(64)))
        self.check_safety = check_safety
        self.nodes: list[SimNode] = []
        self._request_ids = itertools.count(1)
        self._pending: dict[tuple[int, int], PendingOp] = {}
        self.recorder = OperationRecorder()  # what the clients did, for the linearizability checkers
        self.applied_observers: list[Callable[[ClusterState], None]] = []  # told of every state a node applies
        self.logs: list[tuple[int, str, str, str]] = []
        self.publications: list[PublicationFinished] = []
        self.safety = SafetyChecker(seed, lambda: self.now)
        self.gated_fields = GatedFieldWatch(self.violation)
        self.bus = MessageBus(self.scheduler, self.network, self.nodes, self._run_effects, self.gated_fields)
        self.effects = EffectInterpreter(
            lambda: self.now,
            send=self.bus.send,
            probe_seeds=lambda sim_node: self.schedule(self.now, partial(self.bus.deliver_seeds, sim_node.index)),
            recorded=self.safety.observe,
            request_completed=self._complete_op,
            state_applied=self._state_applied,
            logs=self.logs,
            publications=self.publications,
        )
        self.lifecycle = NodeLifecycle(
            self.nodes,
            self.rng,
            lambda: self.now,
            default_settings=SIM_SETTINGS,
            run_effects=self._run_effects,
            on_crashed=self._on_crashed,
            logs=self.logs,
        )
        # Range reads waiting for a node to apply their barrier's version: node index -> (boots, version, then).
        self._apply_waiters: dict[int, list[tuple[int, int, Callable[[ClusterState | None], None]]]] = {}
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
                    {NODE_NAME: names[index], NODE_ROLES: roles(eligible[index]), INITIAL_MASTER_NODES: bootstrap}
                ),
                version=versions[index] if versions is not None else None,
            )

    # ---------------------------------------------------------------------------------------------------
    # nodes

    def add_node(
        self, master_eligible: bool = True, settings: Settings | None = None, version: NodeVersion | None = None
    ) -> SimNode:
        return self.lifecycle.add(master_eligible, settings, version)

    def start_node(self, index: int) -> None:
        self.lifecycle.start(index)

    def crash(self, index: int) -> None:
        """Stop a node at once; what it persisted survives, everything else is lost."""
        self.lifecycle.crash(index)

    def restart(self, index: int, new_address: str | None = None, version: NodeVersion | None = None) -> None:
        """Crash and start a node; with `new_address` it comes back elsewhere, as a rescheduled pod gets a new IP;
        with `version`, on another release (an upgrade or a rollback: simulation/versions.py)."""
        self.lifecycle.restart(index, new_address, version)

    def lose_data(self, index: int, version: NodeVersion | None = None) -> None:
        """Crash a node and start it again on an empty disk: a new node under the same name (`NodeLifecycle`),
        on another release if `version` is given."""
        self.lifecycle.lose_data(index, version)

    def storage_fault(self, index: int, fault: StorageFault) -> None:
        """Crash a node, damage its storage as `fault` says, and start it again (or it refuses and stays down)."""
        self.lifecycle.storage_fault(index, fault)

    def remove_settings(self, index: int, patterns: Sequence[str]) -> None:
        """`coordinated node-tool remove-settings` on a stopped node: its history event, then its new record."""
        self.lifecycle.remove_settings(index, patterns)

    def _on_crashed(self, sim_node: SimNode) -> None:
        """A crashed node's clients get `node_closed` and its range reads give up."""
        self.safety.process_ended(sim_node.node.id, sim_node.persisted.current_term)
        self._note_mastership()
        self._wake_apply_waiters(sim_node, None)
        for key in [key for key in self._pending if key[0] == sim_node.index]:
            self._complete_op(key, ClusterError("node_closed", "the node crashed", 503, maybe_applied=True))

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

    @property
    def now(self) -> int:
        return self.scheduler.now

    @property
    def steps(self) -> int:
        return self.scheduler.steps

    @property
    def tap(self) -> Callable[[str, str, Message], None] | None:
        """Tests can watch every message sent: tap(sender name, destination address, message)."""
        return self.bus.tap

    @tap.setter
    def tap(self, tap: Callable[[str, str, Message], None] | None) -> None:
        self.bus.tap = tap

    @property
    def session_ended_at(self) -> dict[str, int]:
        """When a node first applied a state without each session that existed before."""
        return self.safety.session_ended_at

    def schedule(self, at: int, action: Callable[[], None]) -> None:
        self.scheduler.schedule(at, action)

    def step(self, until: int) -> bool:
        deadlines = (
            (sim_node.index, sim_node.coordinator.next_deadline())
            for sim_node in self.nodes
            if sim_node.coordinator is not None
        )
        if not self.scheduler.step(until, deadlines, self._tick):
            return False
        if self.check_safety:
            self.check_invariants()
        self._note_mastership()
        return True

    def _tick(self, index: int) -> None:
        sim_node = self.nodes[index]
        self._run_effects(sim_node, sim_node.running().tick(self.now))

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
        self.effects.run(sim_node, effects)

    def _state_applied(self, sim_node: SimNode, state: ClusterState) -> None:
        self.safety.check_applied(state)
        if state.master_node is not None:  # a committed state (not the no-master view of a candidate)
            self.gated_fields.applied(sim_node.name, state)
        for observer in self.applied_observers:
            observer(state)
        self._wake_apply_waiters(sim_node, state)

    def deliver_late(self, sender: SimNode, target: SimNode, message: Message) -> None:
        """Deliver `message` now, whatever the links say (see MessageBus.deliver_late)."""
        self.bus.deliver_late(sender, target, message)

    def deliver_from_wire(self, target: SimNode, sender_address: str, data: bytes) -> str | None:
        """Hand `target` an encoded envelope as the sidecar's transport would (see MessageBus.deliver_from_wire)."""
        return self.bus.deliver_from_wire(target, sender_address, data)

    # ---------------------------------------------------------------------------------------------------
    # clients

    def submit(
        self,
        node_index: int,
        request: ClientRequest[Any],
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

    def check_invariants(self) -> None:
        self.safety.check_running(
            (sim_node.name, sim_node.coordinator) for sim_node in self.nodes if sim_node.coordinator is not None
        )

    def violation(self, message: str) -> NoReturn:
        self.safety.violation(message)

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

    def settled(self, voting_config_size: int | None = None) -> bool:
        """One leader, not publishing, whose applied version every live node has applied (and, given
        `voting_config_size`, whose committed voting configuration has that many nodes)."""
        leader = self.leader()
        if leader is None or leader.running().publication is not None:
            return False
        applied = leader.running().applied_state
        if voting_config_size is not None and len(applied.last_committed_config) != voting_config_size:
            return False
        return all(node.running().applied_state.version == applied.version for node in self.nodes if node.alive)

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
            self.violation(f"expected one leader among {sorted(connected_names)}, found {[n.name for n in leaders]}")
        leader = leaders[0].running()
        applied = leader.applied_state
        if leader.publication is not None or applied.version != leader.last_accepted_state.version:
            self.violation("the leader is still publishing after stabilisation")
        for sim_node in self.nodes:
            if not sim_node.alive:
                continue
            coordinator = sim_node.running()
            if sim_node.watched != self._expected_watch(sim_node, leaders[0], applied):
                self.violation(f"{sim_node.name} watches {sorted(sim_node.watched)}")
            if sim_node.name in connected_names and coordinator is not leader:
                if coordinator.mode is not Mode.FOLLOWER or coordinator.leader != leader.local_node:
                    self.violation(f"{sim_node.name} is {coordinator.mode} instead of following the leader")
                if coordinator.applied_state.version != applied.version:
                    self.violation(
                        f"{sim_node.name} applied version {coordinator.applied_state.version}, "
                        f"leader is at {applied.version}"
                    )
            elif sim_node.name not in connected_names and (
                coordinator.mode is not Mode.CANDIDATE or coordinator.applied_state.master_node is not None
            ):
                self.violation(f"disconnected {sim_node.name} is {coordinator.mode}, expected a no-master candidate")
        eligible = [node for node in connected if node.node.master_eligible]
        config = applied.last_committed_config
        expected = len(eligible) - (len(eligible) + 1) % 2
        # Without auto-shrink a configuration keeps the nodes that left: it may be larger than the live nodes need.
        shrinks = leader.settings[AUTO_SHRINK_VOTING_CONFIGURATION]
        if len(eligible) >= 3 and (len(config) != expected if shrinks else len(config) < expected):
            self.violation(f"voting configuration {list(config.node_ids)} has size {len(config)}, expected {expected}")
        if not config.has_quorum({node.node.id for node in eligible}):
            self.violation(f"connected nodes have no quorum of the voting configuration {list(config.node_ids)}")

    @staticmethod
    def _expected_watch(sim_node: SimNode, leader: SimNode, applied: ClusterState) -> frozenset[str]:
        """A stable leader watches every other node it applied, a follower its leader, a lone candidate none."""
        if sim_node is leader:
            return frozenset(node.transport_address for node in applied.nodes.values() if node.id != leader.node.id)
        following = sim_node.running().mode is Mode.FOLLOWER
        return frozenset((leader.address,)) if following else frozenset()

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
