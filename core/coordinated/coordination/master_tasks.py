"""Running the master's tasks, as Elasticsearch's MasterService: take the pending tasks as one batch,
compute the next cluster state, and hand it to a publication; tasks that wait past their deadline fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinated.coordination import client
from coordinated.coordination.batch import MAX_STATE_SIZE, MAX_VALUE_SIZE, execute_batch, improve_configuration
from coordinated.coordination.batch_draft import BatchContext, StateSizes
from coordinated.coordination.batch_writes import DEFERRED
from coordinated.coordination.client import ClientResult, Committed
from coordinated.coordination.context import CoreContext
from coordinated.coordination.master_service import MasterService, Task
from coordinated.coordination.reconfigurator import AUTO_SHRINK_VOTING_CONFIGURATION
from coordinated.coordination.safety import CoordinationState, CoordinationStateRejected
from coordinated.coordination.state import ClusterState, Session
from coordinated.coordination.state_index import SessionKeys, SortedKeys
from coordinated.coordination.tasks import TaskPayload
from coordinated.coordination.validation import MAX_VOTING_CONFIG_EXCLUSIONS


@dataclass
class MasterTasksListener:
    can_run: Callable[[], bool]  # this node leads and no publication is in flight
    publish: Callable[[ClusterState, ClusterState, list[Task], list[ClientResult | None]], None]
    unchanged: Callable[[ClusterState], None]  # a batch that changed nothing completed at once
    refused: Callable[[str], None]  # the coordination state refused the new state: stop leading
    session_expired: Callable[[str], bool] = lambda session_id: False  # by the master's lease clock
    checkpoint_session: Callable[[str, Session], Session] = lambda session_id, session: session  # sessions.py


class MasterTasks:
    def __init__(self, ctx: CoreContext, coordination_state: CoordinationState, listener: MasterTasksListener) -> None:
        self.ctx = ctx
        self.coordination_state = coordination_state
        self.listener = listener
        self.queue = MasterService()
        self._state_sizes = StateSizes()  # for cluster.metadata.max_state_size
        self._session_keys = SessionKeys(ctx.derivations)  # of the state batches build on, once a session has ended
        # The sorted key names of that state, once a prefix has been deleted: each prefix delete then costs in
        # proportion to the keys it deletes, not to every key (a scan of 100,000 keys took about 100 ms a call).
        self._sorted_keys = SortedKeys(ctx.derivations)

    def submit(self, task: Task) -> None:
        self.queue.add(task)
        self.run()

    def state_size(self, state: ClusterState) -> int | None:
        """What `state` counts against `cluster.metadata.max_state_size`, if this master built or measured it."""
        return self._state_sizes.known(state)

    def is_pending(self, kind: type[TaskPayload]) -> bool:
        """Whether a task of this type waits in the queue (tasks are told apart by type, never by their text)."""
        return any(isinstance(task.payload, kind) for task in self.queue.pending)

    def fail_all(self, reason: str) -> None:
        for task in self.queue.take_all():
            task.reply(client.not_master_error(reason))
        self.ctx.timers.cancel(self)

    def run(self) -> None:
        if not self.listener.can_run():
            return
        ctx, queue = self.ctx, self.queue
        for task in queue.take_expired(ctx.now):
            task.reply(client.timeout_error(f"failed to process [{task.source}] within its timeout"))
        if not queue.pending:
            self._schedule_expiry()
            return
        tasks = queue.take_batch()
        base = ctx.accepted
        try:
            new_state, outcomes = execute_batch(base, [task.payload for task in tasks], self._batch_context(base))
        except CoordinationStateRejected as rejected:
            for task in tasks:
                task.reply(client.not_master_error(str(rejected)))
            return
        # A task that would write a key this batch writes already waits for the next publication, in its place.
        queue.put_back([task for task, outcome in zip(tasks, outcomes, strict=True) if outcome is DEFERRED])
        ran = [(task, outcome) for task, outcome in zip(tasks, outcomes, strict=True) if outcome is not DEFERRED]
        tasks = [task for task, _ in ran]
        results = [outcome for _, outcome in ran]
        if new_state is None:
            # Nothing changed: no publication needed; the tasks see the current state.
            for task, result in zip(tasks, results, strict=True):
                task.reply(result or Committed(base.term, base.version))
            self.listener.unchanged(base)
            if tasks and queue.pending:
                self.run()  # deferred tasks (a batch that wrote nothing defers none; kept for safety)
            return
        try:
            self.coordination_state.handle_client_value(new_state)
        except CoordinationStateRejected as rejected:
            ctx.log("warning", f"cannot publish version {new_state.version}: {rejected}")
            for task in tasks:
                task.reply(client.not_master_error(str(rejected)))
            self.listener.refused(f"publication refused: {rejected}")
            return
        self._session_keys.advance(base, new_state)
        self._sorted_keys.advance(base, new_state)
        self.listener.publish(new_state, base, tasks, results)
        self._schedule_expiry()

    def _schedule_expiry(self) -> None:
        expiry = self.queue.next_expiry()
        if expiry is None:
            self.ctx.timers.cancel(self)
        else:
            self.ctx.timers.schedule(self, expiry, self.run)

    def _batch_context(self, base: ClusterState | None = None) -> BatchContext:
        settings = self.ctx.settings
        index, sorted_keys = self._session_keys, self._sorted_keys
        return BatchContext(
            master=self.ctx.local_node,
            term=self.ctx.current_term,
            voters=frozenset(self.coordination_state.join_votes),
            max_exclusions=settings[MAX_VOTING_CONFIG_EXCLUSIONS],
            auto_shrink=settings[AUTO_SHRINK_VOTING_CONFIGURATION],
            new_uuid=self._random_uuid,
            session_expired=self.listener.session_expired,
            checkpoint_session=self.listener.checkpoint_session,
            session_keys=None if base is None else (lambda session_id: index.at(base).of(session_id)),
            keys_with_prefix=None if base is None else (lambda prefix: sorted_keys.at(base).with_prefix(prefix)),
            max_value_size=settings[MAX_VALUE_SIZE],
            max_state_size=settings[MAX_STATE_SIZE],
            sizes=self._state_sizes,
            derivations=self.ctx.derivations,
            node_versions=self.ctx.versions.to_publish,
        )

    def improved(self, state: ClusterState) -> ClusterState:
        """`state` with the best voting configuration the master may move to now (maybe unchanged)."""
        context = self._batch_context()
        return improve_configuration(state, self.ctx.local_node.id, context.voters, context.auto_shrink)

    def _random_uuid(self) -> str:
        return f"{self.ctx.rng.getrandbits(128):032x}"
