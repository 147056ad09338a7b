"""Peers that answer with another cluster's UUID: a sign of a misconfiguration worth reporting loudly.

Two clusters with the same `cluster.name` ignore each other's terms (their committed cluster UUIDs differ),
which keeps both safe, but one of them is almost certainly a mistake: a data directory restored from, or
copied off, another cluster, or seeds pointing at the wrong cluster. Elasticsearch only logs it at debug
level; here it is a warning (once per peer and UUID) and a formation problem in the health report, as long
as the peer was seen within `REPORT_FOR_MS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REPORT_FOR_MS = 5 * 60 * 1000
MAX_TRACKED = 64


@dataclass
class ForeignClusters:
    # peer transport address -> (its cluster UUID, when last seen)
    seen: dict[str, tuple[str, int]] = field(default_factory=dict)

    def saw(self, address: str, their_uuid: str, our_uuid: str, now: int) -> str | None:
        """Record a message from a peer of cluster `their_uuid`; the warning to log if this is news."""
        previous = self.seen.get(address)
        news = previous is None or previous[0] != their_uuid or now - previous[1] > REPORT_FOR_MS
        if previous is None and len(self.seen) >= MAX_TRACKED:
            oldest = min(self.seen, key=lambda peer: self.seen[peer][1])
            del self.seen[oldest]
        self.seen[address] = (their_uuid, now)
        if not news:
            return None
        return (
            f"peer {address} belongs to cluster [{their_uuid}], this node to [{our_uuid}]: another cluster with "
            "the same cluster.name, which this node ignores. Is this node's data directory from another "
            "cluster, or do discovery.seed_hosts point at the wrong cluster?"
        )

    def agrees(self, address: str) -> None:
        """The peer answered with this node's own cluster UUID (it was wiped and rejoined, say)."""
        self.seen.pop(address, None)

    def problem(self, our_uuid: str, now: int) -> str | None:
        recent = sorted((address, uuid) for address, (uuid, at) in self.seen.items() if now - at <= REPORT_FOR_MS)
        if not recent:
            return None
        peers = ", ".join(f"{address} [{uuid}]" for address, uuid in recent)
        return (
            f"cluster UUID mismatch: peers of another cluster with the same cluster.name answered: {peers}; "
            f"this node belongs to cluster [{our_uuid}]"
        )
