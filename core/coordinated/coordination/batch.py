"""What the master does with a batch of tasks: one new cluster state (or none) and a result per task.

Pure functions: the coordinator supplies the node, the term and the join votes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec.structs import replace

from coordinated.coordination import client
from coordinated.coordination.client import (
    AddVotingConfigExclusions,
    ClearVotingConfigExclusions,
    ClientResult,
    KvDelete,
    KvPut,
    Txn,
    TxnOpResult,
    TxnResult,
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

_SIZE_ENCODER = msgspec.json.Encoder()
_NO_LIMIT = 1 << 62


def entry_size(key: str, value: Any) -> int:
    """What a key costs against `cluster.metadata.max_state_size`: its UTF-8 name and JSON-encoded value."""
    return len(key.encode()) + len(_SIZE_ENCODER.encode(value))


class StateSizes:
    """The total entry size of the master's newest states, so that a batch costs in proportion to its changes:
    it is summed over every key only for a state the master did not build itself (after an election)."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def of(self, state: ClusterState) -> int:
        size = self._known.get(state.state_uuid)
        if size is None:
            size = sum(entry_size(key, value) for key, value in state.kv.items())
            self.remember(state, size)
        return size

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
    max_value_size: int = _NO_LIMIT  # cluster.metadata.max_value_size
    max_state_size: int = _NO_LIMIT  # cluster.metadata.max_state_size
    sizes: StateSizes | None = None  # the base state's size (None: the state size is not limited)


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


_ABSENT = object()


class _Keys:
    """The key map of the state a batch builds, copied on its first change; it keeps the total entry size
    (when `size` is given) and an undo log, so that a task that would exceed a limit can be taken back."""

    def __init__(
        self, kv: dict[str, Any], versions: dict[str, KeyVersion], new_version: int, size: int | None = None
    ) -> None:
        self.kv, self.versions, self.new_version = kv, versions, new_version
        self.size = size
        self._copied = False
        self._undo: list[tuple[str, Any, KeyVersion | None]] = []

    def mark(self) -> int:
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        """Takes back every change since `mark`."""
        while len(self._undo) > mark:
            key, value, versions = self._undo.pop()
            self._resize(key, value, self.kv.get(key, _ABSENT))
            if value is _ABSENT:
                del self.kv[key]
            else:
                self.kv[key] = value
            if versions is None:
                self.versions.pop(key, None)
            else:
                self.versions[key] = versions

    def _resize(self, key: str, new: Any, old: Any) -> None:
        if self.size is not None:
            self.size += (entry_size(key, new) if new is not _ABSENT else 0) - (
                entry_size(key, old) if old is not _ABSENT else 0
            )

    def _record(self, key: str) -> None:
        self._undo.append((key, self.kv.get(key, _ABSENT), self.versions.get(key)))

    def get(self, key: str) -> KeyVersion | None:
        if key not in self.kv:
            return None
        return self.versions.get(key, LEGACY_KEY_VERSION)

    def version(self, key: str) -> int:
        """The key's version; 0 if it does not exist."""
        versions = self.get(key)
        return versions.version if versions else 0

    def _copy(self) -> None:
        if not self._copied:
            self.kv, self.versions, self._copied = dict(self.kv), dict(self.versions), True

    def put(self, key: str, value: Any) -> KeyVersion:
        existing = self.get(key)
        self._copy()
        self._record(key)
        self._resize(key, value, self.kv.get(key, _ABSENT))
        self.kv[key] = value
        versions = KeyVersion(self.new_version, existing.create_version if existing else self.new_version)
        self.versions[key] = versions
        return versions

    def delete(self, key: str) -> bool:
        if key not in self.kv:
            return False
        self._copy()
        self._record(key)
        self._resize(key, _ABSENT, self.kv[key])
        del self.kv[key]
        self.versions.pop(key, None)
        return True


def _run_txn(txn: Txn, keys: _Keys) -> TxnResult:
    """Compare, then run one branch against the state the batch builds. The version is stamped later."""
    succeeded = all(keys.version(compare.key) == compare.version for compare in txn.compare)
    results: list[TxnOpResult] = []
    for op in txn.success if succeeded else txn.failure:
        if op.op == "put":
            versions = keys.put(op.key, None if op.value is msgspec.UNSET else op.value)
            results.append(TxnOpResult("put", op.key, True, None, versions.version, versions.create_version))
        elif op.op == "delete":
            results.append(TxnOpResult("delete", op.key, keys.delete(op.key)))
        else:
            found = keys.get(op.key)
            if found is None:
                results.append(TxnOpResult("get", op.key, False))
            else:
                value = keys.kv[op.key]
                results.append(TxnOpResult("get", op.key, True, value, found.version, found.create_version))
    return TxnResult(succeeded, 0, 0, tuple(results))


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


