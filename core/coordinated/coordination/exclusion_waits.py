"""Waiting on the master for the effects of voting config exclusions.

Adding exclusions answers once the excluded nodes have left both voting configurations; clearing them
with `wait_for_removal` starts once the excluded nodes have left the cluster. Each wait has the client's
deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinated.coordination import client
from coordinated.coordination.client import ClientResult, Committed
from coordinated.coordination.context import CoreContext

Reply = Callable[[ClientResult], None]


@dataclass
class _ExclusionWait:
    node_ids: frozenset[str]
    deadline: int
    reply: Reply


class ExclusionWaits:
    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.exclusion_waits: list[_ExclusionWait] = []
        self.removal_waits: list[tuple[int, Reply]] = []  # (deadline, reply)

    def until_out_of_config(
        self, node_names: tuple[str, ...], node_ids: tuple[str, ...], reply: Reply, deadline: int
    ) -> None:
        state = self.ctx.accepted
        by_name = {e.node_name: e.node_id for e in state.coordination.voting_config_exclusions}
        ids = frozenset([by_name.get(name, name) for name in node_names] + list(node_ids))
        self.exclusion_waits.append(_ExclusionWait(ids, deadline, reply))
        self.check()

    def until_removed(self, then: Reply, deadline: int) -> None:
        """Call `then` with Committed once no excluded node is in the cluster, or with the error."""
        self.removal_waits.append((deadline, then))
        self.check()

    def check(self) -> None:
        ctx = self.ctx
        state = ctx.accepted
        config_ids = set(state.last_committed_config.node_ids) | set(state.last_accepted_config.node_ids)
        remaining: list[_ExclusionWait] = []
        for wait in self.exclusion_waits:
            if not (wait.node_ids & config_ids):
                wait.reply(Committed(state.term, state.version))
            elif wait.deadline <= ctx.now:
                wait.reply(
                    client.timeout_error(
                        f"timed out waiting for voting config exclusions {sorted(wait.node_ids)} to take effect"
                    )
                )
            else:
                remaining.append(wait)
        self.exclusion_waits = remaining
        excluded = state.coordination.excluded_ids()
        still_present = any(node_id in state.nodes for node_id in excluded)
        removal_remaining = []
        for deadline, reply in self.removal_waits:
            if not still_present:
                reply(Committed(state.term, state.version))
            elif deadline <= ctx.now:
                reply(client.timeout_error("timed out waiting for the excluded nodes to leave the cluster"))
            else:
                removal_remaining.append((deadline, reply))
        self.removal_waits = removal_remaining
        deadlines = [w.deadline for w in self.exclusion_waits] + [d for d, _ in self.removal_waits]
        if deadlines:
            ctx.timers.schedule(self, min(deadlines), self.check)
        else:
            ctx.timers.cancel(self)

    def close(self, reason: str) -> None:
        for wait in self.exclusion_waits:
            wait.reply(client.not_master_error(reason))
        self.exclusion_waits.clear()
        for _, reply in self.removal_waits:
            reply(client.not_master_error(reason))
        self.removal_waits.clear()
        self.ctx.timers.cancel(self)
