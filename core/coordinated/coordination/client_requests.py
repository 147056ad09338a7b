"""Where a client request goes: the master runs it (its type's `Action`: a master task, a read round, or a
procedure of its own), a follower forwards it to its master, and a node without a master answers it according
to `cluster.no_master_block`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinated.coordination import client
from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed, TxnResult
from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.exclusion_waits import ExclusionWaits
from coordinated.coordination.feature_gates import feature_not_available, required_features
from coordinated.coordination.forwarding import Forwarder
from coordinated.coordination.master_service import Task
from coordinated.coordination.messages import ForwardedRequest, ForwardedResponse
from coordinated.coordination.reads import ReadService
from coordinated.coordination.requests import action_of
from coordinated.coordination.requests.base import Runs
from coordinated.coordination.requests.keys import barrier_answer
from coordinated.coordination.settings import enum_setting
from coordinated.coordination.state import ClusterState, DiscoveryNode
from coordinated.coordination.status import BlockLevel
from coordinated.coordination.tasks import ClientTask

NO_MASTER_BLOCK = enum_setting(
    "cluster.no_master_block",
    BlockLevel.WRITE,
    dynamic=True,
    doc="what is refused without a master: `write` (writes), `metadata_write` or `all` (reads too)",
)

Reply = Callable[[ClientResult], None]


class ClientRequests:
    """Routes client requests; on the master it is what a request's own procedure runs on (`requests.base.Master`)."""

    def __init__(
        self,
        ctx: CoreContext,
        *,
        leader: Callable[[], DiscoveryNode | None],
        submit_task: Callable[[Task], None],  # add a master task and run the master service
        forwarder: Forwarder,
        reads: ReadService,
        exclusion_waits: ExclusionWaits,
        renew_session: Callable[[str, int, Reply], None],  # a keepalive that reached the master then
    ) -> None:
        self.versions = ctx.versions
        self.ctx = ctx
        self.leader = leader
        self.submit_task = submit_task
        self.forwarder = forwarder
        self.reads = reads
        self.exclusion_waits = exclusion_waits
        self.renew_session = renew_session

    def handle(self, request: ClientRequest[Any], reply: Reply, timeout: int, forwarded: bool) -> None:
        refusal = self._feature_refusal(request)
        if refusal is not None:
            reply(refusal)
            return
        mode, leader = self.ctx.mode(), self.leader()
        if mode is Mode.LEADER:
            self._execute_on_master(request, reply, timeout)
            return
        if mode is Mode.FOLLOWER and leader is not None and not forwarded:
            self.forwarder.forward(leader, request, reply, timeout)
            return
        if forwarded:
            reply(client.not_master_error("this node is not the master"))
            return
        # Without a master nothing can be written, and no read is linearizable: a read of this node's applied
        # state, however stale, is the shell's `local` read, not a client request of the core.
        reply(client.no_master_error(self.ctx.settings[NO_MASTER_BLOCK].value))

    def _feature_refusal(self, request: ClientRequest[Any]) -> ClusterError | None:
        """A request that needs a feature some node of the cluster lacks (as far as this node knows) is refused
        at once, before it is forwarded to a master that may not decode it; the master checks again."""
        for feature in required_features(request):
            state = self.ctx.accepted
            if not self.versions.enabled(feature, state):
                return feature_not_available(feature, self.versions.lacking(feature, state))
        return None

    def on_forwarded_request(self, sender: str, request: ForwardedRequest) -> None:
        def reply(result: ClientResult) -> None:
            self.ctx.send(sender, ForwardedResponse(request.request_id, result))

        self.handle(request.request, reply, request.timeout_ms, forwarded=True)

    def _execute_on_master(self, request: ClientRequest[Any], reply: Reply, timeout: int) -> None:
        action = action_of(request)
        # Every request is checked here too, forwarded or not: a peer may have skipped the API's checks.
        problem = action.validate(request, self.ctx.accepted, self.ctx.settings)
        if problem is not None:
            reply(client.bad_request(problem))
            return
        deadline = self.ctx.now + timeout
        if action.on_master is not None:
            action.on_master(request, reply, deadline, self)
        else:
            self.run(request, reply, deadline)

    # -- what a request's own procedure may do on the master (requests.base.Master) -------------------------

    @property
    def now(self) -> int:
        return self.ctx.now

    @property
    def state(self) -> ClusterState:
        return self.ctx.accepted

    def run(self, request: ClientRequest[Any], reply: Reply, deadline: int, source: str | None = None) -> None:
        action = action_of(request)
        if action.runs is Runs.READ:
            read = action.read
            assert read is not None  # a read round without an answer has a procedure of its own
            self.reads.submit(lambda state: read(request, state), reply)
            return
        if action.confirm_unwritten:
            reply = self._confirmed_if_unwritten(reply, self.ctx.accepted.version)
        task = Task(source or action.source(request), action.priority, ClientTask(request), reply, deadline)
        self.submit_task(task)

    def confirm(self, reply: Reply) -> None:
        self.reads.submit(barrier_answer, reply)

    def until_out_of_config(
        self, node_names: tuple[str, ...], node_ids: tuple[str, ...], reply: Reply, deadline: int
    ) -> None:
        self.exclusion_waits.until_out_of_config(node_names, node_ids, reply, deadline)

    def until_removed(self, then: Reply, deadline: int) -> None:
        self.exclusion_waits.until_removed(then, deadline)

    def _confirmed_if_unwritten(self, reply: Reply, accepted_version: int) -> Reply:
        """A conflict, a missing session, a transaction that wrote nothing, or a write that changed nothing (the
        delete of a missing key, a prefix with no key under it), is answered from the master's state without a
        publication; like a read, it is linearizable only once the master has confirmed it still leads. A write
        that changed something commits a state above `accepted_version`, the one the request arrived at."""

        def confirmed_reply(result: ClientResult) -> None:
            unwritten = (
                (isinstance(result, TxnResult) and not result.wrote())
                or (isinstance(result, ClusterError) and result.status in (404, 409))
                or (isinstance(result, Committed) and result.version <= accepted_version)
            )
            if not unwritten:
                reply(result)
                return

            def after_barrier(barrier: ClientResult) -> None:
                reply(result if isinstance(barrier, Committed) else barrier)

            self.confirm(after_barrier)

        return confirmed_reply
