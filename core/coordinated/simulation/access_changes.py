"""Access control under random faults: an admin grants and revokes a principal's role again and again through any
node while that principal writes through any node, and the nemesis partitions, crashes and restarts nodes. Checked:

- **no write outside its grant**: every write the cluster acknowledged for the principal was decided while the
  principal held the role (by the committed state it is in, or the one before it: a write that is ordered before
  a revocation in the batch that carries both). A write racing a revocation is acknowledged before it or refused;
- **acknowledged means applied everywhere**: when a change answers `acknowledged: true`, every node of the
  master's cluster has applied it, so no node decides by the old rules any more.

(Which requests are allowed by which roles is the property test's, tests/coordination/test_authorization_model.py.)
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from coordinated.coordination.client import ClientResult, ClusterError, Committed, Principal
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.requests.security import DeleteRoleMapping, PutRole, PutRoleMapping
from coordinated.coordination.security import REALM_FILE, KeyGrant, RoleDescriptor, RoleMapping
from coordinated.coordination.state import ClusterState
from coordinated.simulation.chaos import _nemesis_action
from coordinated.simulation.cluster import SimNode, SimulatedCluster

ADMIN = Principal("ops", REALM_FILE, ("admin",))
APP = Principal("app", REALM_FILE)
ROLE = RoleDescriptor((KeyGrant(("app/",), ("write",)),))
MAPPING = RoleMapping(("app-role",), ("app",))


@dataclass
class AccessReport:
    seed: int
    grants: int = 0
    revocations: int = 0
    acknowledged_changes: int = 0
    writes_acknowledged: int = 0
    writes_refused: int = 0
    faults: Counter[str] = field(default_factory=Counter)


class Timeline:
    """Whether the principal held its role in each committed state (every state some node applied)."""

    def __init__(self) -> None:
        self.granted: dict[int, bool] = {}

    def observe(self, node: SimNode, state: ClusterState) -> None:
        if state.master_node is None:
            return  # a node's last-accepted state, loaded at start: not necessarily committed
        security = state.security_metadata()
        held = security is not None and "app-role" in security.roles and "app" in security.role_mappings
        known = self.granted.setdefault(state.version, held)
        assert known == held, f"two states of version {state.version} disagree on the grant"

    def allowed_at(self, version: int) -> bool:
        """Held in the state of `version` or in the state before it (a write ordered before a revocation)."""
        before = max((known for known in self.granted if known < version), default=None)
        return self.granted.get(version, False) or (before is not None and self.granted[before])


class Admin:
    """Alternates a grant and a revocation through a random node; a change whose answer does not come within a
    few seconds (its node crashed, say) is given up on, and the next one goes out."""

    def __init__(self, cluster: SimulatedCluster, client: int, rng: random.Random, report: AccessReport) -> None:
        self.cluster, self.client, self.rng, self.report = cluster, client, rng, report
        self.active = True
        self.attempt = 0
        self.violations: list[str] = []

    def start(self) -> None:
        node = self.rng.randrange(len(self.cluster.nodes))
        self.cluster.submit(node, PutRole("app-role", ROLE), self.client, lambda result: self.next(0), principal=ADMIN)
        self.cluster.schedule(self.cluster.now + 3_000, lambda: self.next(0))

    def next(self, attempt: int) -> None:
        if not self.active or attempt != self.attempt:
            return  # answered already, or given up on
        self.attempt += 1
        self.cluster.schedule(self.cluster.now + self.rng.randint(50, 1_000), self.change)

    def change(self) -> None:
        if not self.active:
            return
        attempt, granting = self.attempt, self.attempt % 2 == 1
        request = (
            PutRoleMapping("app", MAPPING, file_admins=True) if granting else DeleteRoleMapping("app", file_admins=True)
        )
        node = self.rng.randrange(len(self.cluster.nodes))
        # A short timeout: a change answers `acknowledged: false` by then if some node has not applied it.
        done = lambda result: self.done(attempt, granting, result)  # noqa: E731
        self.cluster.submit(node, request, self.client, done, timeout=2_000, principal=ADMIN)
        self.cluster.schedule(self.cluster.now + 3_000, lambda: self.next(attempt))

    def done(self, attempt: int, granting: bool, result: ClientResult) -> None:
        if isinstance(result, Committed):
            if granting:
                self.report.grants += 1
            else:
                self.report.revocations += 1
            if result.acknowledged is True:
                self.report.acknowledged_changes += 1
                self._check_applied_everywhere(result.version)
        self.next(attempt)

    def _check_applied_everywhere(self, version: int) -> None:
        leader = self.cluster.leader()
        members = set(leader.running().last_accepted_state.nodes) if leader is not None else set()
        for node in self.cluster.nodes:
            if node.alive and node.coordinator is not None and node.coordinator.local_node.id in members:
                applied = node.coordinator.applied_state.version
                if applied < version:
                    self.violations.append(
                        f"a change at version {version} was acknowledged while {node.name} had applied only {applied}"
                    )


class Writer:
    def __init__(self, cluster: SimulatedCluster, client: int, rng: random.Random, timeline: Timeline) -> None:
        self.cluster, self.client, self.rng, self.timeline = cluster, client, rng, timeline
        self.active = True
        self.acknowledged: list[int] = []  # versions
        self.refused = 0
        self.sequence = 0

    def start(self) -> None:
        self.cluster.schedule(self.cluster.now + self.rng.randint(0, 200), self.write)

    def write(self) -> None:
        if not self.active:
            return
        self.sequence += 1
        key = f"app/{self.client}/{self.sequence % 5}"
        node = self.rng.randrange(len(self.cluster.nodes))
        self.cluster.submit(node, KvPut(key, self.sequence), self.client, self.done, principal=APP)

    def done(self, result: ClientResult) -> None:
        if isinstance(result, Committed):
            self.acknowledged.append(result.version)
        elif isinstance(result, ClusterError) and result.status == 403:
            self.refused += 1
        if self.active:
            self.cluster.schedule(self.cluster.now + self.rng.randint(5, 150), self.write)


def run_access_schedule(seed: int, node_count: int, chaos_ms: int = 30_000, writers: int = 3) -> AccessReport:
    """A cluster under the nemesis with an admin changing the principal's grant and writers writing as it.
    Raises AssertionError naming the seed on a violation."""
    rng = random.Random(seed)
    cluster = SimulatedCluster(seed, node_count)
    report = AccessReport(seed)
    timeline = Timeline()
    cluster.node_applied_observers.append(timeline.observe)
    cluster.run_for(3_000)
    admin = Admin(cluster, 0, random.Random(rng.getrandbits(64)), report)
    clients = [Writer(cluster, 1 + index, random.Random(rng.getrandbits(64)), timeline) for index in range(writers)]
    admin.start()
    for client in clients:
        client.start()
    end = cluster.now + chaos_ms
    while cluster.now < end:
        cluster.run_for(rng.randint(100, 3_000))
        _nemesis_action(cluster, rng, report.faults)
    admin.active = False
    for client in clients:
        client.active = False
    cluster.network.heal()
    for node in cluster.nodes:
        node.persisted.failure_rate = 0.0
        if not node.alive:
            cluster.start_node(node.index)
    cluster.stabilise()
    cluster.finish_pending_operations()
    problems = list(admin.violations)
    for client in clients:
        for version in client.acknowledged:
            if not timeline.allowed_at(version):
                problems.append(f"a write of the principal was acknowledged at version {version}, outside its grant")
        report.writes_acknowledged += len(client.acknowledged)
        report.writes_refused += client.refused
    assert not problems, f"seed {seed}, {node_count} nodes: " + "; ".join(problems[:5])
    return report
