"""What the master does with a batch of tasks: one new cluster state (or none) and a result per task.

Pure functions: the coordinator supplies the node, the term and the join votes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from msgspec.structs import replace

from coordinated.coordination import client
from coordinated.coordination.batch_draft import BatchContext, Draft, Result, first_oversized, state_too_large_error
from coordinated.coordination.batch_keys import BatchKeys
from coordinated.coordination.batch_writes import DEFERRED, Deferred, WriteClaims, Writes, deferrable
from coordinated.coordination.client import ClientResult, Committed, SessionInfo, TxnResult
from coordinated.coordination.history import NO_CLUSTER_UUID
from coordinated.coordination.reconfigurator import reconfigure
from coordinated.coordination.requests import action_of
from coordinated.coordination.requests.cluster import ABSENT_PREFIX
from coordinated.coordination.settings import size_setting
from coordinated.coordination.state import (
    ClusterState,
    DiscoveryNode,
    VotingConfigExclusion,
    diff_between,
    diff_maps,
)
from coordinated.coordination.tasks import (
    CheckpointSessions,
    ClientTask,
    ElectedAsMaster,
    ExpireSessions,
    NodeJoin,
    NodeLeft,
    Reconfigure,
    RefreshNodeVersions,
    TaskPayload,
)

# Ceilings on what clients can store, checked by the master against the state each batch builds. Every node holds
# the whole state in memory and a joining node receives all of it, in one peer message of at most 512mb: hence
# the largest ceiling. Settings changes and writes that shrink the state are never refused, so no value within
# the bounds can keep the cluster from resetting them; the floors catch a size given without its unit.
MAX_VALUE_SIZE = size_setting(
    "cluster.metadata.max_value_size",
    "1mb",
    minimum="64b",
    maximum="64mb",
    dynamic=True,
    doc="largest value of one key, JSON-encoded; a larger put gets 400 naming the sizes (a body also needs to fit "
    "`http.max_content_length`)",
)
MAX_STATE_SIZE = size_setting(
    "cluster.metadata.max_state_size",
    "256mb",
    minimum="1kb",
    maximum="256mb",
    dynamic=True,
    doc="ceiling on all keys and values together (UTF-8 names plus JSON values), decided by the master against the "
    "batch it builds; a write that would exceed it gets 400 naming the sizes",
)


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


def _join(
    node: DiscoveryNode, nodes: dict[str, DiscoveryNode], exclusions: list[VotingConfigExclusion], master: DiscoveryNode
) -> client.ClusterError | None:
    if node.transport_address == master.transport_address and node.id != master.id:
        # Never a restart of the master (it is running): a forged or confused join must not remove it.
        return client.bad_request(f"node [{node.name}] claims the master's own address [{node.transport_address}]")
    for other_id, other in list(nodes.items()):
        if other.transport_address == node.transport_address and other_id != node.id:
            del nodes[other_id]  # a restarted node with a new id at the same address
    nodes[node.id] = node
    for index, exclusion in enumerate(exclusions):
        if exclusion.node_id == f"{ABSENT_PREFIX}{node.name}":
            exclusions[index] = VotingConfigExclusion(node.id, node.name)
    return None


def _stamped(result: BatchResult, term: int, version: int) -> BatchResult:
    """A transaction's answer names the state it ends up in: the new one, or the base if nothing changed."""
    if isinstance(result, TxnResult | SessionInfo | Committed):
        return replace(result, term=term, version=version)
    return result


def _floors(payloads: list[TaskPayload]) -> list[int]:
    """The versions the new state must be above, of the requests that bring versions of their own (a restore)."""
    floors = []
    for task in payloads:
        if isinstance(task, ClientTask):
            floor = action_of(task.request).version_floor
            if floor is not None:
                floors.append(floor(task.request))
    return floors


def _next_version(base: ClusterState, floors: list[int]) -> int:
    """The version of the state a batch builds: the next one, unless a restore brings keys (or a snapshot)
    with higher versions, which the new state must be above so that a key's version never goes back."""
    return (max(base.version, *floors) if floors else base.version) + 1


