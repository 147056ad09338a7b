"""One two-phase publication on the master, as Elasticsearch's Publication: publish to every node, commit
once a quorum of both configurations accepted, then send the commit and wait for the nodes to apply it.

A publication is a round: it owns its timeout and ends when it completes, fails or is closed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from coordinated.coordination.client import ClientResult
from coordinated.coordination.context import CoreContext
from coordinated.coordination.effects import PublicationFinished, Send
from coordinated.coordination.master_service import Task
from coordinated.coordination.messages import (
    ApplyCommit,
    ApplyCommitResponse,
    FollowerCheckResponse,
    PublishRequest,
    PublishResponse,
)
from coordinated.coordination.quorum import joint_quorum
from coordinated.coordination.safety import CoordinationStateRejected
from coordinated.coordination.settings import bool_setting, time_setting
from coordinated.coordination.state import (
    ClusterState,
    ClusterStateDiff,
    DiscoveryNode,
    VotingConfiguration,
    compose_diffs,
    compute_diff,
)

# Node-level, as in Elasticsearch: a timeout shorter than a publication made every master step down at its first
# one, and a cluster that cannot commit cannot commit the change that would lengthen it again. At least a second
# (a publication takes milliseconds to a few hundred); at most ten minutes, which is how long a master that cannot
# commit holds every write.
PUBLISH_TIMEOUT = time_setting(
    "cluster.publish.timeout",
    "30s",
    minimum="1s",
    maximum="10m",
    doc="how long the master waits for a publication to commit before it steps down (read by the master)",
)
# Elasticsearch's order: the master applies a committed state (and answers the writes in it) only once a quorum of
# nodes has applied it. `false` drops that round from a write's latency: the master applies as soon as it has
# committed its own copy, and the followers apply as their commits arrive.
MASTER_APPLIES_LAST = bool_setting(
    "cluster.publish.master_applies_last",
    True,
    dynamic=True,
    doc="`true` (Elasticsearch's order): the master applies a committed state, and answers the writes in it, once "
    "a quorum of nodes has applied it; `false`: as soon as it has committed its own copy, which takes one round "
    "trip off every write (the followers apply as their commits arrive; reads without `?local` stay linearizable)",
)


class TargetState(Enum):
    SENT_PUBLISH = "sent_publish"
    ACKED = "acked"  # accepted, waiting for the commit
    SENT_APPLY_COMMIT = "sent_apply_commit"
    APPLIED = "applied"
    FAILED = "failed"


@dataclass
class PublicationListener:
    """How a publication reaches the coordination state and reports back."""

    accept_ack: Callable[[PublishResponse], bool]  # counts a publish vote; True when it commits the state
    publish_votes: Callable[[], set[str]]
    last_committed_config: Callable[[], VotingConfiguration]
    on_committed: Callable[[Publication], None]
    on_failed: Callable[[Publication, str], None]
    on_completed: Callable[[Publication], None]
    # A diff from a node's last-accepted state to the publication's base, if the master has one (a node
    # joining in this publication, which would otherwise get the full state).
    catch_up_diff: Callable[[str], ClusterStateDiff | None] = lambda node_id: None


class Publication:
    def __init__(
        self,
        ctx: CoreContext,
        listener: PublicationListener,
        state: ClusterState,
        previous: ClusterState,
        tasks: list[Task],
        results: list[ClientResult | None],  # None: the task succeeds when the state is committed
    ) -> None:
        self.ctx = ctx
        self.listener = listener
        self.state = state
        self.previous = previous
        self.tasks = tasks
        self.results = results
        self.started_at = ctx.now
        self.targets: dict[str, TargetState] = {}
        self.committed_at: int | None = None
        self.quorum: tuple[str, ...] = ()
        self._apply_commit: ApplyCommit | None = None  # one object for every node (encoded once)

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def committed(self) -> bool:
        return self.committed_at is not None

    def start(self) -> None:
        ctx, state, previous = self.ctx, self.state, self.previous
        local = ctx.local_node
        diff = compute_diff(previous, state, ctx.derivations)
        # One message object for every member: the transport encodes it once for all of them.
        with_diff = PublishRequest(local, state.term, state.version, diff=diff)
        for node in state.nodes.values():
            self.targets[node.id] = TargetState.SENT_PUBLISH
            if node.id == local.id:
                continue
            if node.id in previous.nodes:
                message = with_diff
            elif (missed := self.listener.catch_up_diff(node.id)) is not None and missed.state_uuid == diff.base_uuid:
                # A node that rejoins gets what it missed and this publication's change, in one diff; if it
                # does not hold the diff's base after all, it asks for the full state.
                message = PublishRequest(local, state.term, state.version, diff=compose_diffs([missed, diff]))
            else:
                message = PublishRequest(local, state.term, state.version, state=state)
            ctx.send(node.transport_address, message)
        # The master's own copy goes last, through the shell, so that it is written to disk while the
        # followers write theirs rather than before they are even sent theirs.
        ctx.emit(Send(local.transport_address, PublishRequest(local, state.term, state.version, state=state)))
        ctx.timers.schedule(self, ctx.now + ctx.settings[PUBLISH_TIMEOUT], self._timed_out)

    def close(self) -> None:
        self.ctx.timers.cancel(self)

    def finished(self, committed: bool) -> PublicationFinished:
        commit_ms = None if self.committed_at is None else self.committed_at - self.started_at
        return PublicationFinished(
            version=self.version,
            committed=committed,
            commit_latency_ms=commit_ms,
            total_latency_ms=self.ctx.now - self.started_at,
        )

    def ids_in(self, *states: TargetState) -> set[str]:
        return {node_id for node_id, target in self.targets.items() if target in states}

    def on_publish_response(self, response: PublishResponse) -> None:
        ctx = self.ctx
        if response.version != self.version:
            return
        target = self.targets.get(response.source_id)
        if target is not TargetState.SENT_PUBLISH:
            return
        node = self.state.nodes[response.source_id]
        if response.need_full_state:
            full = PublishRequest(ctx.local_node, self.state.term, self.version, state=self.state)
            ctx.send(node.transport_address, full)
            return
        if not response.ok and node.id == ctx.local_node.id:
            # The master must hold what it publishes; without its own copy it cannot go on as master.
            self.listener.on_failed(self, f"the master did not accept its own publication: {response.reason}")
            return
        if not response.ok:
            ctx.log("debug", f"{node.name} rejected publication of version {self.version}: {response.reason}")
            self.target_failed(node.id)
            return
        try:
            commit = self.listener.accept_ack(response)
        except CoordinationStateRejected as rejected:
            ctx.log("debug", f"publish ack from {node.name} not counted: {rejected}")
            return
        self.targets[node.id] = TargetState.ACKED
        if commit:
            self.committed_at = ctx.now
            self.quorum = tuple(sorted(self.listener.publish_votes()))
            self.listener.on_committed(self)
            for node_id in sorted(self.ids_in(TargetState.ACKED)):
                self._send_apply_commit(node_id)
        elif self.committed:
            self._send_apply_commit(node.id)

    def _send_apply_commit(self, node_id: str) -> None:
        self.targets[node_id] = TargetState.SENT_APPLY_COMMIT
        node = self.state.nodes[node_id]
        if self._apply_commit is None:
            self._apply_commit = ApplyCommit(self.ctx.local_node.id, self.state.term, self.version)
        self.ctx.send(node.transport_address, self._apply_commit)

    def on_apply_commit_response(self, response: ApplyCommitResponse) -> None:
        if response.version != self.version:
            return
        if self.targets.get(response.source_id) is TargetState.SENT_APPLY_COMMIT:
            self.targets[response.source_id] = TargetState.APPLIED if response.ok else TargetState.FAILED
            self.check_progress()

    def on_own_commit_applied(self, version: int) -> None:
        """The master committed its own copy; it applies when the publication completes (see check_progress)."""
        if version == self.version:
            self.targets[self.ctx.local_node.id] = TargetState.APPLIED
            self.check_progress()

    def target_failed(self, node_id: str | None) -> None:
        if node_id is None or node_id not in self.targets:
            return
        if self.targets[node_id] in (TargetState.APPLIED, TargetState.FAILED):
            return
        self.targets[node_id] = TargetState.FAILED
        self.check_progress()

    def check_progress(self) -> None:
        last_committed = self.listener.last_committed_config()
        if not self.committed:
            not_failed = {node_id for node_id, target in self.targets.items() if target is not TargetState.FAILED}
            if not self._quorum_of(last_committed, not_failed):
                self.listener.on_failed(self, "a publish quorum is no longer possible")
            return
        if self.targets.get(self.ctx.local_node.id) is not TargetState.APPLIED:
            return  # the master applies only what it holds
        if (
            not self.ctx.settings[MASTER_APPLIES_LAST]
            or self._all_targets_done()
            or self._quorum_of(last_committed, self.ids_in(TargetState.APPLIED))
        ):
            # By default the master applies last: after a quorum applied (or every node answered). Without
            # `cluster.publish.master_applies_last`, at once: the followers apply as their commits arrive.
            self.listener.on_completed(self)

    def _quorum_of(self, last_committed: VotingConfiguration, votes: set[str]) -> bool:
        return joint_quorum(last_committed, self.state.last_accepted_config, votes)

    def _all_targets_done(self) -> bool:
        return all(target in (TargetState.APPLIED, TargetState.FAILED) for target in self.targets.values())

    def _timed_out(self) -> None:
        if self.committed:
            self.listener.on_completed(self)
        else:
            timeout = self.ctx.settings[PUBLISH_TIMEOUT]
            self.listener.on_failed(self, f"not committed within cluster.publish.timeout [{timeout}ms]")


def catch_up_message(
    master: DiscoveryNode,
    state: ClusterState,
    response: FollowerCheckResponse,
    diff_since: Callable[[int, int], ClusterStateDiff | None] = lambda term, version: None,
) -> PublishRequest | ApplyCommit | None:
    """What a follower that has not applied the master's latest state missed: the changes since the state it
    accepted (when the master still has them), the state, or its commit."""
    if (response.accepted_term, response.accepted_version) < (state.term, state.version):
        diff = diff_since(response.accepted_term, response.accepted_version)
        if diff is not None:
            return PublishRequest(master, state.term, state.version, diff=diff)
        return PublishRequest(master, state.term, state.version, state=state)
    if (response.accepted_term, response.accepted_version) == (state.term, state.version):
        return ApplyCommit(master.id, state.term, state.version)
    return None
