"""Simulated clients of the keys under RANGE_PREFIX: puts, deletes, prefix deletes and range reads (every page
of a listing, PAGE_LIMIT keys a page), each through any node. The recorder keeps all of them as operations
over those keys together (`recorder.range_operations`), and `check_transactions` judges them: every range
read returns exactly the keys one state held, in key order, and a prefix delete removes them all at once, or,
with a limit, the first ones in key order, saying whether any is left.
"""

from __future__ import annotations

import random

from coordinated.coordination.ranges import RangeEntry
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvPut
from coordinated.simulation.cluster import SimulatedCluster
from coordinated.simulation.recorder import RANGE_PREFIX
from coordinated.simulation.sim_client import SimClient

RANGE_KEYS = tuple(f"{RANGE_PREFIX}{name}" for name in ("a", "b", "b/1", "c", "d"))
PAGE_LIMIT = 2  # so that most listings take several pages


class RangeClient(SimClient):
    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        super().__init__(cluster, client_id, rng)
        self.counter = 0
        self.listings = 0  # range reads that completed

    def next_operation(self) -> None:
        if not self.active:
            return
        self.counter += 1
        node = self.node()
        roll = self.rng.random()
        if roll < 0.4:
            key = self.rng.choice(RANGE_KEYS)
            self.cluster.submit(node, KvPut(key, f"{self.client_id}-{self.counter}"), self.client_id, self.again)
        elif roll < 0.55:
            self.cluster.submit(node, KvDelete(self.rng.choice(RANGE_KEYS)), self.client_id, self.again)
        elif roll < 0.62:
            prefix = self.rng.choice((RANGE_PREFIX, f"{RANGE_PREFIX}b"))
            limit = self.rng.choice((None, 1, 2))  # bounded as this release's nodes send it, or whole
            self.cluster.submit(node, KvDeletePrefix(prefix, limit), self.client_id, self.again)
        else:
            self.cluster.read_range(node, RANGE_PREFIX, PAGE_LIMIT, self.client_id, self.listed)

    def listed(self, entries: list[RangeEntry] | None) -> None:
        if entries is not None:
            self.listings += 1
        self.again()
