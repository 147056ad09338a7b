"""Client requests on a node that is not the master: forward them to the master and relay its answer.

Each forwarded request is a round of its own: it ends with the master's answer, a lost connection, the
client's timeout, or a change of master.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coordinated.coordination import client
from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError
from coordinated.coordination.context import CoreContext
from coordinated.coordination.messages import ForwardedRequest, ForwardedResponse
from coordinated.coordination.state import DiscoveryNode

Reply = Callable[[ClientResult], None]


class Forwarder:
    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.waiting: dict[int, Reply] = {}  # forward id -> the client's reply

    def forward(self, master: DiscoveryNode, request: ClientRequest[Any], reply: Reply, timeout: int) -> None:
        ctx = self.ctx
        forward_id = ctx.new_request_id()
        self.waiting[forward_id] = reply
        ctx.send(master.transport_address, ForwardedRequest(ctx.local_node.id, forward_id, request, timeout))
        ctx.timers.schedule((self, forward_id), ctx.now + timeout, lambda: self._timed_out(forward_id))

    def finish(self, forward_id: int, result: ClientResult) -> None:
        reply = self.waiting.pop(forward_id, None)
        if reply is not None:
            self.ctx.timers.cancel((self, forward_id))
            reply(result)

    def on_response(self, response: ForwardedResponse) -> None:
        self.finish(response.request_id, response.result)

    def on_send_failure(self, message: ForwardedRequest) -> None:
        self.finish(
            message.request_id, client.not_master_error("lost the connection to the master", maybe_applied=True)
        )

    def _timed_out(self, forward_id: int) -> None:
        timed_out = ClusterError(
            type="timeout_exception", reason="no answer from the master in time", status=503, maybe_applied=True
        )
        self.finish(forward_id, timed_out)

    def fail_all(self, reason: str) -> None:
        for forward_id in list(self.waiting):
            self.finish(forward_id, client.not_master_error(reason, maybe_applied=True))
