"""What the master does with a batch of tasks: one new cluster state (or none) and a result per task.

Pure functions: the coordinator supplies the node, the term and the join votes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec.structs import replace

from coordinated.coordination import client
from coordinated.coordination.batch_keys import BatchKeys, state_entries_size, value_size
from coordinated.coordination.client import (
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    ClientResult,
    Committed,
    DeleteRepository,
    KvDelete,
    KvDeletePrefix,
    KvPut,
    PutRepository,
    RestoreSnapshot,
    SessionCreate,
    SessionEnd,
    SessionInfo,
    Txn,
    TxnResult,
    UpdateSettings,
)
from coordinated.coordination.history import NO_CLUSTER_UUID
from coordinated.coordination.reconfigurator import reconfigure
from coordinated.coordination.settings import size_setting
from coordinated.coordination.state import (
    ClusterState,
    Derivations,
    DiscoveryNode,
    Repository,
    Session,
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
    TaskPayload,
)
from coordinated.coordination.transactions import run_txn
from coordinated.coordination.validation import ABSENT_PREFIX, exclusions_problem, resolve_exclusions

_NO_LIMIT = 1 << 62

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


class StateSizes:
    """The total entry size of the master's newest states, so that a batch costs in proportion to its changes:
    it is summed over every key only for a state the master did not build itself (after an election)."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def of(self, state: ClusterState) -> int:
        size = self._known.get(state.state_uuid)
        if size is None:
            size = state_entries_size(state.kv)
            self.remember(state, size)
        return size

    def known(self, state: ClusterState) -> int | None:
        """The size if it is known already (no scan of the keys)."""
        return self._known.get(state.state_uuid)

    def remember(self, state: ClusterState, size: int) -> None:
        if len(self._known) >= 4:
            self._known.pop(next(iter(self._known)))
        self._known[state.state_uuid] = size


@dataclass(frozen=True)
class BatchContext:
    master: DiscoveryNode
    term: int
    voters: Collection[str]  # nodes whose join votes the master holds in this term
    max_exclusions: int
    auto_shrink: bool
    new_uuid: Callable[[], str]
    # The master's lease clock: whether a TTL session has gone without a keepalive for its TTL (now), and a
    # session as a checkpoint of its remaining TTL records it now (sessions.py).
    session_expired: Callable[[str], bool] = lambda session_id: False
    checkpoint_session: Callable[[str, Session], Session] = lambda session_id, session: session
    # The ephemeral keys of a session, and the keys under a prefix, in the base state (state_index); None: found
    # by a scan of every key.
    session_keys: Callable[[str], Collection[str]] | None = None
    keys_with_prefix: Callable[[str], Iterable[str]] | None = None
    max_value_size: int = _NO_LIMIT  # cluster.metadata.max_value_size
    max_state_size: int = _NO_LIMIT  # cluster.metadata.max_state_size
    sizes: StateSizes | None = None  # the base state's size (None: the state size is not limited)
    derivations: Derivations | None = None  # the node's, where the batch records how it derived its state


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


def _create_session(
    request: SessionCreate, keys: BatchKeys, nodes: dict[str, DiscoveryNode], new_uuid: str
) -> ClientResult:
    if len(keys.sessions) >= client.MAX_SESSIONS:
        return client.bad_request(f"cannot create more than [{client.MAX_SESSIONS}] sessions")
    node_id: str | None = None
    if request.node_name is not None:
        node_id = next((node.id for node in nodes.values() if node.name == request.node_name), None)
        if node_id is None:
            return client.bad_request(f"node [{request.node_name}] is not in the cluster: cannot bind a session to it")
    ttl_ms = request.ttl_ms if node_id is None else 0
    keys.add_session(new_uuid, Session(ttl_ms, node_id, keys.new_version))
    return SessionInfo(new_uuid, ttl_ms, node_id, 0, 0, remaining_ms=ttl_ms)


def value_too_large_error(key: str, size: int, limit: int) -> client.ClusterError:
    return client.bad_request(
        f"the value of key [{key}] is [{size}] bytes, which is larger than the limit of [{limit}] bytes set by "
        "[cluster.metadata.max_value_size]"
    )


def state_too_large_error(before: int, after: int, limit: int) -> client.ClusterError:
    return client.bad_request(
        f"this write would make the stored keys and values [{after}] bytes (they are [{before}] bytes now), "
        f"which is more than the limit of [{limit}] bytes set by [cluster.metadata.max_state_size]"
    )


def _restore_too_large(restore: RestoreSnapshot, size_now: int | None, limit: int) -> client.ClusterError | None:
    if size_now is None:
        return None
    restored = state_entries_size(restore.kv)
    return state_too_large_error(size_now, restored, limit) if restored > max(limit, size_now) else None


