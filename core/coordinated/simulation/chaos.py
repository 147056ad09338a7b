"""Random, seeded fault schedules with clients, for property tests, the simulator CLI and benchmarks.

`run_random_schedule(seed, nodes)` is a pure function of its arguments: the same seed replays the same run.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from coordinated.coordination.client import ClientResult, KvDelete, KvGet, KvPut
from coordinated.simulation.cluster import SimulatedCluster
from coordinated.simulation.linearizability import Operation, Verdict, check_history
from coordinated.simulation.network import Link
from coordinated.simulation.storage import StorageFault

KEYS = ("a", "b", "c")


@dataclass
class RunReport:
    seed: int
    nodes: int
    steps: int
    virtual_ms: int
    faults: Counter[str] = field(default_factory=Counter)
    operations: int = 0
    acknowledged_writes: int = 0
    linearizability: Verdict | None = None
    cluster: SimulatedCluster | None = None


class _Client:
    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.rng = rng
        self.active = True
        self.counter = 0

    def start(self) -> None:
        self.cluster.schedule(self.cluster.now + self.rng.randint(0, 200), self.next_operation)

    def next_operation(self) -> None:
        if not self.active:
            return
        self.counter += 1
        key = self.rng.choice(KEYS)
        roll = self.rng.random()
        if roll < 0.5:
            request: KvPut | KvDelete | KvGet = KvPut(key, f"{self.client_id}-{self.counter}")
        elif roll < 0.65:
            request = KvDelete(key)
        else:
            request = KvGet(key)
        node = self.rng.randrange(len(self.cluster.nodes))
        self.cluster.submit(node, request, client=self.client_id, on_done=self.done)

    def done(self, result: ClientResult) -> None:
        if self.active:
            self.cluster.schedule(self.cluster.now + self.rng.randint(1, 300), self.next_operation)


def _nemesis_action(cluster: SimulatedCluster, rng: random.Random, faults: Counter[str]) -> None:
    nodes = cluster.nodes
    addresses = cluster.addresses()
    alive = [node for node in nodes if node.alive]
    dead = [node for node in nodes if not node.alive]
    action = rng.choice(
        [
            *("crash", "restart", "disconnect", "blackhole", "partition", "isolate_master", "bridge", "heal"),
            *("io", "drops", "disk"),
        ]
    )
    if action == "crash" and len(alive) > 1:
        cluster.crash(rng.choice(alive).index)
    elif action == "restart" and dead:
        cluster.start_node(rng.choice(dead).index)
    elif action in ("disconnect", "blackhole"):
        a, b = rng.sample(addresses, 2)
        cluster.network.set_link(a, b, Link.DISCONNECTED if action == "disconnect" else Link.BLACKHOLE)
    elif action == "partition":
        shuffled = addresses[:]
        rng.shuffle(shuffled)
        cut = rng.randint(1, len(shuffled) - 1)
        cluster.network.partition(shuffled[:cut], shuffled[cut:], rng.choice([Link.DISCONNECTED, Link.BLACKHOLE]))
    elif action == "isolate_master":
        leader = cluster.leader()
        if leader is not None:
            cluster.network.isolate(leader.address, addresses, rng.choice([Link.DISCONNECTED, Link.BLACKHOLE]))
    elif action == "bridge" and len(addresses) >= 3:
        # Two sides that cannot see each other, and one node that sees both.
        shuffled = addresses[:]
        rng.shuffle(shuffled)
        bridge, rest = shuffled[0], shuffled[1:]
        cut = rng.randint(1, len(rest) - 1) if len(rest) > 1 else 1
        cluster.network.partition(rest[:cut], rest[cut:])
        del bridge
    elif action == "heal":
        cluster.network.heal()
    elif action == "io":
        node = rng.choice(nodes)
        node.persisted.failure_rate = rng.choice([0.0, 0.1, 0.5])
    elif action == "disk" and not any(node.refused for node in nodes):
        # A storage fault at a restart: the node loads what the startup rule allows or refuses and stays down.
        # At most one node is left down that way, so that the others keep a quorum and the run can settle.
        fault = rng.choice(list(StorageFault))
        victim = rng.choice(nodes)
        cluster.storage_fault(victim.index, fault)
        faults[f"disk_{fault.value}"] += 1
        if victim.refused:
            faults["refused_start"] += 1
        return
    elif action == "drops":
        cluster.network.drop_rate = rng.choice([0.0, 0.05, 0.2])
        if rng.random() < 0.5:
            a, b = rng.sample(addresses, 2)
            cluster.network.slow_link(a, b, rng.randint(50, 2000))
    else:
        return
    faults[action] += 1


def run_random_schedule(seed: int, node_count: int, chaos_ms: int = 30_000, clients: int = 3) -> RunReport:
    """Form a cluster, run faults and clients, heal, stabilise, and check linearizability.

    Raises SafetyViolation (with the seed) on any safety or liveness failure.
    """
    rng = random.Random(seed)
    cluster = SimulatedCluster(seed, node_count)
    report = RunReport(seed, node_count, 0, 0)
    cluster.run_for(3_000)
    workers = [_Client(cluster, index, random.Random(rng.getrandbits(64))) for index in range(clients)]
    for worker in workers:
        worker.start()
    end = cluster.now + chaos_ms
    while cluster.now < end:
        cluster.run_for(rng.randint(100, 3_000))
        _nemesis_action(cluster, rng, report.faults)
    for worker in workers:
        worker.active = False
    cluster.network.heal()
    for node in cluster.nodes:
        node.persisted.failure_rate = 0.0
        if not node.alive:
            cluster.start_node(node.index)
    cluster.stabilise()
    cluster.finish_pending_operations()
    report.steps = cluster.steps
    report.virtual_ms = cluster.now
    report.operations = len(cluster.operations)
    report.acknowledged_writes = sum(1 for op in cluster.operations if op.kind != "get" and op.certain)
    report.linearizability = check_history(cluster.operations)
    report.cluster = cluster
    _check_final_state(cluster)
    return report


def _check_final_state(cluster: SimulatedCluster) -> None:
    """Every acknowledged write is in the final state or was superseded by a later write to its key."""
    leader = cluster.leader()
    assert leader is not None
    final = leader.running().applied_state.kv
    by_key: dict[str, list[Operation]] = {}
    for op in cluster.operations:
        if op.kind != "get":
            by_key.setdefault(op.key, []).append(op)
    for key, writes in by_key.items():
        last_certain = max((op for op in writes if op.certain), key=lambda op: op.completed, default=None)
        if last_certain is None:
            continue
        # Writes that may have taken effect after the last acknowledged one.
        candidates = [op for op in writes if op is last_certain or op.invoked > last_certain.invoked or not op.certain]
        candidates += [op for op in writes if op.certain and op.completed > last_certain.invoked]
        possible = {repr(op.value) if op.kind == "put" else "<deleted>" for op in candidates}
        actual = repr(final[key]) if key in final else "<deleted>"
        if actual not in possible:
            cluster._violation(f"key {key} ends as {actual}, but the acknowledged writes allow only {sorted(possible)}")
