"""Linearizable reads on the master: confirm leadership with a quorum of both voting configurations
(a leadership probe), then answer from the state that was applied when the round started.

A round starts only once the master has applied every state it committed (`ready`): with
`cluster.publish.master_applies_last` a follower applies a committed state before the master does, and a
read that a node serves after a barrier (a range read, `GET /_cluster/state`) may already show it; a read on
the master that starts later must show it too. A read barrier answers that applied version: a node that has
applied it holds every state committed before the barrier began. Each read is answered by a function of the
state the round confirmed (its request type's `read`).

Reads that arrive while a round is in flight wait for the next round. A round ends when confirmed, timed
out (`cluster.fault_detection.leader_check.timeout`) or closed.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinated.coordination import client
from coordinated.coordination.client import ClientResult
from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.leader_checker import LEADER_CHECK_TIMEOUT
from coordinated.coordination.messages import LeadershipProbe, LeadershipProbeResponse
from coordinated.coordination.quorum import joint_quorum
from coordinated.coordination.state import ClusterState

Reply = Callable[[ClientResult], None]
Answer = Callable[[ClusterState], ClientResult]  # a read's answer, from the state its round confirmed


class ReadRound:
    def __init__(
        self, round_id: int, term: int, reads: list[tuple[Answer, ClusterState, Reply]], local_id: str
    ) -> None:
        self.round_id = round_id
        self.term = term
        self.reads = reads
        self.confirmed = {local_id}


class ReadService:
    def __init__(self, ctx: CoreContext, applied_state: Callable[[], ClusterState], ready: Callable[[], bool]) -> None:
        self.ctx = ctx
        self.applied_state = applied_state
        self.ready = ready  # the master has applied a state of its own term: its applied state is current
        self.queue: list[tuple[Answer, Reply]] = []
        self.round: ReadRound | None = None

    def submit(self, answer: Answer, reply: Reply) -> None:
        self.queue.append((answer, reply))
        self.serve_if_possible()

    def serve_if_possible(self) -> None:
        ctx = self.ctx
        if ctx.mode() is not Mode.LEADER or not self.ready() or self.round is not None:
            return
        if not self.queue:
            return
        state = self.applied_state()
        reads = [(answer, state, reply) for answer, reply in self.queue]
        self.queue = []
        round_id = ctx.new_request_id()
        self.round = ReadRound(round_id, ctx.current_term, reads, ctx.local_node.id)
        probe = LeadershipProbe(ctx.local_node.id, ctx.current_term, round_id)
        config_ids = set(state.last_committed_config.node_ids) | set(state.last_accepted_config.node_ids)
        for node_id in sorted(config_ids):
            node = state.nodes.get(node_id)
            if node is not None and node_id != ctx.local_node.id:
                ctx.send(node.transport_address, probe)
        ctx.timers.schedule(self, ctx.now + ctx.settings[LEADER_CHECK_TIMEOUT], self._timed_out)
        self._check()

    def on_probe_response(self, response: LeadershipProbeResponse) -> None:
        read_round = self.round
        if read_round is None or response.request_id != read_round.round_id or not response.ok:
            return
        read_round.confirmed.add(response.source_id)
        self._check()

    def _check(self) -> None:
        ctx = self.ctx
        read_round = self.round
        if read_round is None or ctx.mode() is not Mode.LEADER or read_round.term != ctx.current_term:
            return
        state = ctx.accepted
        if not joint_quorum(state.last_committed_config, state.last_accepted_config, read_round.confirmed):
            return
        self.round = None
        ctx.timers.cancel(self)
        for answer, read_state, reply in read_round.reads:
            reply(answer(read_state))
        self.serve_if_possible()

    def _timed_out(self) -> None:
        read_round, self.round = self.round, None
        if read_round is None:
            return
        for _, _, reply in read_round.reads:
            reply(client.timeout_error("could not confirm leadership with a quorum in time"))
        self.serve_if_possible()

    def close(self, reason: str) -> None:
        """The node is no longer master: every waiting read fails."""
        read_round, self.round = self.round, None
        self.ctx.timers.cancel(self)
        replies = [reply for _, reply in self.queue]
        if read_round is not None:
            replies.extend(reply for _, _, reply in read_round.reads)
        self.queue = []
        for reply in replies:
            reply(client.not_master_error(reason))
