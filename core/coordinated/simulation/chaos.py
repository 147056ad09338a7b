"""Random, seeded fault schedules with clients, for property tests, the simulator CLI and benchmarks.

`run_random_schedule(seed, nodes)` is a pure function of its arguments: the same seed replays the same run.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from coordinated.coordination.client import ClientResult, ClusterError, Committed, ReadValue, TxnResult
from coordinated.coordination.node_versions import members
from coordinated.coordination.requests.keys import KvDelete, KvGet, KvPut
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp
from coordinated.coordination.settings import Settings
from coordinated.coordination.wire_versions import UNVERSIONED, newest
from coordinated.simulation.cluster import SIM_SETTINGS, SimulatedCluster
from coordinated.simulation.hot_key_clients import HotWriter, VersionWitness
from coordinated.simulation.linearizability import Operation, Verdict, check_history, check_transactions
from coordinated.simulation.network import Link
from coordinated.simulation.range_clients import RangeClient
from coordinated.simulation.recorder import MULTI_KEY_PREFIX
from coordinated.simulation.session_clients import SESSION_TTL_MS, SessionHolder, check_sessions, expiry_slack_ms
from coordinated.simulation.setting_changes import SettingsChanger, check_repair
from coordinated.simulation.sim_client import SimClient
from coordinated.simulation.storage import StorageFault

KEYS = ("a", "b", "c")
COUNTER_KEY = "counter"
# The search over the multi-key transactions is exponential in the transactions of unknown outcome that
# overlap. A schedule whose search exceeds this budget is left undecided by the checker (the transfers'
# balance invariant still judges it) rather than running for many minutes and gigabytes.
TXN_SEARCH_STATES = 100_000


@dataclass
class RunReport:
    seed: int
    nodes: int
    steps: int
    virtual_ms: int
    faults: Counter[str] = field(default_factory=Counter)
    operations: int = 0
    acknowledged_writes: int = 0
    increments: int = 0  # acknowledged compare-and-set increments of the counter clients
    sessions: int = 0  # sessions the session holders created, all checked
    transfers: int = 0  # acknowledged multi-key transfers
    setting_changes: int = 0  # dynamic settings set to an end of their range, or reset, and committed
    txn_linearizability: Verdict | None = None  # of the multi-key transactions, when there are transfer clients
    listings: int = 0  # range reads the range clients completed
    own_cas_succeeded: int = 0  # the hot writers' compare-and-sets on their own versions that succeeded
    range_linearizability: Verdict | None = None  # of the range clients' operations, when there are some
    linearizability: Verdict | None = None
    cluster: SimulatedCluster | None = None


class _Client(SimClient):
    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        super().__init__(cluster, client_id, rng)
        self.counter = 0

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
        self.cluster.submit(self.node(), request, client=self.client_id, on_done=self.again)


class _Counter(SimClient):
    """Read-modify-write increments of one key through any node: read the key and its version, then write
    value + 1 on condition of that version, as a conditional PUT or as a single-key transaction, or on
    condition of the value read, as a transaction comparing the value."""

    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        super().__init__(cluster, client_id, rng)
        self.acknowledged: list[int] = []  # the values of the increments acknowledged to this client
        self.uncertain = 0  # increments that failed but may have taken effect

    def next_operation(self) -> None:
        """Read the counter, then increment it."""
        if self.active:
            self.cluster.submit(self.node(), KvGet(COUNTER_KEY), client=self.client_id, on_done=self.increment)

    def increment(self, result: ClientResult) -> None:
        if not self.active:
            return
        if not isinstance(result, ReadValue):
            self.again()
            return
        current = result.value if result.found else 0
        version = result.key_version if result.found else 0
        request: KvPut | Txn
        roll = self.rng.random()
        if roll < 0.4:
            request = KvPut(COUNTER_KEY, current + 1, if_version=version)
        else:
            # A value compare never holds on a missing key: the first increment compares the version (0).
            by_value = roll >= 0.7 and result.found
            request = Txn(
                compare=(TxnCompare(COUNTER_KEY, value=current) if by_value else TxnCompare(COUNTER_KEY, version),),
                success=(TxnOp("put", COUNTER_KEY, current + 1),),
                failure=(TxnOp("get", COUNTER_KEY),),
            )

        def done(outcome: ClientResult) -> None:
            if isinstance(outcome, Committed) or (isinstance(outcome, TxnResult) and outcome.succeeded):
                self.acknowledged.append(current + 1)
            elif isinstance(outcome, ClusterError) and outcome.maybe_applied:
                self.uncertain += 1
            self.again()

        self.cluster.submit(self.node(), request, client=self.client_id, on_done=done)


ACCOUNTS = tuple(f"{MULTI_KEY_PREFIX}{index}" for index in range(3))


class _Transfers(SimClient):
    """Multi-key transactions through any node: read every account in one transaction, then move one unit
    between two accounts on condition of both versions, or read all of them again. A transfer keeps the sum
    of the balances (an absent account holds 0) at 0, so a torn or doubled transaction shows."""

    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        super().__init__(cluster, client_id, rng)
        self.acknowledged = 0

    def next_operation(self) -> None:
        """Read every account, then transfer."""
        if self.active:
            txn = Txn(success=tuple(TxnOp("get", account) for account in ACCOUNTS))
            self.cluster.submit(self.node(), txn, client=self.client_id, on_done=self.transfer)

    def transfer(self, result: ClientResult) -> None:
        if not self.active:
            return
        if not isinstance(result, TxnResult) or self.rng.random() < 0.2:
            self.again()
            return
        balances = {r.key: (r.value if r.found else 0, r.version if r.found else 0) for r in result.results}
        source, target = self.rng.sample(ACCOUNTS, 2)
        txn = Txn(
            compare=(TxnCompare(source, balances[source][1]), TxnCompare(target, balances[target][1])),
            success=(TxnOp("put", source, balances[source][0] - 1), TxnOp("put", target, balances[target][0] + 1)),
            failure=tuple(TxnOp("get", account) for account in (source, target)),
        )

        def done(outcome: ClientResult) -> None:
            if isinstance(outcome, TxnResult) and outcome.succeeded:
                self.acknowledged += 1
            self.again()

        self.cluster.submit(self.node(), txn, client=self.client_id, on_done=done)


def _check_transfers(cluster: SimulatedCluster) -> None:
    leader = cluster.leader()
    assert leader is not None
    kv = leader.running().applied_state.kv
    total = sum(kv.get(account, 0) for account in ACCOUNTS)
    if total != 0:
        cluster.violation(f"the transfers do not add up: the balances {[kv.get(a) for a in ACCOUNTS]} sum to {total}")


def _check_counter(cluster: SimulatedCluster, counters: list[_Counter]) -> None:
    """No acknowledged increment was lost (overwritten by a concurrent one) or applied twice: the acknowledged
    values are distinct, and the final value lies between their count and that plus the uncertain ones."""
    if not counters:
        return
    acknowledged = [value for counter in counters for value in counter.acknowledged]
    uncertain = sum(counter.uncertain for counter in counters)
    if len(set(acknowledged)) != len(acknowledged):
        cluster.violation(f"two acknowledged increments wrote the same value: {sorted(acknowledged)}")
    leader = cluster.leader()
    assert leader is not None
    final = leader.running().applied_state.kv.get(COUNTER_KEY, 0)
    if not len(acknowledged) <= final <= len(acknowledged) + uncertain:
        cluster.violation(
            f"the counter ends at {final} after {len(acknowledged)} acknowledged and {uncertain} uncertain increments"
        )


def _nemesis_action(
    cluster: SimulatedCluster, rng: random.Random, faults: Counter[str], upgrades: bool = False
) -> None:
    nodes = cluster.nodes
    addresses = cluster.addresses()
    alive = [node for node in nodes if node.alive]
    dead = [node for node in nodes if not node.alive]
    action = rng.choice(
        [
            *("crash", "restart", "disconnect", "blackhole", "partition", "isolate_master", "bridge", "heal"),
            *("io", "drops", "disk"),
            *(("upgrade", "rollback", "upgrade_all", "new_old_node") if upgrades else ()),
        ]
    )
    if action in ("upgrade", "rollback"):
        # A node restarted on this tree's release, or back on the previous one (which refuses to start, and
        # stays down until upgraded again, if its store holds what the previous release does not read).
        cluster.restart(rng.choice(nodes).index, version=newest() if action == "upgrade" else UNVERSIONED)
    elif action == "upgrade_all":
        for node in nodes:  # every node that is not on this release yet, one after the other, without waiting
            if node.version != newest():
                cluster.restart(node.index, version=newest())
    elif action == "new_old_node" and len(nodes) >= 5 and not faults["new_old_node"] and not faults["refused_start"]:
        # A lost disk replaced by an empty one, and the node started on the previous release: the version barrier
        # keeps it out of a cluster whose nodes are all newer. Once a run, in a cluster of five or more: its old
        # identity stays a missing voter, as a node a storage fault left down does.
        cluster.lose_data(rng.choice(nodes).index, version=UNVERSIONED)
    elif action == "crash" and len(alive) > 1:
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
    elif action == "disk" and not any(node.refused for node in nodes) and not faults["new_old_node"]:
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


def run_random_schedule(
    seed: int,
    node_count: int,
    chaos_ms: int = 30_000,
    clients: int = 3,
    counters: int = 0,
    sessions: int = 0,
    transfers: int = 0,
    settings: Settings | None = None,
    setting_changers: int = 0,
    ranges: int = 0,
    hot_writers: int = 0,
    nemesis: bool = True,
    upgrades: bool = False,
) -> RunReport:
    """Form a cluster, run faults and clients, heal, stabilise, and check linearizability.

    `counters` clients increment one key with compare-and-set; `sessions` clients hold sessions with
    ephemeral keys (`session_clients`); `transfers` clients run multi-key transactions between accounts;
    `ranges` clients write, prefix-delete and list the keys under a prefix (`range_clients`);
    `setting_changers` set dynamic settings to the ends of their ranges, and the settled cluster must then
    commit their reset and a write (`setting_changes`); `hot_writers` write two keys through any node and
    compare-and-set on the versions their own writes returned, and every acknowledged put's version must name
    that put in the committed states (`hot_key_clients`). With `upgrades`, the nodes start on a mix of the
    previous release and this one, the nemesis also upgrades and rolls back nodes, and all are upgraded before the
    run settles: the settled cluster must then carry every node's version (it moved by itself), and no gated
    state field may ever be lost or published to a node that lacks it (`simulation/versions.py`). Each draws from
    the seed only when there are some, so a run without them replays exactly as before they existed. Without
    `nemesis`, the clients run as long but no fault is injected.

    Raises SafetyViolation (with the seed) on any safety or liveness failure.
    """
    rng = random.Random(seed)
    versions = None
    if upgrades:  # at least one node of each release
        versions = [rng.choice([UNVERSIONED, newest()]) for _ in range(node_count)]
        versions[rng.randrange(node_count)] = UNVERSIONED
    cluster = SimulatedCluster(seed, node_count, settings=settings or SIM_SETTINGS, versions=versions)
    report = RunReport(seed, node_count, 0, 0)
    cluster.run_for(3_000)
    workers = [_Client(cluster, index, random.Random(rng.getrandbits(64))) for index in range(clients)]
    incrementers = [_Counter(cluster, clients + index, random.Random(rng.getrandbits(64))) for index in range(counters)]
    for worker in workers:
        worker.start()
    holders = [
        SessionHolder(cluster, clients + counters + index, random.Random(rng.getrandbits(64)), SESSION_TTL_MS)
        for index in range(sessions)
    ]
    movers = [
        _Transfers(cluster, clients + counters + sessions + index, random.Random(rng.getrandbits(64)))
        for index in range(transfers)
    ]
    listers = [
        RangeClient(cluster, clients + counters + sessions + transfers + index, random.Random(rng.getrandbits(64)))
        for index in range(ranges)
    ]
    for incrementer in incrementers:
        incrementer.start()
    for holder in holders:
        holder.start()
    first_changer = clients + counters + sessions + transfers + ranges
    changers = [
        SettingsChanger(cluster, first_changer + index, random.Random(rng.getrandbits(64)))
        for index in range(setting_changers)
    ]
    for mover in movers:
        mover.start()
    for lister in listers:
        lister.start()
    for changer in changers:
        changer.start()
    first_hot = first_changer + setting_changers
    hot = [HotWriter(cluster, first_hot + index, random.Random(rng.getrandbits(64))) for index in range(hot_writers)]
    witness = VersionWitness(cluster) if hot else None
    for writer in hot:
        writer.start()
    end = cluster.now + chaos_ms
    while cluster.now < end:
        cluster.run_for(rng.randint(100, 3_000))
        if nemesis:
            _nemesis_action(cluster, rng, report.faults, upgrades)
    for worker in workers:
        worker.active = False
    for incrementer in incrementers:
        incrementer.active = False
    for holder in holders:
        holder.stop()
    for mover in movers:
        mover.active = False
    for lister in listers:
        lister.active = False
    for changer in changers:
        changer.active = False
    for writer in hot:
        writer.active = False
    cluster.network.heal()
    for node in cluster.nodes:
        node.persisted.failure_rate = 0.0
        if upgrades and node.version != newest():
            cluster.restart(node.index, version=newest())  # the end of the rolling upgrade
        if not node.alive:
            cluster.start_node(node.index)
    cluster.stabilise()
    if upgrades:
        _check_moved(cluster)
    if holders:
        # Every holder has stopped: their sessions expire within a TTL of the last election, or of now.
        slack = expiry_slack_ms(cluster)
        cluster.run_for(SESSION_TTL_MS + slack)
        cluster.stabilise()
        for holder in holders:
            holder.abandon_now()
        report.sessions = check_sessions(cluster, holders, slack)
    if changers:
        check_repair(cluster, first_changer + setting_changers)
        report.setting_changes = sum(changer.committed for changer in changers)
    cluster.finish_pending_operations()
    report.steps = cluster.steps
    report.virtual_ms = cluster.now
    report.operations = len(cluster.operations)
    report.acknowledged_writes = sum(
        1 for op in cluster.operations if op.kind != "get" and op.certain and not op.conflict
    )
    report.linearizability = check_history(cluster.operations)
    report.cluster = cluster
    _check_final_state(cluster)
    _check_counter(cluster, incrementers)
    report.increments = sum(len(incrementer.acknowledged) for incrementer in incrementers)
    if movers:
        _check_transfers(cluster)
        report.transfers = sum(mover.acknowledged for mover in movers)
        report.txn_linearizability = check_transactions(cluster.txn_operations, max_states=TXN_SEARCH_STATES)
    if witness is not None:
        problems = witness.problems(hot)
        if problems:
            cluster.violation("a version names more than one write:\n" + "\n".join(problems[:10]))
        report.own_cas_succeeded = sum(writer.own_cas_succeeded for writer in hot)
    if listers:
        report.listings = sum(lister.listings for lister in listers)
        report.range_linearizability = check_transactions(cluster.range_operations, max_states=TXN_SEARCH_STATES)
    return report


def _check_moved(cluster: SimulatedCluster) -> None:
    """Once every node runs this release and the cluster settled, it carries every node's version: the gated
    features turned on by themselves. (Unless a voter is missing, one a storage fault left down: its version is
    not known, so the cluster keeps the previous release's forms until it is back or replaced.)"""
    leader = cluster.leader()
    assert leader is not None
    applied = leader.running().applied_state
    if not set(members(applied)) <= set(applied.nodes):
        return
    published = applied.node_versions
    expected = {node_id: newest() for node_id in applied.nodes}
    if published is msgspec.UNSET or {node_id: published.get(node_id) for node_id in applied.nodes} != expected:
        cluster.violation(f"every node runs {newest().describe()}, but the settled state carries {published}")
    if not all(leader.running().status().versions.features.values()):
        cluster.violation(f"the settled cluster's features are not all on: {leader.running().status().versions}")


def _check_final_state(cluster: SimulatedCluster) -> None:
    """Every acknowledged write is in the final state or was superseded by a later write to its key."""
    leader = cluster.leader()
    assert leader is not None
    final = leader.running().applied_state.kv
    by_key: dict[str, list[Operation]] = {}
    for op in cluster.operations:
        if op.kind != "get" and not op.conflict:  # a refused conditional write took no effect
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
            cluster.violation(f"key {key} ends as {actual}, but the acknowledged writes allow only {sorted(possible)}")
