"""Terms and versions near the end of their range: how far a number from outside may move them.

Terms and versions are 64-bit signed integers on the wire and on disk (0 to `LONG_MAX`, as in Elasticsearch).
Every election adds one to a term and every published state one to a version, so a value that decodes
correctly can still leave no room for the next step: a term of `LONG_MAX` taken from one message would lead
every node to an election at `LONG_MAX + 1`, a number no peer can decode, and no master could be elected again.

So a node takes a term or a version from outside (a peer's message, a snapshot being restored) only when it
is within reach of its own (`Reach`):

- up to `CEILING` (2^62) always: a real cluster never counts that far (a billion elections a second would take
  146 years), so nothing a healthy cluster sends is ever refused;
- above it, at most `MAX_STEP` (2^24) past the node's own value. A value beyond that is refused, but it lets
  the next value go one step further: a node that is far behind a cluster that was moved past the ceiling (a
  new node, say) catches up in steps, while moving a cluster from the ceiling to the end of the range takes
  2^38 refused or accepted messages.

A node that has reached `LONG_MAX` itself stops there (`successor` says so) rather than persisting or sending
a number the wire cannot carry. Against a peer that keeps sending such numbers, authenticate the transport.
"""

from __future__ import annotations

LONG_MAX = 2**63 - 1
CEILING = 2**62
MAX_STEP = 2**24


def reach(current: int) -> int:
    """The largest term or version that a node whose own value is `current` takes from outside at once."""
    return min(LONG_MAX, max(current, CEILING) + MAX_STEP)


def successor(value: int) -> int | None:
    """`value + 1`, or None when that is past what the wire carries."""
    return value + 1 if value < LONG_MAX else None


class Reach:
    """One node's rule for one counter (its terms, or its accepted versions); see the module docstring."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.raised = 0  # what refused values have moved the rule to: each one, one step

    def problem(self, value: int, current: int) -> str | None:
        """None if `value` may be taken by a node at `current`; otherwise why not (and the next value may go a
        step further)."""
        limit = reach(max(current, self.raised))
        if value <= limit:
            return None
        self.raised = limit
        return (
            f"{self.what} {value} is too far beyond this node's {current}: it takes at most {limit} now, so that "
            f"the cluster keeps room to count up to {LONG_MAX}"
        )