BatchResult = ClientResult | None | Deferred  # DEFERRED: the task waits for the next publication (batch_writes)


def execute_batch(
    base: ClusterState, payloads: list[TaskPayload], context: BatchContext
) -> tuple[ClusterState | None, list[BatchResult]]:
    """Apply the tasks to the base state, in order. Returns (None, results) if nothing changed.

    A task's result is None when it succeeds with the publication, and DEFERRED when it did not run: it would
    change a key that an earlier task of the batch changed, or that a deferred one would (batch_writes), so it
    waits for the next publication. `Reconfigure` needs no step of its own: every batch moves to the best voting
    configuration.
    """
    floors = _floors(payloads)
    keys = BatchKeys(
        base,
        _next_version(base, floors),
        context.sizes.of(base) if context.sizes is not None else None,
        context.session_keys,
        context.keys_with_prefix,
    )
    draft = Draft(
        context,
        keys,
        dict(base.nodes),
        list(base.coordination.voting_config_exclusions),
        base.persistent_settings,
        base.repositories,
    )
    claims = WriteClaims()
    results: list[BatchResult] = []
    membership_done = False
    for task in payloads:
        if not membership_done and not isinstance(task, _MEMBERSHIP):
            # The sessions of the nodes that left end before any key is written in this batch (membership tasks
            # come first: they are the most urgent), so a write can never be taken back by them.
            _end_sessions_of_departed_nodes(base, draft)
            membership_done = True
        results.append(_run_task(task, draft, claims))
    _end_sessions_of_departed_nodes(base, draft)
    nodes, exclusions, settings, repositories, elected = (
        draft.nodes,
        draft.exclusions,
        draft.settings,
        draft.repositories,
        draft.elected,
    )
    sizes = context.sizes
    maps, map_changes = keys.finish()
    candidate = base.replace(
        master_node=context.master.id,
        nodes=nodes,
        persistent_settings=settings,
        repositories=repositories,
        coordination=replace(base.coordination, voting_config_exclusions=tuple(exclusions)),
        **maps,
    )
    candidate = improve_configuration(candidate, context.master.id, context.voters, context.auto_shrink)
    if context.node_versions is not None:
        candidate = candidate.replace(node_versions=context.node_versions(candidate))
    if settings is not base.persistent_settings:
        settings_diff = diff_maps(base.persistent_settings, candidate.persistent_settings)  # a few settings
        if not settings_diff.is_empty():
            map_changes["persistent_settings"] = (settings_diff.upserts, settings_diff.deletes)
    changed = elected or (
        bool(map_changes)
        or candidate.nodes != base.nodes
        or candidate.repositories != base.repositories
        or claims.every_claimed  # a restore ran: it publishes its state even when it changes nothing
        or candidate.coordination != base.coordination
        or candidate.master_node != base.master_node
        or candidate.node_versions != base.node_versions
    )
    if not changed:
        return None, [_stamped(result, base.term, base.version) for result in results]
    results = [_stamped(result, context.term, keys.new_version) for result in results]
    new_state = candidate.replace(
        cluster_uuid=context.new_uuid() if base.cluster_uuid == NO_CLUSTER_UUID else base.cluster_uuid,
        version=keys.new_version,
        state_uuid=context.new_uuid(),
        parent_uuid=base.state_uuid,
        coordination=replace(candidate.coordination, term=context.term),
    )
    # The batch knows what it changed: publication sends this diff without comparing the maps.
    if context.derivations is not None:
        context.derivations.record(base, new_state, diff_between(base, new_state, map_changes))
    if sizes is not None and keys.size is not None:
        sizes.remember(new_state, keys.size)
    return new_state, results


def _declared_writes(task: TaskPayload) -> Writes | None:
    """The keys a client task changes, when its request's action declares them without the state (batch_writes);
    None for any other task."""
    if not isinstance(task, ClientTask):
        return None
    declare = action_of(task.request).writes_keys
    return declare(task.request) if declare is not None else None


