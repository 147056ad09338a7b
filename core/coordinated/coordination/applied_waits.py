"""Answers the master holds until every node of the cluster has applied a state, as Elasticsearch's
`acknowledged`: a change of roles, role mappings or quotas answers `acknowledged: true` once every node in the
cluster has applied the state that carries it, so that no node serves by the old rules after the answer; or
`acknowledged: false` at the request's deadline (a node that has not applied it yet; the change is committed
all the same, and that node applies it, or the master removes it from the cluster, within
`cluster.follower_lag.timeout`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from msgspec.structs import replace

from coordinated.coordination.client import ClientResult, Committed
from coordinated.coordination.context import CoreContext

Reply = Callable[[ClientResult], None]


@dataclass
class _Wait:
    result: Committed
    deadline: int
    reply: Reply


class AppliedWaits:
    def __init__(self, ctx: CoreContext, applied: Callable[[str], int]) -> None:
        """`applied(node_id)`: the newest version another node has applied, as far as this master knows (its
        apply-commit answers). The master itself answers only what it has applied."""
        self.ctx = ctx
        self.applied = applied
        self.waits: list[_Wait] = []

    def until_applied(self, result: ClientResult, reply: Reply, deadline: int) -> None:
        """Reply with `result` once every node has applied its version (a Committed: with `acknowledged`)."""
        if not isinstance(result, Committed):
            reply(result)
            return
        self.waits.append(_Wait(result, deadline, reply))
        self.check()

    def all_applied(self, version: int) -> bool:
        own = self.ctx.local_node.id
        return all(node_id == own or self.applied(node_id) >= version for node_id in self.ctx.accepted.nodes)

    def check(self) -> None:
        if not self.waits:
            return
        ctx = self.ctx
        remaining: list[_Wait] = []
        for wait in self.waits:
            if self.all_applied(wait.result.version):
                wait.reply(replace(wait.result, acknowledged=True))
            elif wait.deadline <= ctx.now:
                wait.reply(replace(wait.result, acknowledged=False))
            else:
                remaining.append(wait)
        self.waits = remaining
        if remaining:
            ctx.timers.schedule(self, min(wait.deadline for wait in remaining), self.check)
        else:
            ctx.timers.cancel(self)

    def close(self) -> None:
        """No longer master: the changes are committed, but whether every node applied them is not known."""
        for wait in self.waits:
            wait.reply(replace(wait.result, acknowledged=False))
        self.waits = []
        self.ctx.timers.cancel(self)