def _oversized_value(task: KvPut | Txn, limit: int) -> client.ClusterError | None:
    puts = [(task.key, task.value)] if isinstance(task, KvPut) else []
    if isinstance(task, Txn):
        puts = [(op.key, op.value) for op in (*task.success, *task.failure) if op.op == "put"]
    return _first_oversized(puts, limit)


def _oversized_restored_value(restore: RestoreSnapshot, limit: int) -> client.ClusterError | None:
    """A restored key is held to `cluster.metadata.max_value_size` as a write of it would be."""
    oversized = _first_oversized(restore.kv.items(), limit)
    if oversized is None:
        return None
    return client.bad_request(f"snapshot [{restore.snapshot}]: {oversized.reason}")


def _first_oversized(puts: Iterable[tuple[str, Any]], limit: int) -> client.ClusterError | None:
    for key, value in puts:
        size = value_size(None if value is msgspec.UNSET else value)
        if size > limit:
            return value_too_large_error(key, size, limit)
    return None


def _stamped(result: ClientResult | None, term: int, version: int) -> ClientResult | None:
    """A transaction's answer names the state it ends up in: the new one, or the base if nothing changed."""
    if isinstance(result, TxnResult | SessionInfo | Committed):
        return replace(result, term=term, version=version)
    return result


def _next_version(base: ClusterState, payloads: list[TaskPayload]) -> int:
    """The version of the state a batch builds: the next one, unless a restore brings keys (or a snapshot)
    with higher versions, which the new state must be above so that a key's version never goes back."""
    floor = base.version
    for task in payloads:
        if isinstance(task, ClientTask) and isinstance(task.request, RestoreSnapshot):
            restore = task.request
            floor = max(floor, restore.snapshot_version, *(v.version for v in restore.kv_versions.values()))
    return floor + 1


