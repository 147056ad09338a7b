"""The shape every simulated application shares: it acts through a random node, once at a random moment
after it starts and again a moment after each answer, while it is active."""

from __future__ import annotations

import random

from coordinated.coordination.client import ClientResult
from coordinated.simulation.cluster import SimulatedCluster


class SimClient:
    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.rng = rng
        self.active = True

    def start(self) -> None:
        self.cluster.schedule(self.cluster.now + self.rng.randint(0, 200), self.next_operation)

    def next_operation(self) -> None:
        raise NotImplementedError

    def node(self) -> int:
        return self.rng.randrange(len(self.cluster.nodes))

    def again(self, result: ClientResult | None = None) -> None:
        """The next operation, a moment later (the answer to this one, if any, is the caller's)."""
        if self.active:
            self.cluster.schedule(self.cluster.now + self.rng.randint(1, 300), self.next_operation)
