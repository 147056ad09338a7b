"""The lifecycle of simulated nodes: add, start, crash, restart, a lost disk, damaged storage and the offline
node tool. A restarted node reads its storage back and obeys the sidecar's startup rule, as a real one does.

Every random choice (node ids, storage and coordinator seeds) comes from the cluster's RNG, in a fixed order,
so that a seed reproduces the same run.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import msgspec

from coordinated.coordination.coordinator import Coordinator
from coordinated.coordination.effects import Effect, RecordHistory
from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.history import HistoryEvent
from coordinated.coordination.offline_recovery import plan_remove_settings
from coordinated.coordination.recovery import LoadRecord, Refuse, recovered_state_event
from coordinated.coordination.settings import CLUSTER_NAME, NODE_NAME, NODE_ROLES, Settings
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.wire_versions import NodeVersion
from coordinated.simulation.sim_node import SimNode
from coordinated.simulation.storage import FlakyPersistedState, StorageFault, summarize_events
from coordinated.simulation.versions import can_start


def roles(master_eligible: bool) -> tuple[str, ...]:
    return ("master",) if master_eligible else ()


class NodeLifecycle:
    """Owns the nodes of one simulated cluster; what a node returns goes to `run_effects`, and `on_crashed`
    lets the cluster forget what the node was doing (its clients' requests, its range reads)."""

    def __init__(
        self,
        nodes: list[SimNode],
        rng: random.Random,
        clock: Callable[[], int],
        *,
        default_settings: Settings,
        run_effects: Callable[[SimNode, list[Effect]], None],
        on_crashed: Callable[[SimNode], None],
        logs: list[tuple[int, str, str, str]],
    ) -> None:
        self.nodes = nodes
        self._rng = rng
        self._clock = clock
        self._default_settings = default_settings
        self._run_effects = run_effects
        self._on_crashed = on_crashed
        self._logs = logs

    def add(
        self, master_eligible: bool = True, settings: Settings | None = None, version: NodeVersion | None = None
    ) -> SimNode:
        index = len(self.nodes)
        name = f"node{index}"
        node_settings = settings or self._default_settings.with_values(
            {NODE_NAME: name, NODE_ROLES: roles(master_eligible), INITIAL_MASTER_NODES: ()}
        )
        node = DiscoveryNode(
            id=f"{name}-{self._rng.getrandbits(32):08x}",
            name=name,
            transport_address=f"{name}:9300",
            roles=roles(master_eligible),
        )
        persisted = FlakyPersistedState(node_settings[CLUSTER_NAME], random.Random(self._rng.getrandbits(64)), node.id)
        sim_node = SimNode(index, node, persisted, node_settings)
        if version is not None:
            sim_node.version = version
        self.nodes.append(sim_node)
        self.start(index)
        return sim_node

    def start(self, index: int) -> None:
        sim_node = self.nodes[index]
        if sim_node.alive or sim_node.refused is not None:
            return
        now = self._clock()
        if sim_node.boots:
            # A node of an older release refuses a store that holds what it does not know, changing nothing.
            too_new = can_start(sim_node.version, sim_node.persisted.stored_state())
            if too_new is not None:
                sim_node.refused, sim_node.refused_by_release = too_new, True
                self._logs.append((now, sim_node.name, "error", f"refusing to start: {too_new}"))
                return
            # A restarted process reads its storage back and obeys the sidecar's startup rule.
            history = summarize_events(sim_node.history)
            decision = sim_node.persisted.reopen(history)
            if isinstance(decision, Refuse):
                sim_node.refused = decision.reason
                self._logs.append((now, sim_node.name, "error", f"refusing to start: {decision.reason}"))
                return
            if isinstance(decision, LoadRecord):
                self._logs.extend((now, sim_node.name, "warning", warning) for warning in decision.warnings)
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
            rng=random.Random(self._rng.getrandbits(64)),
            now=now,
            version=sim_node.version,
        )
        self._run_effects(sim_node, sim_node.coordinator.start(now))

    def crash(self, index: int) -> None:
        """Stop a node at once; what it persisted survives, everything else is lost."""
        sim_node = self.nodes[index]
        sim_node.coordinator = None
        sim_node.watched = frozenset()
        self._on_crashed(sim_node)

    def restart(self, index: int, new_address: str | None = None, version: NodeVersion | None = None) -> None:
        """Crash and start a node; with `new_address` it comes back elsewhere, as a rescheduled pod gets a new IP;
        with `version`, it comes back on that release (an upgrade or a rollback; it may refuse to start)."""
        self.crash(index)
        sim_node = self.nodes[index]
        if new_address is not None:
            sim_node.node = msgspec.structs.replace(sim_node.node, transport_address=new_address)
        if version is not None:
            sim_node.version = version
            if sim_node.refused_by_release:
                sim_node.refused, sim_node.refused_by_release = None, False  # the next start reads its store again
        self.start(index)

    def lose_data(self, index: int, version: NodeVersion | None = None) -> None:
        """Crash a node and start it again on an empty disk, under the same name and address: a pod that gets a
        new, empty claim after its volume was lost for good. It is a new node (a new id, no history), and it
        has no bootstrap list (the operator empties it once the cluster has bootstrapped): it can only join."""
        self.crash(index)
        sim_node = self.nodes[index]
        node = msgspec.structs.replace(sim_node.node, id=f"{sim_node.name}-{self._rng.getrandbits(32):08x}")
        settings = sim_node.settings.with_values({INITIAL_MASTER_NODES: ()})
        persisted = FlakyPersistedState(settings[CLUSTER_NAME], random.Random(self._rng.getrandbits(64)), node.id)
        self.nodes[index] = SimNode(index, node, persisted, settings)
        if version is not None:
            self.nodes[index].version = version
        self.start(index)

    def storage_fault(self, index: int, fault: StorageFault) -> None:
        """Crash a node, damage its storage as `fault` says, and start it again: it loads what the startup
        rule allows, or refuses and stays down."""
        self.crash(index)
        self.nodes[index].persisted.apply_fault(fault, self._rng)
        self.start(index)

    def remove_settings(self, index: int, patterns: Sequence[str]) -> None:
        """`coordinated node-tool remove-settings` on a stopped node: its history event, then its new record."""
        sim_node = self.nodes[index]
        assert not sim_node.alive, "the node tool runs on a stopped node"
        persisted = sim_node.persisted
        uuid = f"{self._rng.getrandbits(128):032x}"
        plan = plan_remove_settings(
            sim_node.node.id, persisted.current_term, persisted.last_accepted_state, patterns, uuid
        )
        self._run_effects(sim_node, [RecordHistory(msgspec.convert(plan.event, HistoryEvent))])
        persisted.set_last_accepted_state(plan.state)
