"""Choosing the voting configuration, as Elasticsearch's Reconfigurator does."""

from __future__ import annotations

from collections.abc import Collection

from coordinated.coordination.settings import bool_setting
from coordinated.coordination.state import VotingConfiguration

AUTO_SHRINK_VOTING_CONFIGURATION = bool_setting(
    "cluster.auto_shrink_voting_configuration",
    True,
    dynamic=True,
    doc="`true` removes departed nodes from the voting configuration (keeping at least 3 voters)",
)


def round_down_to_odd(size: int) -> int:
    return size - (size + 1) % 2


def reconfigure(
    live_node_ids: Collection[str],
    retired_node_ids: Collection[str],
    master_id: str,
    current: VotingConfiguration,
    auto_shrink: bool = True,
) -> VotingConfiguration:
    """The best configuration for these live master-eligible nodes, or `current` if it is not safe to move.

    Candidates are ranked master first, then live nodes, then current members, then by id. The size is the
    largest odd number of live, non-retired nodes; with auto-shrink it never falls below 3 once it had 3.
    A new configuration is adopted only if the live nodes form a quorum of it.
    """
    retired = set(retired_node_ids)
    live = {node_id for node_id in live_node_ids if node_id not in retired}
    in_current = {node_id for node_id in current.node_ids if node_id not in retired}
    candidates = sorted(
        live | in_current,
        key=lambda node_id: (node_id != master_id, node_id not in live, node_id not in in_current, node_id),
    )
    non_retired_config_size = len(in_current)
    minimum = min(3, non_retired_config_size) if auto_shrink else non_retired_config_size
    target = max(round_down_to_odd(len(live)), minimum)
    proposed = VotingConfiguration.of(candidates[:target])
    if proposed.has_quorum(live):
        return proposed
    return current
