"""Joining a master, as Elasticsearch's JoinHelper: send join requests (with this node's vote when it has
one for that master's term), retry a lost one after a timeout, and hold the joins a candidate receives
until it wins or gives up.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinated.coordination.client import ClientResult, ClusterError, Committed
from coordinated.coordination.context import CoreContext
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.messages import Join, JoinRequest, JoinResponse
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.tasks import NodeJoin

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

    def hold(self, node: DiscoveryNode, request_id: int, address: str) -> None:
        self.pending[node.id] = PendingJoin(node, request_id, address)

    def take_pending(self) -> list[PendingJoin]:
        pending, self.pending = list(self.pending.values()), {}
        return pending

    def reject_pending(self, reason: str) -> None:
        for join in self.take_pending():
            if join.node.id != self.ctx.local_node.id:
                self.ctx.send(join.address, JoinResponse(join.request_id, ok=False, reason=reason))

    def join_task(self, node: DiscoveryNode, request_id: int, address: str) -> Task:
        """The master task that adds `node` and answers its join request once that is committed."""

        def reply(result: ClientResult) -> None:
            if node.id == self.ctx.local_node.id:
                return
            ok = isinstance(result, Committed)
            reason = result.reason if isinstance(result, ClusterError) else ""
            self.ctx.send(address, JoinResponse(request_id, ok=ok, reason=reason))

        return Task(f"node-join [{node.name}]", Priority.URGENT, NodeJoin(node), reply)
