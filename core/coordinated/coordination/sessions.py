"""The master's session leases: when each TTL session expires, by the master's own monotonic clock, and the
checkpoints of its remaining TTL in the cluster state that bound what a master change can add to it.

As in etcd's lessor, only the master expires sessions, and a deadline is not replicated on every keepalive:
a keepalive renews the deadline on the master alone, with no publication, once the master has confirmed it
still leads. An expired session ends through a master task, which deletes its ephemeral keys in the same
state; the task checks again, so a keepalive that arrives while the task waits for its batch still saves the
session. A node that stops leading forgets every deadline.

**Checkpoints** (etcd's lease checkpointing, etcd-io/etcd#9888). Each session in the state carries the
remaining TTL of its last checkpoint (`Session.remaining_ms`), or None for "the whole TTL, counted from a
keepalive". A new master continues every session from that record: its deadline is the election plus the
recorded remaining TTL. So a master change extends an abandoned session by the age of the record when the
old master stopped (the time without a master is counted by no one). The master keeps that age below the
failover allowance (`failover_allowance_ms`: a fifth of the TTL, at least 1 s): once a session has gone
half of it without a record, it checkpoints the remaining TTL (one task for every session due), so the
committed record is at most half the allowance old, plus the time its publication takes.

A record must never be shorter than what a keepalive promised, or a failover would end a kept-alive session
early. A keepalive is therefore answered at once only if both the newest committed state and the newest
published one record the session's whole TTL (None); otherwise the same checkpoint task resets the record to
None, and the keepalive is answered once that state is committed. (A checkpoint computed after the keepalive
arrived already counts it, whatever it records.) A
client that keeps alive more often than half the allowance thus causes no write at all, and a slower one two
small ones per keepalive (the checkpoint, then its reset).

The master records the history events (`session_created`, `session_expired`, `session_ended`) once the state
that makes the change is committed; why a session ended is noted when the state is published. Every step here
costs in proportion to the sessions it changes (the states' diffs and a heap of due times), whatever the
number of sessions, except `promote`, once per election.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from coordinated.coordination import client
from coordinated.coordination.client import ClientResult, Committed, SessionInfo
from coordinated.coordination.context import CoreContext
from coordinated.coordination.history import EventType
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.requests.sessions import SessionEnd
from coordinated.coordination.state import ClusterState, Derivations, Session, compute_diff
from coordinated.coordination.tasks import CheckpointSessions, ClientTask, ExpireSessions, TaskPayload

MAX_END_CAUSES = 10_000  # causes of ends published but not (yet) committed, kept at most
Reply = Callable[[ClientResult], None]


def failover_allowance_ms(ttl_ms: int) -> int:
    """The most that one master change may extend an abandoned session: a fifth of its TTL, at least 1 s."""
    return max(ttl_ms // 5, 1_000)


def checkpoint_interval_ms(ttl_ms: int) -> int:
    """How old a session's record may grow before the master checkpoints it: half the allowance, leaving the
    other half for the checkpoint's publication."""
    return failover_allowance_ms(ttl_ms) // 2


