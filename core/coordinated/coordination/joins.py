"""Joining a master, as Elasticsearch's JoinHelper: send join requests (with this node's vote when it has
one for that master's term), retry a lost one after a timeout, and hold the joins a candidate receives
until it wins or gives up.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinated.coordination.client import ClientResult, ClusterError, Committed
from coordinated.coordination.context import CoreContext
from coordinated.coordination.history import NO_CLUSTER_UUID
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.messages import Join, JoinRequest, JoinResponse
from coordinated.coordination.node_versions import reported
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.tasks import NodeJoin
from coordinated.coordination.wire_versions import UNVERSIONED, NodeVersion

JOIN_TIMEOUT_MS = 10_000
REJECTION_REPORTED_FOR_MS = 60_000


@dataclass(frozen=True)
class JoinRejection:
    """A master's refusal of this node's join request: a reason this node has no master, for its health."""

    master: str  # the master's transport address
    reason: str
    at: int

    def describe(self) -> str:
        return f"the master at {self.master} refused this node's join: {self.reason}"


@dataclass(frozen=True)
class PendingJoin:
    node: DiscoveryNode
    request_id: int
    address: str  # where to answer
    version: NodeVersion = UNVERSIONED  # what the join request reported


class JoinHelper:
    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.last_join: Join | None = None  # this node's vote in its current term
        self.request_in_flight: str | None = None  # the master address a join request awaits an answer from
        self.retry_at = 0
        self.pending: dict[str, PendingJoin] = {}  # node id -> join received while a candidate
        self.rejection: JoinRejection | None = None  # the last refusal of this node's join, until one succeeds

    def join_for(self, master_id: str, term: int) -> Join | None:
        """This node's vote, if it was given to `master_id` in `term`."""
        join = self.last_join
        if join is not None and (join.target_id != master_id or join.term != term):
            return None
        return join

    def on_master_discovered(self, master: DiscoveryNode) -> None:
        ctx = self.ctx
        if master.id == ctx.local_node.id:
            return
        if self.request_in_flight == master.transport_address and ctx.now < self.retry_at:
            return  # wait for the answer; a lost request is retried after the join timeout
        self.request_in_flight = master.transport_address
        self.retry_at = ctx.now + JOIN_TIMEOUT_MS
        self.send_join_request(master, ctx.current_term, self.join_for(master.id, ctx.current_term))

    def send_join_request(self, target: DiscoveryNode, min_term: int, join: Join | None) -> None:
        ctx = self.ctx
        state = ctx.accepted
        ctx.send(
            target.transport_address,
            JoinRequest(
                source=ctx.local_node,
                request_id=ctx.new_request_id(),
                min_term=min_term,
                join=join,
                cluster_uuid=state.cluster_uuid,
                cluster_uuid_committed=state.cluster_uuid_committed,
                accepted_term=state.term,
                accepted_version=state.version,
                release=ctx.versions.version.release,
                wire_version=ctx.versions.version.wire,
            ),
        )

    def on_join_response(self, sender: str, response: JoinResponse) -> None:
        if self.request_in_flight == sender:
            self.request_in_flight = None
        if not response.ok:
            self.ctx.log("debug", f"join rejected by {sender}: {response.reason}")
            self.rejection = JoinRejection(sender, response.reason, self.ctx.now)
        else:
            self.rejection = None

    def recent_rejection(self) -> JoinRejection | None:
        rejection = self.rejection
        if rejection is None or self.ctx.now - rejection.at > REJECTION_REPORTED_FOR_MS:
            return None
        return rejection

    def on_send_failure(self, destination: str) -> None:
        if self.request_in_flight == destination:
            self.request_in_flight = None

    def hold(self, request: JoinRequest) -> None:
        """A join request a candidate received: answered once it wins (or gives up)."""
        version = reported(request.release, request.wire_version)
        source = request.source
        self.pending[source.id] = PendingJoin(source, request.request_id, source.transport_address, version)

    def admitted(self, request: JoinRequest) -> Task | None:
        """The master's task that adds the node of a join request, unless the version barrier refuses it."""
        source = request.source
        join = PendingJoin(
            source, request.request_id, source.transport_address, reported(request.release, request.wire_version)
        )
        return next(iter(self.admitted_tasks([join])), None)

    def admitted_tasks(self, joins: list[PendingJoin]) -> list[Task]:
        """The join tasks of the nodes the version barrier lets in; the others are told why they are refused
        (`NodeVersions.join_problem`). An admitted node's version counts from now on."""
        tasks = []
        versions, state = self.ctx.versions, self.ctx.accepted
        for join in joins:
            problem = versions.join_problem(join.node, join.version, state)
            if problem is not None:
                self.ctx.log("warning", f"refusing the join of {join.node.name}: {problem}")
                self.reject(join.node, join.request_id, problem)
                continue
            versions.learn(join.node.id, join.version, state)
            tasks.append(self.join_task(join.node, join.request_id, join.address))
        versions.prune(state)
        return tasks

    def refused_foreign(self, request: JoinRequest) -> bool:
        """A join request from a node of another cluster: refused (and logged), naming both clusters."""
        state = self.ctx.accepted
        if not (
            request.cluster_uuid_committed
            and request.cluster_uuid != state.cluster_uuid
            and (state.cluster_uuid_committed or state.cluster_uuid != NO_CLUSTER_UUID)
        ):
            return False
        reason = (
            f"join from {request.source.name} rejected: it belongs to cluster [{request.cluster_uuid}] "
            f"but this cluster is [{state.cluster_uuid}]"
        )
        self.ctx.log("warning", reason)
        self.reject(request.source, request.request_id, reason)
        return True

    def take_pending(self) -> list[PendingJoin]:
        pending, self.pending = list(self.pending.values()), {}
        return pending

    def reject_pending(self, reason: str) -> None:
        for join in self.take_pending():
            self.reject(join.node, join.request_id, reason)

    def reject(self, node: DiscoveryNode, request_id: int, reason: str) -> None:
        if node.id != self.ctx.local_node.id:
            self.ctx.send(node.transport_address, JoinResponse(request_id, ok=False, reason=reason))

    def join_task(self, node: DiscoveryNode, request_id: int, address: str) -> Task:
        """The master task that adds `node` and answers its join request once that is committed."""

        def reply(result: ClientResult) -> None:
            if node.id == self.ctx.local_node.id:
                return
            ok = isinstance(result, Committed)
            reason = result.reason if isinstance(result, ClusterError) else ""
            self.ctx.send(address, JoinResponse(request_id, ok=ok, reason=reason))

        return Task(f"node-join [{node.name}]", Priority.URGENT, NodeJoin(node), reply)
