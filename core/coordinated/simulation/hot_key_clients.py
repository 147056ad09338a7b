"""Simulated clients that write a few hot keys through any node, and compare-and-set on the versions their own
writes returned: the workload under which a batch that wrote one key twice told two writers "your write is
version V", and a compare-and-set on V then overwrote the other writer's acknowledged write.

Their operations are recorded like every single-key operation (`recorder.operations`), so the linearizability
checker judges them with its model where a version names one write. `VersionWitness` checks the same promise
directly against the committed states: every acknowledged put's version is the version of a state in which the
key holds that put's value with that version, and no two acknowledged puts of a key share a version.
"""

from __future__ import annotations

import random
from collections import defaultdict

from coordinated.coordination.client import ClientResult, Committed
from coordinated.coordination.requests.keys import KvDelete, KvGet, KvPut
from coordinated.coordination.state import ClusterState
from coordinated.simulation.cluster import SimulatedCluster
from coordinated.simulation.sim_client import SimClient

HOT_KEYS = ("hot/0", "hot/1")
CAS_ON_OWN = 0.6  # how often a writer follows an acknowledged write with a compare-and-set on its version


class HotWriter(SimClient):
    """Puts, deletes and reads of HOT_KEYS through any node; after an acknowledged put, usually a conditional put
    (or now and then a conditional delete) on the version that put returned, then on the next one, and so on."""

    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        super().__init__(cluster, client_id, rng)
        self.counter = 0
        self.own: tuple[str, int] | None = None  # the key and version of this writer's last acknowledged put
        self.acknowledged: list[tuple[str, int, str]] = []  # (key, version, value) of its acknowledged puts
        self.own_cas_succeeded = 0  # conditional writes on an own version that succeeded

    def next_operation(self) -> None:
        if not self.active:
            return
        self.counter += 1
        value = f"{self.client_id}-{self.counter}"
        own, self.own = self.own, None
        request: KvPut | KvDelete | KvGet
        if own is not None and self.rng.random() < CAS_ON_OWN:
            key, version = own
            if self.rng.random() < 0.15:
                request = KvDelete(key, if_version=version)
            else:
                request = KvPut(key, value, if_version=version)
        else:
            key, roll = self.rng.choice(HOT_KEYS), self.rng.random()
            if roll < 0.6:
                request = KvPut(key, value)
            elif roll < 0.75:
                request = KvDelete(key)
            else:
                request = KvGet(key)

        def done(result: ClientResult) -> None:
            if isinstance(result, Committed) and isinstance(request, KvPut):
                self.own = (request.key, result.version)
                self.acknowledged.append((request.key, result.version, value))
            if isinstance(result, Committed) and not isinstance(request, KvGet) and request.if_version is not None:
                self.own_cas_succeeded += 1
            self.again()

        self.cluster.submit(self.node(), request, client=self.client_id, on_done=done)


class VersionWitness:
    """What the committed states say each hot key's versions were written with: (key, version) -> value, from
    every state any node applied (a node applies only committed states)."""

    def __init__(self, cluster: SimulatedCluster, keys: tuple[str, ...] = HOT_KEYS) -> None:
        self.keys = keys
        self.written: dict[tuple[str, int], object] = {}
        self.state_versions: set[int] = set()
        self.absent: dict[str, set[int]] = defaultdict(set)  # state versions at which a key did not exist
        cluster.applied_observers.append(self.observe)

    def observe(self, state: ClusterState) -> None:
        if state.version in self.state_versions:
            return
        self.state_versions.add(state.version)
        for key in self.keys:
            versions = state.key_version(key)
            if versions is None:
                self.absent[key].add(state.version)
            else:
                self.written.setdefault((key, versions.version), state.kv[key])

    def problems(self, writers: list[HotWriter]) -> list[str]:
        """Acknowledged puts that share a version, or whose version's state holds another value, or no such key."""
        found: list[str] = []
        by_version: dict[tuple[str, int], list[str]] = defaultdict(list)
        for writer in writers:
            for key, version, value in writer.acknowledged:
                by_version[(key, version)].append(value)
        for (key, version), values in sorted(by_version.items()):
            if len(values) > 1:
                found.append(f"[{key}]: {len(values)} acknowledged puts got version {version}: {values}")
            elif (key, version) in self.written and self.written[(key, version)] != values[0]:
                found.append(
                    f"[{key}]: the put of {values[0]!r} got version {version}, but in state {version} the key holds "
                    f"{self.written[(key, version)]!r}"
                )
            elif version in self.absent[key]:
                found.append(f"[{key}]: the put of {values[0]!r} got version {version}, but state {version} lacks it")
        return found
