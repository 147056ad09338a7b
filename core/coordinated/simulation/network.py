"""The simulated network: per-link delays, drops, disconnections, blackholes and partitions."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import Enum


class Link(Enum):
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"  # the sender learns at once (connection refused or reset)
    BLACKHOLE = "blackhole"  # messages vanish; only timeouts notice


@dataclass
class Network:
    rng: random.Random
    min_delay: int = 1
    max_delay: int = 20
    drop_rate: float = 0.0
    _links: dict[tuple[str, str], Link] = field(default_factory=dict)
    _slow: dict[tuple[str, str], int] = field(default_factory=dict)

    def link(self, source: str, destination: str) -> Link:
        return self._links.get((source, destination), Link.CONNECTED)

    def set_link(self, source: str, destination: str, link: Link, both_ways: bool = True) -> None:
        pairs = [(source, destination), (destination, source)] if both_ways else [(source, destination)]
        for pair in pairs:
            if link is Link.CONNECTED:
                self._links.pop(pair, None)
            else:
                self._links[pair] = link

    def slow_link(self, source: str, destination: str, extra_delay: int) -> None:
        self._slow[(source, destination)] = extra_delay
        self._slow[(destination, source)] = extra_delay

    def partition(self, side_a: list[str], side_b: list[str], link: Link = Link.DISCONNECTED) -> None:
        for a in side_a:
            for b in side_b:
                self.set_link(a, b, link)

    def isolate(self, node: str, others: list[str], link: Link = Link.DISCONNECTED) -> None:
        self.partition([node], [other for other in others if other != node], link)

    def heal(self) -> None:
        self._links.clear()
        self._slow.clear()
        self.drop_rate = 0.0

    def delay(self, source: str, destination: str) -> int:
        return self.rng.randint(self.min_delay, self.max_delay) + self._slow.get((source, destination), 0)

    def dropped(self) -> bool:
        return self.drop_rate > 0 and self.rng.random() < self.drop_rate

    def is_isolated(self, node: str, others: list[str]) -> bool:
        return any(self.link(node, other) is not Link.CONNECTED for other in others if other != node)