def execute_batch(
    base: ClusterState, payloads: list[TaskPayload], context: BatchContext
) -> tuple[ClusterState | None, list[ClientResult | None]]:
    """Apply every task to the base state. Returns (None, results) if nothing changed.

    A task's result is None when it succeeds with the publication. `Reconfigure` needs no step of its own:
    every batch moves to the best voting configuration.
    """
    keys = BatchKeys(
        base,
        _next_version(base, payloads),
        context.sizes.of(base) if context.sizes is not None else None,
        context.session_keys,
        context.keys_with_prefix,
    )
    draft = _Draft(
        context,
        keys,
        dict(base.nodes),
        list(base.coordination.voting_config_exclusions),
        base.persistent_settings,
        base.repositories,
    )
    results = [TASK_EXECUTORS[type(task)](task, draft) for task in payloads]
    nodes, exclusions, settings, repositories, elected = (
        draft.nodes,
        draft.exclusions,
        draft.settings,
        draft.repositories,
        draft.elected,
    )
    sizes = context.sizes
    # A node session ends when its node leaves the cluster, in the state that removes the node.
    if any(node_id not in nodes for node_id in base.nodes):
        for session_id, session in list(keys.sessions.items()):
            if session.node is not None and session.node not in nodes:
                keys.end_session(session_id)
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
    if settings is not base.persistent_settings:
        settings_diff = diff_maps(base.persistent_settings, candidate.persistent_settings)  # a few settings
        if not settings_diff.is_empty():
            map_changes["persistent_settings"] = (settings_diff.upserts, settings_diff.deletes)
    changed = elected or (
        bool(map_changes)
        or candidate.nodes != base.nodes
        or candidate.repositories != base.repositories
        or any(isinstance(task, ClientTask) and isinstance(task.request, RestoreSnapshot) for task in payloads)
        or candidate.coordination != base.coordination
        or candidate.master_node != base.master_node
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


@dataclass
class _Draft:
    """What a batch builds, task after task: each executor changes it and returns its task's result."""

    context: BatchContext
    keys: BatchKeys
    nodes: dict[str, DiscoveryNode]
    exclusions: list[VotingConfigExclusion]
    settings: Mapping[str, str]
    repositories: dict[str, Repository]
    elected: bool = False


Result = ClientResult | None  # None: the task succeeds with the publication


def _elected_as_master(task: ElectedAsMaster, draft: _Draft) -> Result:
    draft.elected = True
    draft.nodes[draft.context.master.id] = draft.context.master
    return None


def _node_join(task: NodeJoin, draft: _Draft) -> Result:
    return _join(task.node, draft.nodes, draft.exclusions, draft.context.master)


def _node_left(task: NodeLeft, draft: _Draft) -> Result:
    draft.nodes.pop(task.node_id, None)
    return None


def _reconfigure(task: Reconfigure, draft: _Draft) -> Result:
    return None  # every batch moves to the best voting configuration: this task only forces a batch


def _expire_sessions(task: ExpireSessions, draft: _Draft) -> Result:
    for session_id in task.session_ids:
        if draft.context.session_expired(session_id):
            draft.keys.end_session(session_id)
    return None


def _checkpoint_sessions(task: CheckpointSessions, draft: _Draft) -> Result:
    draft.keys.checkpoint_sessions(task.session_ids, draft.context.checkpoint_session)
    return None


def _put_or_delete(request: KvPut | KvDelete, draft: _Draft) -> Result:
    # Decided against the state this batch builds, so of two conflicting conditional writes in one batch only
    # the first applies.
    keys = draft.keys
    current = keys.version(request.key)
    prev = Committed(0, 0, prev=keys.previous(request.key)) if request.prev_value else None
    if request.if_version is not None and request.if_version != current:
        return client.version_conflict_error(request.key, request.if_version, current)
    if isinstance(request, KvDelete):
        keys.delete(request.key)
        return prev
    if request.session is not None and request.session not in keys.sessions:
        return client.session_not_found_error(request.session)
    keys.put(request.key, request.value, request.session)
    return prev


def _delete_prefix(request: KvDeletePrefix, draft: _Draft) -> Result:
    deleted, more = draft.keys.delete_prefix(request.prefix, request.limit)
    return Committed(0, 0, deleted=deleted, more=more)


def _txn(request: Txn, draft: _Draft) -> Result:
    return run_txn(request, draft.keys)


def _session_create(request: SessionCreate, draft: _Draft) -> Result:
    return _create_session(request, draft.keys, draft.nodes, draft.context.new_uuid())


def _session_end(request: SessionEnd, draft: _Draft) -> Result:
    return None if draft.keys.end_session(request.session) else client.session_not_found_error(request.session)


def _update_settings(request: UpdateSettings, draft: _Draft) -> Result:
    merged = {**draft.settings, **request.persistent}
    draft.settings = {name: value for name, value in merged.items() if value is not None}
    return None


def _add_exclusions(request: AddVotingConfigExclusions, draft: _Draft) -> Result:
    return add_exclusions(request, draft.nodes, draft.exclusions, draft.context.max_exclusions)


def _clear_exclusions(request: ClearVotingConfigExclusions, draft: _Draft) -> Result:
    draft.exclusions = []
    return None


def _put_repository(request: PutRepository, draft: _Draft) -> Result:
    registered = Repository(request.type, request.location, request.bucket, request.base_path, request.client)
    draft.repositories = {**draft.repositories, request.name: registered}
    return None


def _delete_repository(request: DeleteRepository, draft: _Draft) -> Result:
    if request.name not in draft.repositories:
        return client.repository_missing_error(request.name)
    draft.repositories = {name: repo for name, repo in draft.repositories.items() if name != request.name}
    return None


def _restore_snapshot(request: RestoreSnapshot, draft: _Draft) -> Result:
    context = draft.context
    refused = _oversized_restored_value(request, context.max_value_size) or _restore_too_large(
        request, draft.keys.size, context.max_state_size
    )
    if refused is None:
        draft.keys.replace_all(request.kv, request.kv_versions)
        draft.settings = dict(request.persistent_settings)
    return refused


# One executor per client request that changes the state (reads and keepalives never become master tasks).
REQUEST_EXECUTORS: dict[type, Callable[[Any, _Draft], Result]] = {
    KvPut: _put_or_delete,
    KvDelete: _put_or_delete,
    KvDeletePrefix: _delete_prefix,
    Txn: _txn,
    SessionCreate: _session_create,
    SessionEnd: _session_end,
    UpdateSettings: _update_settings,
    AddVotingConfigExclusions: _add_exclusions,
    ClearVotingConfigExclusions: _clear_exclusions,
    PutRepository: _put_repository,
    DeleteRepository: _delete_repository,
    RestoreSnapshot: _restore_snapshot,
}


def _client_task(task: ClientTask, draft: _Draft) -> Result:
    request, keys, context = task.request, draft.keys, draft.context
    mark, size_before = keys.mark(), keys.size
    if isinstance(request, KvPut | Txn) and (oversized := _oversized_value(request, context.max_value_size)):
        return oversized
    executor = REQUEST_EXECUTORS.get(type(request))
    result = executor(request, draft) if executor is not None else None
    # Decided against the state this batch builds, so concurrent writes cannot jointly exceed it. A write that
    # shrinks the state is always let through.
    size_after = keys.size
    if not isinstance(request, KvPut | Txn) or size_before is None or size_after is None:
        return result
    if size_before < size_after and size_after > context.max_state_size:
        too_large = state_too_large_error(size_before, size_after, context.max_state_size)
        keys.rollback(mark)
        return too_large
    return result


# One executor per master task type, as Elasticsearch's task queues each have theirs.
TASK_EXECUTORS: dict[type, Callable[[Any, _Draft], Result]] = {
    ElectedAsMaster: _elected_as_master,
    NodeJoin: _node_join,
    NodeLeft: _node_left,
    Reconfigure: _reconfigure,
    ExpireSessions: _expire_sessions,
    CheckpointSessions: _checkpoint_sessions,
    ClientTask: _client_task,
}
