"""Fault detection on a follower, as Elasticsearch's LeaderChecker: check the master at
`cluster.fault_detection.leader_check.interval`; after `retry_count` consecutive failures, or a rejection,
the follower becomes a candidate again. A checker is made for one master and closed when it is left.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinated.coordination.context import CoreContext
from coordinated.coordination.messages import LeaderCheck, LeaderCheckResponse
from coordinated.coordination.settings import int_setting, time_setting
from coordinated.coordination.state import ClusterState, DiscoveryNode

# Lower bounds as in Elasticsearch's LeaderChecker.
LEADER_CHECK_INTERVAL = time_setting(
    "cluster.fault_detection.leader_check.interval",
    "1s",
    minimum="100ms",
    maximum="1m",
    doc="followers check the master this often",
)
LEADER_CHECK_TIMEOUT = time_setting(
    "cluster.fault_detection.leader_check.timeout",
    "10s",
    minimum="1ms",
    maximum="5m",
    doc="a leader check fails after this long",
)
LEADER_CHECK_RETRY_COUNT = int_setting(
    "cluster.fault_detection.leader_check.retry_count",
    3,
    minimum=1,
    maximum=100,
    doc="failed leader checks in a row before a new election",
)


class LeaderChecker:
    def __init__(self, ctx: CoreContext, leader: DiscoveryNode, on_leader_failed: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.leader = leader
        self.on_leader_failed = on_leader_failed
        self.failures = 0
        # The check awaiting an answer (0: none). A check sent to a previous master is not this checker's.
        self.request_id = 0
        self.closed = False
        ctx.timers.schedule((self, "check"), ctx.now + ctx.settings[LEADER_CHECK_INTERVAL], self._send)

    def close(self) -> None:
        self.closed = True
        self.ctx.timers.cancel((self, "check"))
        self.ctx.timers.cancel((self, "timeout"))

    def _send(self) -> None:
        if self.closed:
            return
        ctx = self.ctx
        self.request_id = ctx.new_request_id()
        ctx.send(self.leader.transport_address, LeaderCheck(ctx.local_node.id, self.request_id))
        request_id = self.request_id
        ctx.timers.schedule(
            (self, "timeout"), ctx.now + ctx.settings[LEADER_CHECK_TIMEOUT], lambda: self._failed(request_id)
        )

    def _failed(self, request_id: int) -> None:
        if self.closed or request_id != self.request_id:
            return
        self.failures += 1
        if self.failures >= self.ctx.settings[LEADER_CHECK_RETRY_COUNT]:
            self.on_leader_failed(f"leader failed {self.failures} consecutive checks")
        else:
            self._send()

    def on_response(self, response: LeaderCheckResponse) -> None:
        if self.closed or response.request_id != self.request_id:
            return
        self.ctx.timers.cancel((self, "timeout"))
        if not response.ok:
            self.on_leader_failed(f"leader rejected the check: {response.reason}")
            return
        self.failures = 0
        self.ctx.timers.schedule((self, "check"), self.ctx.now + self.ctx.settings[LEADER_CHECK_INTERVAL], self._send)


def answer_leader_check(request: LeaderCheck, leading: bool, state: ClusterState) -> LeaderCheckResponse:
    """The master's side: yes while it leads a cluster that has the checking node."""
    if not leading:
        return LeaderCheckResponse(request.request_id, ok=False, reason="this node is no longer the master")
    if request.source_id not in state.nodes:
        return LeaderCheckResponse(request.request_id, ok=False, reason="the node is not in the cluster")
    return LeaderCheckResponse(request.request_id, ok=True)
