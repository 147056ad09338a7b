"""The master's session leases: when each TTL session expires, by the master's own monotonic clock.

As in etcd's lessor, only the master expires sessions, and the deadlines are not part of the cluster state:
a session's TTL is replicated, its deadline is not. A node that becomes master gives every session a fresh
full TTL from its election (etcd's `Promote`), so a failover never ends a session early; a node that stops
leading forgets every deadline (`Demote`). A keepalive renews a deadline on the master alone, with no
publication, once the master has confirmed it still leads. An expired session ends through a master task,
which deletes its ephemeral keys in the same state; the task checks again, so a keepalive that arrives while
the task waits for its batch still saves the session.

The master records the history events (`session_created`, `session_expired`, `session_ended`) once the state
that makes the change is committed; why a session ended is noted when the state is published.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinated.coordination.client import ClientResult, SessionEnd, SessionInfo
from coordinated.coordination.context import CoreContext
from coordinated.coordination.history import EventType
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.state import ClusterState
from coordinated.coordination.tasks import ClientTask, ExpireSessions, TaskPayload

MAX_END_CAUSES = 10_000  # causes of ends published but not (yet) committed, kept at most


class SessionLeases:
    def __init__(self, ctx: CoreContext, submit_task: Callable[[Task], None]) -> None:
        self.ctx = ctx
        self.submit_task = submit_task
        self.deadlines: dict[str, int] = {}  # TTL session id -> when it expires (master only)
        self.expiring: set[str] = set()  # in an ExpireSessions task not yet run
        self.leading = False
        self.end_causes: dict[str, tuple[EventType, str]] = {}  # session id -> why a published state ended it

    def promote(self, state: ClusterState) -> None:
        """This node became master: every TTL session gets a fresh full TTL from now."""
        self.leading = True
        self.deadlines = {}
        self.sync(state)

    def demote(self) -> None:
        self.leading = False
        self.deadlines = {}
        self.expiring = set()
        self.ctx.timers.cancel(self)

    def sync(self, state: ClusterState) -> None:
        """After a publication: track the sessions it created (from now), forget the ones it ended."""
        if not self.leading:
            return
        now = self.ctx.now
        deadlines = {}
        for session_id, session in state.sessions.items():
            if session.ttl_ms > 0:
                deadlines[session_id] = self.deadlines.get(session_id, now + session.ttl_ms)
        self.deadlines = deadlines
        self._schedule()

    def published(self, base: ClusterState, state: ClusterState, payloads: list[TaskPayload]) -> None:
        """Note why `state` ends sessions of `base` (the batch's tasks say it), for when it is committed."""
        if not base.sessions:
            return
        for event_type, session_id, reason in session_events(base, state, payloads):
            if event_type is not EventType.SESSION_CREATED:
                self.end_causes[session_id] = (event_type, reason)
        while len(self.end_causes) > MAX_END_CAUSES:
            del self.end_causes[next(iter(self.end_causes))]

    def committed(self, applied_before: ClusterState, state: ClusterState) -> None:
        """A state this master published is committed: record its session events, against the state this node
        had applied before, so that an end that an earlier, failed publication made and that commits only now
        (the next master's state carries it) is recorded too, with its cause. Then track its sessions."""
        if applied_before.sessions or state.sessions:
            for event_type, session_id, reason in session_events(applied_before, state, []):
                if event_type is not EventType.SESSION_CREATED:
                    event_type, reason = self.end_causes.pop(session_id, (event_type, reason))
                self.ctx.record_history(event_type, reason=reason, session=session_id)
        self.sync(state)

    def renew(self, session_id: str, arrived: int) -> SessionInfo | None:
        """A keepalive that reached the master at `arrived`; None if the session has ended."""
        state = self.ctx.accepted
        session = state.sessions.get(session_id)
        if session is None or not self.leading:
            return None
        if session.ttl_ms > 0:
            self.deadlines[session_id] = max(self.deadlines.get(session_id, 0), arrived + session.ttl_ms)
            self._schedule()
        return SessionInfo(session_id, session.ttl_ms, session.node, state.term, state.version)

    def is_expired(self, session_id: str) -> bool:
        deadline = self.deadlines.get(session_id)
        return deadline is not None and deadline <= self.ctx.now

    def _schedule(self) -> None:
        waiting = [deadline for session_id, deadline in self.deadlines.items() if session_id not in self.expiring]
        if waiting:
            self.ctx.timers.schedule(self, min(waiting), self._expire)
        else:
            self.ctx.timers.cancel(self)

    def _expire(self) -> None:
        if not self.leading:
            return
        expired = tuple(
            sorted(
                session_id
                for session_id in self.deadlines
                if session_id not in self.expiring and self.is_expired(session_id)
            )
        )
        if expired:
            self.expiring.update(expired)

            def done(result: ClientResult, expired: tuple[str, ...] = expired) -> None:
                self.expiring.difference_update(expired)
                self._schedule()  # a session the task did not end (renewed, or the task failed) is tracked again

            self.submit_task(Task("expire-sessions", Priority.HIGH, ExpireSessions(expired), done))
        self._schedule()


def session_events(
    before: ClusterState, after: ClusterState, payloads: list[TaskPayload]
) -> list[tuple[EventType, str, str]]:
    """What `after` did to the sessions of `before`, as history events: (type, session id, reason). The cause
    of an end is read from the batch's tasks."""
    expiring = {session_id for p in payloads if isinstance(p, ExpireSessions) for session_id in p.session_ids}
    by_request = {
        p.request.session for p in payloads if isinstance(p, ClientTask) and isinstance(p.request, SessionEnd)
    }
    events: list[tuple[EventType, str, str]] = []
    for session_id, session in sorted(after.sessions.items()):
        if session_id not in before.sessions:
            bound = f"node [{session.node}]" if session.node else f"ttl [{session.ttl_ms}ms]"
            events.append((EventType.SESSION_CREATED, session_id, f"created with {bound}"))
    for session_id, session in sorted(before.sessions.items()):
        if session_id in after.sessions:
            continue
        if session_id in expiring and session_id not in by_request:
            events.append((EventType.SESSION_EXPIRED, session_id, f"no keepalive for [{session.ttl_ms}ms]"))
        elif session.node is not None and session.node not in after.nodes:
            events.append((EventType.SESSION_ENDED, session_id, f"node [{session.node}] left the cluster"))
        elif session_id in by_request:
            events.append((EventType.SESSION_ENDED, session_id, "ended by request"))
        else:
            events.append((EventType.SESSION_ENDED, session_id, "ended in a state published by an earlier master"))
    return events
