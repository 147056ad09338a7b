"""Which peers the shell holds a watch connection to, so that their death is noticed at once, as Elasticsearch
notices a closed transport connection: the master while following (the node becomes a candidate), and every
other node of the applied state while leading (it is removed, so a stopped or killed pod leaves at once rather
than after the follower checks give up). A hung peer (SIGSTOP, a partition) keeps its connection: the checks
decide then.
"""

from __future__ import annotations

from collections.abc import Mapping

from coordinated.coordination.context import Mode
from coordinated.coordination.effects import WatchPeers
from coordinated.coordination.state import DiscoveryNode


class PeerWatch:
    """Decides the watched set after every step; says so only when it changed."""

    def __init__(self, local_id: str) -> None:
        self._local_id = local_id
        # What the set was last decided from: (mode, leader, the applied state's nodes map). An applied state
        # keeps its nodes map object while its nodes do not change, so most steps stop at this comparison.
        self._decided_from: tuple[Mode, DiscoveryNode | None, Mapping[str, DiscoveryNode]] | None = None
        self._watched: frozenset[str] = frozenset()

    def update(self, mode: Mode, leader: DiscoveryNode | None, nodes: Mapping[str, DiscoveryNode]) -> WatchPeers | None:
        last = self._decided_from
        if last is not None and last[0] is mode and last[1] == leader and last[2] is nodes:
            return None
        self._decided_from = (mode, leader, nodes)
        wanted: frozenset[str] = frozenset()
        if mode is Mode.LEADER:
            wanted = frozenset(node.transport_address for node in nodes.values() if node.id != self._local_id)
        elif leader is not None and leader.id != self._local_id:
            wanted = frozenset((leader.transport_address,))
        if wanted == self._watched:
            return None
        self._watched = wanted
        return WatchPeers(wanted)
