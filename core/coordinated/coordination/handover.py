"""The master's care of its voting configuration, as Elasticsearch's Reconfigurator is used by the
Coordinator: move to the best configuration, start a new term when the best one needs votes this term
cannot give, and hand leadership over to a healthy node when this one is excluded or stopping.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinated.coordination.context import CoreContext
from coordinated.coordination.elections import ELECTION_MAX_TIMEOUT
from coordinated.coordination.quorum import joint_quorum
from coordinated.coordination.reconfigurator import AUTO_SHRINK_VOTING_CONFIGURATION, reconfigure
from coordinated.coordination.state import ClusterState, DiscoveryNode


class Handover:
    def __init__(
        self,
        ctx: CoreContext,
        *,
        applied_versions: Callable[[], dict[str, int]],  # node id -> the version it is known to have applied
        has_join_vote: Callable[[str], bool],
        improved: Callable[[ClusterState], ClusterState],  # the state with the best configuration it may move to
        start_election: Callable[[], None],
        abdicate_to: Callable[[DiscoveryNode], None],
    ) -> None:
        self.ctx = ctx
        self.applied_versions = applied_versions
        self.has_join_vote = has_join_vote
        self.improved = improved
        self.start_election = start_election
        self.abdicate_to = abdicate_to
        self.next_vote_collection_at = 0

    def local_node_may_win(self, state: ClusterState) -> bool:
        node_id = self.ctx.local_node.id
        return (
            node_id in state.last_committed_config
            or node_id in state.last_accepted_config
            or node_id not in state.coordination.excluded_ids()
        )

    def collect_missing_votes(self, state: ClusterState) -> bool:
        """Start a new term if the best configuration needs votes that this term cannot give.

        A node that rejoins in the master's current term, having voted for someone else in it, cannot vote
        for this master until the next term; without its vote it cannot enter the voting configuration.
        """
        ctx = self.ctx
        if ctx.now < self.next_vote_collection_at or state.last_committed_config != state.last_accepted_config:
            return False
        excluded = state.coordination.excluded_ids()
        healthy = {
            node.id
            for node in state.nodes.values()
            if node.master_eligible
            and node.id not in excluded
            and (node.id == ctx.local_node.id or self.applied_versions().get(node.id, 0) >= state.version)
        }
        desired = reconfigure(
            healthy,
            excluded,
            ctx.local_node.id,
            state.last_accepted_config,
            ctx.settings[AUTO_SHRINK_VOTING_CONFIGURATION],
        )
        if desired == state.last_accepted_config or self.improved(state) != state:
            return False
        missing = [node_id for node_id in desired.node_ids if not self.has_join_vote(node_id)]
        if not missing:
            return False
        self.next_vote_collection_at = ctx.now + ctx.settings[ELECTION_MAX_TIMEOUT]
        ctx.log("info", f"starting a new term to collect the votes of {missing} for the voting configuration")
        self.start_election()
        return True

    def abdicate_if_possible(self) -> bool:
        """Hand leadership over to a node that is not excluded and could win now, if there is one."""
        candidates = self.candidates(require_not_excluded=True)
        if candidates:
            self.abdicate_to(self.ctx.rng.choice(candidates))
        return bool(candidates)

    def candidates(self, require_not_excluded: bool) -> list[DiscoveryNode]:
        """Nodes that could take over now and win: they hold the latest state, and so do a quorum."""
        ctx = self.ctx
        state = ctx.accepted
        excluded = state.coordination.excluded_ids()
        candidates = []
        for node in state.nodes.values():
            if node.id == ctx.local_node.id or not node.master_eligible:
                continue
            if require_not_excluded and node.id in excluded:
                continue
            if self.applied_versions().get(node.id, 0) < state.version:
                continue  # it must hold the latest state to win
            if node.id in state.last_committed_config or node.id in state.last_accepted_config:
                candidates.append(node)
        # It must be able to win: every node that has applied the latest state would vote for it.
        voters = {node_id for node_id, version in self.applied_versions().items() if version >= state.version}
        voters.add(ctx.local_node.id)
        if not joint_quorum(state.last_committed_config, state.last_accepted_config, voters):
            return []
        return sorted(candidates, key=lambda node: node.id)
