"""What the master does with a batch of tasks: one new cluster state (or none) and a result per task.

Pure functions: the coordinator supplies the node, the term and the join votes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from msgspec.structs import replace

from coordinated.coordination import client
from coordinated.coordination.client import (
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    ClientResult,
    KvDelete,
    KvPut,
    UpdateSettings,
)
from coordinated.coordination.history import NO_CLUSTER_UUID
from coordinated.coordination.reconfigurator import reconfigure
from coordinated.coordination.state import (
    LEGACY_KEY_VERSION,
    ClusterState,
    DiscoveryNode,
    KeyVersion,
    VotingConfigExclusion,
)
from coordinated.coordination.tasks import ClientTask, ElectedAsMaster, NodeJoin, NodeLeft, TaskPayload
from coordinated.coordination.validation import ABSENT_PREFIX, exclusions_problem, resolve_exclusions


@dataclass(frozen=True)
class BatchContext:
    master: DiscoveryNode
    term: int
    voters: Collection[str]  # nodes whose join votes the master holds in this term
    max_exclusions: int
    auto_shrink: bool
    new_uuid: Callable[[], str]


def improve_configuration(
    state: ClusterState, master_id: str, voters: Collection[str], auto_shrink: bool
) -> ClusterState:
    """The state with the best voting configuration the master may move to now (maybe unchanged).

    Only nodes that voted for this master in this term count as live, and the move needs their quorum.
    """
    coordination = state.coordination
    if coordination.last_committed_config != coordination.last_accepted_config:
        return state  # one reconfiguration at a time
    excluded = coordination.excluded_ids()
    live = {
        node.id
        for node in state.nodes.values()
        if node.master_eligible and node.id in voters and node.id not in excluded
    }
    current = coordination.last_accepted_config
    new_config = reconfigure(live, excluded, master_id, current, auto_shrink)
    if new_config == current or not new_config.has_quorum(voters):
        return state
    return state.replace(coordination=replace(coordination, last_accepted_config=new_config))


def add_exclusions(
    request: AddVotingConfigExclusions,
    nodes: dict[str, DiscoveryNode],
    exclusions: list[VotingConfigExclusion],
    limit: int,
) -> ClientResult | None:
    # Checked again against the state of this batch: an earlier task may have added exclusions.
    problem = exclusions_problem(request, nodes, exclusions, limit)
    if problem is not None:
        return client.bad_request(problem)
    existing = {exclusion.node_id for exclusion in exclusions}
    for exclusion in resolve_exclusions(request, nodes):
        if exclusion.node_id not in existing:
            existing.add(exclusion.node_id)
            exclusions.append(exclusion)
    return None


def _join(node: DiscoveryNode, nodes: dict[str, DiscoveryNode], exclusions: list[VotingConfigExclusion]) -> None:
    for other_id, other in list(nodes.items()):
        if other.transport_address == node.transport_address and other_id != node.id:
            del nodes[other_id]  # a restarted node with a new id at the same address
    nodes[node.id] = node
    for index, exclusion in enumerate(exclusions):
        if exclusion.node_id == f"{ABSENT_PREFIX}{node.name}":
            exclusions[index] = VotingConfigExclusion(node.id, node.name)


def _key_version(kv: Mapping[str, Any], kv_versions: Mapping[str, KeyVersion], key: str) -> int:
    """The key's version in the state being built; 0 if it does not exist."""
    if key not in kv:
        return 0
    return kv_versions.get(key, LEGACY_KEY_VERSION).version


def execute_batch(
    base: ClusterState, payloads: list[TaskPayload], context: BatchContext
) -> tuple[ClusterState | None, list[ClientResult | None]]:
    """Apply every task to the base state. Returns (None, results) if nothing changed.

    A task's result is None when it succeeds with the publication. `Reconfigure` needs no step of its own:
    every batch moves to the best voting configuration.
    """
    nodes = dict(base.nodes)
    kv = base.kv
    kv_versions = base.kv_versions
    new_version = base.version + 1  # of the state this batch builds, if it changes anything
    settings = base.persistent_settings
    exclusions = list(base.coordination.voting_config_exclusions)
    results: list[ClientResult | None] = []
    elected = False
    for task in payloads:
        result: ClientResult | None = None
        if isinstance(task, ElectedAsMaster):
            elected = True
            nodes[context.master.id] = context.master
        elif isinstance(task, NodeJoin):
            _join(task.node, nodes, exclusions)
        elif isinstance(task, NodeLeft):
            nodes.pop(task.node_id, None)
        elif isinstance(task, ClientTask):
            payload = task.request
            if isinstance(payload, KvPut | KvDelete):
                # Decided against the state this batch builds, so of two conflicting conditional writes in
                # one batch only the first applies.
                current = _key_version(kv, kv_versions, payload.key)
                if payload.if_version is not None and payload.if_version != current:
                    result = client.version_conflict_error(payload.key, payload.if_version, current)
                else:
                    if kv is base.kv:
                        kv, kv_versions = dict(kv), dict(kv_versions)
                    if isinstance(payload, KvPut):
                        created = kv_versions.get(payload.key) if current else None
                        create_version = new_version if not current else (created or LEGACY_KEY_VERSION).create_version
                        kv[payload.key] = payload.value
                        kv_versions[payload.key] = KeyVersion(new_version, create_version)
                    else:
                        kv.pop(payload.key, None)
                        kv_versions.pop(payload.key, None)
            elif isinstance(payload, UpdateSettings):
                settings = {k: v for k, v in {**settings, **payload.persistent}.items() if v is not None}
            elif isinstance(payload, AddVotingConfigExclusions):
                result = add_exclusions(payload, nodes, exclusions, context.max_exclusions)
            elif isinstance(payload, ClearVotingConfigExclusions):
                exclusions = []
        results.append(result)
    candidate = base.replace(
        master_node=context.master.id,
        nodes=nodes,
        kv=kv,
        kv_versions=kv_versions,
        persistent_settings=settings,
        coordination=replace(base.coordination, voting_config_exclusions=tuple(exclusions)),
    )
    candidate = improve_configuration(candidate, context.master.id, context.voters, context.auto_shrink)
    changed = elected or (
        candidate.nodes != base.nodes
        or kv != base.kv
        or kv_versions != base.kv_versions
        or candidate.persistent_settings != base.persistent_settings
        or candidate.coordination != base.coordination
        or candidate.master_node != base.master_node
    )
    if not changed:
        return None, results
    new_state = candidate.replace(
        cluster_uuid=context.new_uuid() if base.cluster_uuid == NO_CLUSTER_UUID else base.cluster_uuid,
        version=base.version + 1,
        state_uuid=context.new_uuid(),
        parent_uuid=base.state_uuid,
        coordination=replace(candidate.coordination, term=context.term),
    )
    return new_state, results
