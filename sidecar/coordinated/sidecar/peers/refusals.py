"""Transport connections refused, either way: the usual reasons a node cannot join, named in its health.

A node whose clock is too far off for transport authentication, that holds another cluster secret, or whose
certificate the peers do not trust, only ever sees its connections refused; to its core it looks like peers
that never answer, and its health would say no more than "an election is in progress". So the transport
records each refusal here: a peer that refused this node (`by_peer`, with the reason the peer gave, and how far
this node's clock is from the peer's when that is the likely cause), and a peer that this node refused. Health
reports the ones seen in the last `REPORT_FOR_S`; a connection that works clears the peer's refusal.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable
from dataclasses import dataclass

REPORT_FOR_S = 60.0
MAX_TRACKED = 64
# The transport's refusals carry their reason in this header too (a WebSocket client sees no body).
REFUSAL_HEADER = "X-Coordinated-Refusal"


@dataclass(frozen=True)
class Refusal:
    peer: str  # a transport address (refused by it), or the address a refused connection came from
    by_peer: bool  # True: the peer refused this node; False: this node refused the peer
    reason: str
    at: float

    def describe(self) -> str:
        if self.by_peer:
            return f"{self.peer} refused this node's transport connection: {self.reason}"
        return f"this node refused a transport connection from {self.peer}: {self.reason}"


class Refusals:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[tuple[str, bool], Refusal] = {}

    def refused(self, peer: str, reason: str, by_peer: bool) -> None:
        key = (peer, by_peer)
        if key not in self._seen and len(self._seen) >= MAX_TRACKED:
            del self._seen[min(self._seen, key=lambda known: self._seen[known].at)]
        self._seen[key] = Refusal(peer, by_peer, reason, self._clock())

    def accepted(self, peer: str) -> None:
        """A connection to `peer` worked: it no longer refuses this node."""
        self._seen.pop((peer, True), None)

    def recent(self) -> list[Refusal]:
        now = self._clock()
        return sorted(
            (refusal for refusal in self._seen.values() if now - refusal.at <= REPORT_FOR_S),
            key=lambda refusal: (not refusal.by_peer, refusal.peer),
        )


def clock_difference(peer_date: str | None, now: float | None = None) -> float | None:
    """Seconds this node's clock is ahead of a peer's (negative: behind), from the peer's HTTP `Date` header;
    None without a usable one. Good to a second or so, which is all a refusal for clock skew needs."""
    if not peer_date:
        return None
    try:
        peer = email.utils.parsedate_to_datetime(peer_date).timestamp()
    except (TypeError, ValueError):
        return None
    return (time.time() if now is None else now) - peer


def describe_clock_difference(seconds: float) -> str:
    direction = "ahead of" if seconds > 0 else "behind"
    return f"this node's clock is {abs(seconds):.0f}s {direction} the peer's"