def _oversized_value(task: KvPut | Txn, limit: int) -> client.ClusterError | None:
    puts = [(task.key, task.value)] if isinstance(task, KvPut) else []
    if isinstance(task, Txn):
        puts = [(op.key, op.value) for op in (*task.success, *task.failure) if op.op == "put"]
    for key, value in puts:
        size = len(_SIZE_ENCODER.encode(None if value is msgspec.UNSET else value))
        if size > limit:
            return value_too_large_error(key, size, limit)
    return None


def _stamped(result: ClientResult | None, term: int, version: int) -> ClientResult | None:
    """A transaction's answer names the state it ends up in: the new one, or the base if nothing changed."""
    if isinstance(result, TxnResult):
        return replace(result, term=term, version=version)
    return result


def execute_batch(
    base: ClusterState, payloads: list[TaskPayload], context: BatchContext
) -> tuple[ClusterState | None, list[ClientResult | None]]:
    """Apply every task to the base state. Returns (None, results) if nothing changed.

    A task's result is None when it succeeds with the publication. `Reconfigure` needs no step of its own:
    every batch moves to the best voting configuration.
    """
    nodes = dict(base.nodes)
    sizes = context.sizes
    keys = _Keys(base.kv, base.kv_versions, base.version + 1, sizes.of(base) if sizes is not None else None)
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
            mark, size_before = keys.mark(), keys.size
            if isinstance(payload, KvPut | Txn):
                result = _oversized_value(payload, context.max_value_size)
            if result is not None:
                pass
            elif isinstance(payload, KvPut | KvDelete):
                # Decided against the state this batch builds, so of two conflicting conditional writes in
                # one batch only the first applies.
                current = keys.version(payload.key)
                if payload.if_version is not None and payload.if_version != current:
                    result = client.version_conflict_error(payload.key, payload.if_version, current)
                elif isinstance(payload, KvPut):
                    keys.put(payload.key, payload.value)
                else:
                    keys.delete(payload.key)
            elif isinstance(payload, Txn):
                result = _run_txn(payload, keys)
            elif isinstance(payload, UpdateSettings):
                settings = {k: v for k, v in {**settings, **payload.persistent}.items() if v is not None}
            elif isinstance(payload, AddVotingConfigExclusions):
                result = add_exclusions(payload, nodes, exclusions, context.max_exclusions)
            elif isinstance(payload, ClearVotingConfigExclusions):
                exclusions = []
            # Decided against the state this batch builds, so concurrent writes cannot jointly exceed it. A
            # write that shrinks the state is always let through.
            grown = keys.size is not None and size_before is not None and keys.size > size_before
            if grown and keys.size is not None and size_before is not None and keys.size > context.max_state_size:
                result = state_too_large_error(size_before, keys.size, context.max_state_size)
                keys.rollback(mark)
        results.append(result)
    candidate = base.replace(
        master_node=context.master.id,
        nodes=nodes,
        kv=keys.kv,
        kv_versions=keys.versions,
        persistent_settings=settings,
        coordination=replace(base.coordination, voting_config_exclusions=tuple(exclusions)),
    )
    candidate = improve_configuration(candidate, context.master.id, context.voters, context.auto_shrink)
    changed = elected or (
        candidate.nodes != base.nodes
        or keys.kv != base.kv
        or keys.versions != base.kv_versions
        or candidate.persistent_settings != base.persistent_settings
        or candidate.coordination != base.coordination
        or candidate.master_node != base.master_node
    )
    if not changed:
        return None, [_stamped(result, base.term, base.version) for result in results]
    results = [_stamped(result, context.term, base.version + 1) for result in results]
    new_state = candidate.replace(
        cluster_uuid=context.new_uuid() if base.cluster_uuid == NO_CLUSTER_UUID else base.cluster_uuid,
        version=base.version + 1,
        state_uuid=context.new_uuid(),
        parent_uuid=base.state_uuid,
        coordination=replace(candidate.coordination, term=context.term),
    )
    if sizes is not None and keys.size is not None:
        sizes.remember(new_state, keys.size)
    return new_state, results
