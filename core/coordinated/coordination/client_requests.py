"""Where a client request goes: the master runs it (a read round, a master task, an exclusion wait), a
follower forwards it to its master, and a node without a master answers it according to
`cluster.no_master_block`.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinated.coordination import client
from coordinated.coordination.applied_waits import AppliedWaits
from coordinated.coordination.authorization import Authorizer, SessionView, request_denial
from coordinated.coordination.client import (
    AddVotingConfigExclusions,
    Authenticated,
    ClearVotingConfigExclusions,
    ClientRequest,
    ClientResult,
    ClusterError,
    Committed,
    KvDelete,
    KvDeletePrefix,
    KvGet,
    KvPut,
    Principal,
    ReadBarrier,
    SessionEnd,
    SessionKeepAlive,
    Submitted,
    Txn,
    TxnResult,
    UpdateSettings,
)
from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.exclusion_waits import ExclusionWaits
from coordinated.coordination.forwarding import Forwarder
from coordinated.coordination.master_service import Priority, Task
from coordinated.coordination.messages import ForwardedRequest, ForwardedResponse
from coordinated.coordination.reads import ReadService
from coordinated.coordination.security_tasks import security_request_problem
from coordinated.coordination.settings import choice_setting
from coordinated.coordination.state import DiscoveryNode
from coordinated.coordination.tasks import ClientTask
from coordinated.coordination.validation import request_problem

NO_MASTER_BLOCK = choice_setting(
    "cluster.no_master_block",
    "write",
    client.NO_MASTER_BLOCKS,
    dynamic=True,
    doc="what is refused without a master: `write` (writes), `metadata_write` or `all` (reads too)",
)

Reply = Callable[[ClientResult], None]


class ClientRequests:
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
        applied_version: Callable[[str], int] = lambda node_id: 0,  # the newest a follower applied, as known here
    ) -> None:
        self.ctx = ctx
        self.leader = leader
        self.submit_task = submit_task
        self.forwarder = forwarder
        self.reads = reads
        self.exclusion_waits = exclusion_waits
        self.renew_session = renew_session
        # Changes of roles, role mappings and quotas answer once every node has applied them.
        self.applied_waits = AppliedWaits(ctx, applied_version)
        self.authorizer = Authorizer()  # principals' permissions by the roles of the master's newest state

    def check_waits(self) -> None:
        """The master's waits for the effects of a change: voting exclusions, and changes every node applied."""
        self.exclusion_waits.check()
        self.applied_waits.check()

    def close_waits(self, reason: str) -> None:
        self.exclusion_waits.close(reason)
        self.applied_waits.close()

    def handle(
        self, submitted: Submitted, reply: Reply, timeout: int, forwarded: bool, principal: Principal | None = None
    ) -> None:
        """`principal` (or that of an `Authenticated` request): who the request is made as (None: nobody in
        particular, when the client port authenticates nobody); the master authorizes the request for it."""
        request: ClientRequest = submitted.request if isinstance(submitted, Authenticated) else submitted
        if isinstance(submitted, Authenticated):
            principal = submitted.principal
        mode, leader = self.ctx.mode(), self.leader()
        if mode is Mode.LEADER:
            self._execute_on_master(request, reply, timeout, principal)
            return
        if mode is Mode.FOLLOWER and leader is not None and not forwarded:
            self.forwarder.forward(leader, request, reply, timeout, principal)
            return
        if forwarded:
            reply(client.not_master_error("this node is not the master"))
            return
        # Without a master nothing can be written, and no read is linearizable: a read of this node's applied
        # state, however stale, is the shell's `local` read, not a client request of the core.
        reply(client.no_master_error(self.ctx.settings[NO_MASTER_BLOCK]))

    def on_forwarded_request(self, sender: str, request: ForwardedRequest) -> None:
        def reply(result: ClientResult) -> None:
            self.ctx.send(sender, ForwardedResponse(request.request_id, result))

        self.handle(request.request, reply, request.timeout_ms, forwarded=True, principal=request.principal)

    def _execute_on_master(
        self, request: ClientRequest, reply: Reply, timeout: int, principal: Principal | None
    ) -> None:
        # Every request is checked here too, forwarded or not: a peer may have skipped the API's checks.
        problem = request_problem(request, self.ctx.accepted, self.ctx.settings) or security_request_problem(request)
        if problem is not None:
            reply(client.bad_request(problem))
            return
        if isinstance(request, KvGet | SessionKeepAlive) and principal is not None:
            # Authorized against the master's newest state; a task is authorized in its batch instead.
            denied = self._denial(request, principal)
            if denied is not None:
                reply(denied)
                return
        if isinstance(request, KvGet | ReadBarrier):
            self.reads.submit(request, reply)
            return
        if isinstance(request, SessionKeepAlive):
            self._keepalive(request.session, reply)
            return
        deadline = self.ctx.now + timeout
        if isinstance(request, client.SECURITY_REQUESTS):
            # Answered once every node has applied the change (or at the deadline, not acknowledged).
            waits, committed_reply = self.applied_waits, reply

            def reply(result: ClientResult) -> None:
                waits.until_applied(result, committed_reply, deadline)

        if isinstance(request, ClearVotingConfigExclusions) and request.wait_for_removal:
            state = self.ctx.accepted
            if any(node_id in state.nodes for node_id in state.coordination.excluded_ids()):

                def when_removed(result: ClientResult) -> None:
                    if isinstance(result, ClusterError):
                        reply(result)
                        return
                    source = "clear-voting-config-exclusions"
                    self.submit_task(Task(source, Priority.URGENT, ClientTask(request, principal), reply, deadline))

                self.exclusion_waits.until_removed(when_removed, deadline)
                return
        if isinstance(request, AddVotingConfigExclusions):
            inner = reply

            def reply(result: ClientResult, request: AddVotingConfigExclusions = request) -> None:
                if isinstance(result, Committed):
                    self.exclusion_waits.until_out_of_config(request, inner, deadline)
                else:
                    inner(result)

        if isinstance(request, Txn | KvPut | KvDelete | KvDeletePrefix | SessionEnd):
            reply = self._confirmed_if_unwritten(reply, self.ctx.accepted.version)
        priority = (
            Priority.URGENT
            if isinstance(request, AddVotingConfigExclusions | ClearVotingConfigExclusions)
            else (Priority.HIGH if isinstance(request, UpdateSettings | client.SecurityRequest) else Priority.NORMAL)
        )
        self.submit_task(Task(_describe(request), priority, ClientTask(request, principal), reply, deadline))

    def _denial(self, request: ClientRequest, principal: Principal) -> ClusterError | None:
        state = self.ctx.accepted

        def session_of(session_id: str) -> SessionView | None:
            session = state.sessions.get(session_id)
            return None if session is None else SessionView(session.owner, session.prefix)

        permissions = self.authorizer.permissions(principal, state.security_metadata())
        return request_denial(request, permissions, session_of)

    def _keepalive(self, session: str, reply: Reply) -> None:
        """Renewed on this master, but only once it has confirmed with a quorum that it still leads (as etcd
        does since a deposed leader renewed leases): a deposed master cannot acknowledge a keepalive that the
        new master never hears of. The renewal counts from the arrival; the leases answer it (sessions.py)."""
        arrived = self.ctx.now
        if session not in self.ctx.accepted.sessions:
            self.reads.submit(ReadBarrier(), lambda barrier: reply(_unless_error(barrier, session)))
            return

        def after_barrier(barrier: ClientResult) -> None:
            if not isinstance(barrier, Committed):
                reply(barrier)
                return
            self.renew_session(session, arrived, reply)

        self.reads.submit(ReadBarrier(), after_barrier)

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

            self.reads.submit(ReadBarrier(), after_barrier)

        return confirmed_reply


def _unless_error(barrier: ClientResult, session: str) -> ClientResult:
    """A session this master does not hold is not found, once the master has confirmed that it leads."""
    return barrier if isinstance(barrier, ClusterError) else client.session_not_found_error(session)


def _describe(request: ClientRequest) -> str:
    if isinstance(request, KvPut | KvDelete | KvGet):
        return f"{type(request).__name__} [{request.key}]"
    if isinstance(request, KvDeletePrefix):
        return f"KvDeletePrefix [{request.prefix}]"
    if isinstance(request, Txn):
        return f"Txn [{len(request.compare)} compares, {len(request.success)}/{len(request.failure)} ops]"
    return type(request).__name__
