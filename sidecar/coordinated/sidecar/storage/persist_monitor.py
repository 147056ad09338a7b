"""Whether this node can persist: the coordinator's durable store, watched.

A follower whose disk fails (full, EIO) refuses every publication it cannot persist, so the master leaves it
out of commits, but to the core it is still a follower of a healthy master until the lag detector removes
it (90 s by default). Health must say at once that the node is failing: this wrapper remembers the outcome
of the last write, which the health report and readiness read. It recovers with the next write that works.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinated.coordination.safety import PersistedState
from coordinated.coordination.state import ClusterState

log = logging.getLogger("coordinated.node")


class MonitoredPersistedState:
    """A PersistedState that passes everything through and records whether the last write failed."""

    def __init__(self, inner: PersistedState, on_accepted: Callable[[ClusterState], None] | None = None) -> None:
        self.inner = inner
        self.on_accepted = on_accepted  # told of each accepted state once it is written
        self.failure: str | None = None  # why the last write failed; None once a write succeeds again

    @property
    def current_term(self) -> int:
        return self.inner.current_term

    @property
    def last_accepted_state(self) -> ClusterState:
        return self.inner.last_accepted_state

    def set_current_term(self, term: int) -> None:
        self._write("the current term", lambda: self.inner.set_current_term(term))

    def set_last_accepted_state(self, state: ClusterState) -> None:
        self._write(
            f"the accepted state (term {state.term}, version {state.version})",
            lambda: self.inner.set_last_accepted_state(state),
        )
        if self.on_accepted is not None:
            self.on_accepted(state)

    def _write(self, what: str, write: Callable[[], None]) -> None:
        try:
            write()
        except OSError as error:
            self.failure = f"cannot persist {what}: {error}"
            raise
        if self.failure is not None:
            log.warning("persisting works again (after: %s)", self.failure)
            self.failure = None