def _run_task(task: TaskPayload, draft: Draft, claims: WriteClaims) -> BatchResult:
    """Runs one task against the batch's draft, unless it must wait for the next publication (batch_writes)."""
    if not deferrable(task):
        return TASK_EXECUTORS[type(task)](task, draft)
    declared = _declared_writes(task)
    if declared is not None and claims.must_wait(declared):
        claims.defer(declared)
        return DEFERRED
    keys = draft.keys
    mark, settings, repositories = keys.mark(), draft.settings, draft.repositories
    result = TASK_EXECUTORS[type(task)](task, draft)
    written = keys.written_since(mark)
    if claims.must_wait(written):
        # Only keys, sessions, settings (a restore's) and repositories can change in a task that writes keys.
        keys.rollback(mark)
        draft.settings, draft.repositories = settings, repositories
        claims.defer(written)
        return DEFERRED
    claims.take(written)
    return result


def _end_sessions_of_departed_nodes(base: ClusterState, draft: Draft) -> None:
    """A node session ends when its node leaves the cluster, in the state that removes the node."""
    if all(node_id in draft.nodes for node_id in base.nodes):
        return
    keys = draft.keys
    for session_id, session in keys.sessions.items():
        if session.node is not None and session.node not in draft.nodes:
            keys.end_session(session_id)


def _elected_as_master(task: ElectedAsMaster, draft: Draft) -> Result:
    draft.elected = True
    draft.nodes[draft.context.master.id] = draft.context.master
    return None


def _node_join(task: NodeJoin, draft: Draft) -> Result:
    return _join(task.node, draft.nodes, draft.exclusions, draft.context.master)


def _node_left(task: NodeLeft, draft: Draft) -> Result:
    draft.nodes.pop(task.node_id, None)
    return None


def _reconfigure(task: Reconfigure, draft: Draft) -> Result:
    return None  # every batch moves to the best voting configuration: this task only forces a batch


def _refresh_node_versions(task: RefreshNodeVersions, draft: Draft) -> Result:
    return None  # every batch sets the state's node versions: this task only forces a batch


def _expire_sessions(task: ExpireSessions, draft: Draft) -> Result:
    for session_id in task.session_ids:
        if draft.context.session_expired(session_id):
            draft.keys.end_session(session_id)
    return None


def _checkpoint_sessions(task: CheckpointSessions, draft: Draft) -> Result:
    draft.keys.checkpoint_sessions(task.session_ids, draft.context.checkpoint_session)
    return None


def _client_task(task: ClientTask, draft: Draft) -> Result:
    request, keys, context = task.request, draft.keys, draft.context
    action = action_of(request)
    if action.execute is None:
        return None  # reads and keepalives never become master tasks
    values = action.writes_values
    if values is not None and (oversized := first_oversized(values(request), context.max_value_size)):
        return oversized
    mark, size_before = keys.mark(), keys.size
    result = action.execute(request, draft)
    # Decided against the state this batch builds, so concurrent writes cannot jointly exceed it. A write that
    # shrinks the state is always let through.
    size_after = keys.size
    if values is None or size_before is None or size_after is None:
        return result
    if size_before < size_after and size_after > context.max_state_size:
        too_large = state_too_large_error(size_before, size_after, context.max_state_size)
        keys.rollback(mark)
        return too_large
    return result


# The tasks that change the cluster's membership: they run first in a batch (the most urgent) and never wait.
_MEMBERSHIP = (ElectedAsMaster, NodeJoin, NodeLeft, Reconfigure, RefreshNodeVersions)

# One executor per master task type, as Elasticsearch's task queues each have theirs.
TASK_EXECUTORS: dict[type, Callable[[Any, Draft], Result]] = {
    ElectedAsMaster: _elected_as_master,
    NodeJoin: _node_join,
    NodeLeft: _node_left,
    Reconfigure: _reconfigure,
    RefreshNodeVersions: _refresh_node_versions,
    ExpireSessions: _expire_sessions,
    CheckpointSessions: _checkpoint_sessions,
    ClientTask: _client_task,
}
