"""Forming a cluster: ClusterBootstrapService (the first voting configuration, from
`cluster.initial_master_nodes`) and ClusterFormationFailureHelper (why this node has no master yet,
logged every `discovery.cluster_formation_warning_timeout` while it is a candidate).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from msgspec.structs import replace

from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.joins import JoinRejection
from coordinated.coordination.safety import CoordinationStateRejected
from coordinated.coordination.settings import NodeNames, Setting, time_setting
from coordinated.coordination.state import ClusterState, DiscoveryNode, VotingConfiguration

INITIAL_MASTER_NODES = Setting(
    "cluster.initial_master_nodes",
    NodeNames(),
    "",
    "node names for the very first election of a new cluster; ignored once a node has joined a cluster",
)
CLUSTER_FORMATION_WARNING_TIMEOUT = time_setting(
    "discovery.cluster_formation_warning_timeout",
    "10s",
    minimum="1ms",
    maximum="1h",
    doc="how long without a master before the node logs why",
)


class ClusterBootstrapService:
    def __init__(self, ctx: CoreContext, set_initial_state: Callable[[ClusterState], None]) -> None:
        self.ctx = ctx
        self.set_initial_state = set_initial_state

    def maybe_bootstrap(self, discovered: Collection[DiscoveryNode], seen_terms: Collection[int]) -> None:
        ctx = self.ctx
        names = ctx.base_settings[INITIAL_MASTER_NODES]
        state = ctx.accepted
        if not names or not ctx.local_node.master_eligible or not state.last_accepted_config.is_empty():
            return
        if ctx.local_node.name not in names:
            return
        if any(term > 0 for term in seen_terms) or ctx.current_term > 0:
            return  # a cluster exists already: join it rather than bootstrap another
        by_name = {node.name: node for node in discovered if node.master_eligible}
        if not all(name in by_name for name in names):
            return
        config = VotingConfiguration.of(by_name[name].id for name in names)
        initial = state.replace(
            coordination=replace(state.coordination, last_committed_config=config, last_accepted_config=config)
        )
        try:
            self.set_initial_state(initial)
        except (CoordinationStateRejected, OSError) as error:
            ctx.log("warning", f"bootstrap failed: {error}")
            return
        ctx.log("info", f"bootstrapped with initial voting configuration {list(config.node_ids)}")


class ClusterFormationFailureHelper:
    def __init__(
        self,
        ctx: CoreContext,
        discovered: Callable[[], list[DiscoveryNode]],
        unreachable: Callable[[], Collection[str]],
        join_rejection: Callable[[], JoinRejection | None] = lambda: None,
    ) -> None:
        self.ctx = ctx
        self.discovered = discovered
        self.unreachable = unreachable
        self.join_rejection = join_rejection

    def activate(self) -> None:
        ctx = self.ctx
        ctx.timers.schedule(self, ctx.now + ctx.settings[CLUSTER_FORMATION_WARNING_TIMEOUT], self._warn)

    def deactivate(self) -> None:
        self.ctx.timers.cancel(self)

    def _warn(self) -> None:
        problem = self.problem()
        if problem:
            self.ctx.log("warning", problem)
            self.activate()

    def problem(self) -> str | None:
        """Why this node has not joined a cluster, or None if it has a master."""
        ctx = self.ctx
        if ctx.mode() is not Mode.CANDIDATE:
            return None
        state = ctx.accepted
        reasons: list[str] = []
        if not ctx.local_node.master_eligible:
            reasons.append("this node is not master-eligible and has not discovered a master")
        elif state.last_accepted_config.is_empty():
            names = ctx.base_settings[INITIAL_MASTER_NODES]
            if not names:
                reasons.append(
                    "this node has not joined a bootstrapped cluster and cluster.initial_master_nodes is empty"
                )
            else:
                found = {node.name for node in self.discovered()}
                missing = sorted(set(names) - found)
                reasons.append(
                    f"cluster bootstrap is waiting for cluster.initial_master_nodes {list(names)}; "
                    f"not yet discovered: {missing}"
                )
        else:
            found_ids = {node.id for node in self.discovered()}
            for label, config in (
                ("last committed", state.last_committed_config),
                ("last accepted", state.last_accepted_config),
            ):
                if not config.has_quorum(found_ids):
                    missing = [node_id for node_id in config.node_ids if node_id not in found_ids]
                    reasons.append(
                        f"an election needs a quorum of the {label} voting configuration {list(config.node_ids)}; "
                        f"missing {missing}"
                    )
            if not reasons:
                reasons.append(f"an election is in progress (current term {ctx.current_term})")
        unreachable = self.unreachable()
        if unreachable:
            reasons.append(f"cannot reach {sorted(unreachable)}")
        rejection = self.join_rejection()
        if rejection is not None:
            reasons.append(rejection.describe())
        return "master not discovered yet: " + "; ".join(reasons)