class SessionLeases:
    def __init__(self, ctx: CoreContext, submit_task: Callable[[Task], None]) -> None:
        self.ctx = ctx
        self.submit_task = submit_task
        self.leading = False
        # Per TTL session tracked by this master: when it expires, its TTL, the arrival of its last keepalive
        # here, and when the record of the newest committed state was exact (the record's age counts from it).
        self.deadlines: dict[str, int] = {}
        self.ttls: dict[str, int] = {}
        self.renewed: dict[str, int] = {}
        self.recorded: dict[str, int] = {}
        self.full: set[str] = set()  # the newest committed state records their whole TTL (None)
        self._due: list[tuple[int, str]] = []  # (when, session): a heap, with stale entries skipped when popped
        self.expiring: set[str] = set()  # in an ExpireSessions task not yet run
        self.checkpointing: set[str] = set()  # in a checkpoint task not yet done
        self.exact: dict[str, int] = {}  # the record a checkpoint task computed: when it was exact
        self.end_causes: dict[str, tuple[EventType, str]] = {}  # session id -> why a published state ended it

    # -- leadership ------------------------------------------------------------------------------------

    def promote(self, state: ClusterState) -> None:
        """This node became master: every TTL session continues from its record, counted from now."""
        self.demote()
        self.leading = True
        # The state this master starts from is committed before it serves any read, so before any keepalive.
        for session_id, session in state.sessions.items():
            self._track(session_id, session)
        self._schedule()

    def demote(self) -> None:
        self.leading = False
        for tracked in (self.deadlines, self.ttls, self.renewed, self.recorded, self.exact):
            tracked.clear()
        self._due = []
        self.full, self.expiring, self.checkpointing = set(), set(), set()
        self.ctx.timers.cancel(self)

    def _track(self, session_id: str, session: Session) -> None:
        if session.ttl_ms <= 0 or session_id in self.deadlines:
            return
        now = self.ctx.now
        remaining = session.ttl_ms if session.remaining_ms is None else session.remaining_ms
        self.deadlines[session_id] = now + remaining
        self.ttls[session_id] = session.ttl_ms
        self.recorded[session_id] = now
        if session.remaining_ms is None:
            self.full.add(session_id)
        self._push(session_id)

    def _untrack(self, session_id: str) -> None:
        for tracked in (self.deadlines, self.ttls, self.renewed, self.recorded, self.exact):
            tracked.pop(session_id, None)
        self.full.discard(session_id)

    # -- states published and committed ------------------------------------------------------------------

    def published(self, base: ClusterState, state: ClusterState, payloads: list[TaskPayload]) -> None:
        """Note why `state` ends sessions of `base` (the batch's tasks say it), for when it is committed."""
        if base.sessions is state.sessions:
            return
        for event_type, session_id, reason in session_events(base, state, payloads, self.ctx.derivations):
            if event_type is not EventType.SESSION_CREATED:
                self.end_causes[session_id] = (event_type, reason)
        while len(self.end_causes) > MAX_END_CAUSES:
            del self.end_causes[next(iter(self.end_causes))]

    def committed(self, applied_before: ClusterState, state: ClusterState) -> None:
        """A state this master published is committed: record its session events, against the state this node
        had applied before, so that an end that an earlier, failed publication made and that commits only now
        (the next master's state carries it) is recorded too, with its cause. Then track its sessions and their
        records."""
        if applied_before.sessions is state.sessions:
            return
        for event_type, session_id, reason in session_events(applied_before, state, [], self.ctx.derivations):
            if event_type is not EventType.SESSION_CREATED:
                event_type, reason = self.end_causes.pop(session_id, (event_type, reason))
                self._untrack(session_id)
            elif self.leading:
                self._track(session_id, state.sessions[session_id])
            self.ctx.record_history(event_type, reason=reason, session=session_id)
        for session_id, session in compute_diff(applied_before, state, self.ctx.derivations).sessions.upserts.items():
            if session.remaining_ms is None and session_id in self.deadlines:
                self.full.add(session_id)
            else:
                self.full.discard(session_id)
        self._schedule()

    # -- keepalives ------------------------------------------------------------------------------------

    def renew(self, session_id: str, arrived: int, reply: Reply) -> None:
        """A keepalive that reached the master at `arrived`, once the master has confirmed that it leads. It is
        answered at once if the newest state records the session's whole TTL; otherwise once a state that does
        is committed, so that no master change can end the session before `arrived` plus its TTL."""
        session = self.ctx.accepted.sessions.get(session_id)
        if session is None or not self.leading or session_id not in self.deadlines:
            reply(client.session_not_found_error(session_id))
            return
        self.deadlines[session_id] = max(self.deadlines[session_id], arrived + session.ttl_ms)
        self.renewed[session_id] = arrived
        if session.remaining_ms is None and session_id in self.full:
            self.recorded[session_id] = max(self.recorded[session_id], arrived)
            self._push(session_id)
            reply(self.info(session_id))
            return
        self._push(session_id)

        def after_checkpoint(result: ClientResult) -> None:
            reply(self.info(session_id) if isinstance(result, Committed) else result)

        self._checkpoint((session_id,), "session-keepalive", after_checkpoint)

    def info(self, session_id: str) -> ClientResult:
        """The session as the keepalive's answer gives it: its TTL and the time it has left by this master's
        clock; not found if it has ended (or this node no longer leads)."""
        state = self.ctx.accepted
        session = state.sessions.get(session_id)
        deadline = self.deadlines.get(session_id)
        if session is None or deadline is None:
            return client.session_not_found_error(session_id)
        remaining = max(0, deadline - self.ctx.now)
        return SessionInfo(session_id, session.ttl_ms, session.node, state.term, state.version, remaining)

    # -- what a batch asks ---------------------------------------------------------------------------------

    def is_expired(self, session_id: str) -> bool:
        deadline = self.deadlines.get(session_id)
        return deadline is not None and deadline <= self.ctx.now

    def checkpoint(self, session_id: str, session: Session) -> Session:
        """The session as a checkpoint records it now: the whole TTL if a keepalive arrived within half the
        checkpoint interval (its record then dates from that keepalive), else the time left now."""
        deadline = self.deadlines.get(session_id)
        if deadline is None:
            return session  # not tracked (a node session, or created in this very batch): nothing to record
        now = self.ctx.now
        renewed = self.renewed.get(session_id)
        if renewed is not None and now - renewed < checkpoint_interval_ms(session.ttl_ms) // 2:
            self.exact[session_id] = renewed
            remaining = None
        else:
            self.exact[session_id] = now
            remaining = max(0, deadline - now)
        return (
            session
            if session.remaining_ms == remaining
            else Session(session.ttl_ms, None, session.create_version, remaining)
        )

    # -- timers ----------------------------------------------------------------------------------------

    def _due_at(self, session_id: str) -> int:
        return min(
            self.deadlines[session_id], self.recorded[session_id] + checkpoint_interval_ms(self.ttls[session_id])
        )

    def _push(self, session_id: str) -> None:
        heapq.heappush(self._due, (self._due_at(session_id), session_id))

    def _schedule(self) -> None:
        if self._due and self.leading:
            self.ctx.timers.schedule(self, self._due[0][0], self._on_due)
        else:
            self.ctx.timers.cancel(self)

    def _on_due(self) -> None:
        if not self.leading:
            return
        now = self.ctx.now
        expired: set[str] = set()
        unrecorded: set[str] = set()
        while self._due and self._due[0][0] <= now:
            _, session_id = heapq.heappop(self._due)
            if session_id not in self.deadlines or session_id in self.expiring:
                continue  # ended, or in an expiry task, which pushes it again when done
            if self.deadlines[session_id] <= now:
                expired.add(session_id)
            elif session_id in self.checkpointing:
                heapq.heappush(self._due, (self.deadlines[session_id], session_id))  # its expiry still counts
            elif self._due_at(session_id) <= now:
                unrecorded.add(session_id)
        if expired:
            ids = tuple(sorted(expired))
            self.expiring.update(ids)

            def done(result: ClientResult) -> None:
                self.expiring.difference_update(ids)
                self._requeue(ids)  # a session the task did not end (renewed, or the task failed) is tracked again

            self.submit_task(Task("expire-sessions", Priority.HIGH, ExpireSessions(ids), done))
        if unrecorded:
            self._checkpoint(tuple(sorted(unrecorded)), "checkpoint-sessions", lambda result: None)
        self._schedule()

    def _checkpoint(self, ids: tuple[str, ...], source: str, then: Reply) -> None:
        """A checkpoint task; once it is committed, each record it wrote is the session's record. The sessions'
        deadlines still count meanwhile."""
        self.checkpointing.update(ids)
        for session_id in ids:
            heapq.heappush(self._due, (self.deadlines[session_id], session_id))

        def done(result: ClientResult) -> None:
            self.checkpointing.difference_update(ids)
            for session_id in ids:
                exact = self.exact.pop(session_id, None)
                if exact is not None and session_id in self.recorded and isinstance(result, Committed):
                    self.recorded[session_id] = max(self.recorded[session_id], exact)
            self._requeue(ids)
            then(result)

        self.submit_task(Task(source, Priority.HIGH, CheckpointSessions(ids), done))

    def _requeue(self, ids: tuple[str, ...]) -> None:
        for session_id in ids:
            if session_id in self.deadlines and session_id not in self.expiring:
                self._push(session_id)
        self._schedule()


def session_events(
    before: ClusterState, after: ClusterState, payloads: list[TaskPayload], derivations: Derivations | None = None
) -> list[tuple[EventType, str, str]]:
    """What `after` did to the sessions of `before`, as history events: (type, session id, reason). The cause
    of an end is read from the batch's tasks. In proportion to the sessions changed (the states' diff)."""
    expiring = {session_id for p in payloads if isinstance(p, ExpireSessions) for session_id in p.session_ids}
    by_request = {
        p.request.session for p in payloads if isinstance(p, ClientTask) and isinstance(p.request, SessionEnd)
    }
    diff = compute_diff(before, after, derivations).sessions
    events: list[tuple[EventType, str, str]] = []
    for session_id in sorted(session_id for session_id in diff.upserts if session_id not in before.sessions):
        session = after.sessions[session_id]
        bound = f"node [{session.node}]" if session.node else f"ttl [{session.ttl_ms}ms]"
        events.append((EventType.SESSION_CREATED, session_id, f"created with {bound}"))
    for session_id in sorted(session_id for session_id in diff.deletes if session_id in before.sessions):
        session = before.sessions[session_id]
        if session_id in expiring and session_id not in by_request:
            events.append((EventType.SESSION_EXPIRED, session_id, f"no keepalive for [{session.ttl_ms}ms]"))
        elif session.node is not None and session.node not in after.nodes:
            events.append((EventType.SESSION_ENDED, session_id, f"node [{session.node}] left the cluster"))
        elif session_id in by_request:
            events.append((EventType.SESSION_ENDED, session_id, "ended by request"))
        else:
            events.append((EventType.SESSION_ENDED, session_id, "ended in a state published by an earlier master"))
    return events
