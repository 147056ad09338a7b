"""What the master does with a batch of tasks: one new cluster state (or none) and a result per task.

Pure functions: the coordinator supplies the node, the term and the join votes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import immutables
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
    diff_between,
    diff_maps,
    persistent,
    record_derivation,
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


class _Keys:
    """The key maps of the state a batch builds: mutations of the base's persistent maps, plus the keys the
    batch touched, from which the batch's diff is built without comparing whole maps."""

    def __init__(self, kv: Mapping[str, Any], versions: Mapping[str, KeyVersion], new_version: int) -> None:
        self.base_kv = persistent(kv)
        self.kv = self.base_kv.mutate()
        self.versions = persistent(versions).mutate()
        self.new_version = new_version
        self.touched: set[str] = set()

    def get(self, key: str) -> KeyVersion | None:
        if key not in self.kv:
            return None
        found: KeyVersion = self.versions.get(key, LEGACY_KEY_VERSION)
        return found

    def version(self, key: str) -> int:
        """The key's version; 0 if it does not exist."""
        versions = self.get(key)
        return versions.version if versions else 0

    def put(self, key: str, value: Any) -> KeyVersion:
        existing = self.get(key)
        self.kv[key] = value
        versions = KeyVersion(self.new_version, existing.create_version if existing else self.new_version)
        self.versions[key] = versions
        self.touched.add(key)
        return versions

    def delete(self, key: str) -> bool:
        if key not in self.kv:
            return False
        del self.kv[key]
        self.versions.pop(key, None)
        self.touched.add(key)
        return True

    def finish(self) -> tuple[immutables.Map[str, Any], immutables.Map[str, KeyVersion]]:
        return self.kv.finish(), self.versions.finish()

    def changes(self) -> dict[str, tuple[dict[str, Any], tuple[str, ...]]]:
        """The upserts and deletes of `kv` and `kv_versions` (call after `finish`)."""
        kv, versions = self.kv, self.versions
        present = sorted(key for key in self.touched if key in kv)
        # A key created and deleted again within the batch is no change.
        deleted = tuple(sorted(key for key in self.touched if key not in kv and key in self.base_kv))
        if not present and not deleted:
            return {}
        return {
            "kv": ({key: kv[key] for key in present}, deleted),
            "kv_versions": ({key: versions[key] for key in present}, deleted),
        }


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
    nodes = dict(base.nodes)  # a handful of nodes: copied
    keys = _Keys(base.kv, base.kv_versions, base.version + 1)
    settings = base.persistent_settings
    exclusions = list(base.coordination.voting_config_exclusions)
    results: list[ClientResult | None] = []
    elected = settings_changed = False
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
                settings_changed = True
            elif isinstance(payload, AddVotingConfigExclusions):
                result = add_exclusions(payload, nodes, exclusions, context.max_exclusions)
            elif isinstance(payload, ClearVotingConfigExclusions):
                exclusions = []
        results.append(result)
    kv, kv_versions = keys.finish()
    candidate = base.replace(
        master_node=context.master.id,
        nodes=nodes,
        kv=kv,
        kv_versions=kv_versions,
        persistent_settings=settings,
        coordination=replace(base.coordination, voting_config_exclusions=tuple(exclusions)),
    )
    candidate = improve_configuration(candidate, context.master.id, context.voters, context.auto_shrink)
    map_changes = keys.changes()
    if settings_changed:
        settings_diff = diff_maps(base.persistent_settings, candidate.persistent_settings)  # a few settings
        if not settings_diff.is_empty():
            map_changes["persistent_settings"] = (settings_diff.upserts, settings_diff.deletes)
    changed = (
        elected
        or bool(map_changes)
        or (
            candidate.nodes != base.nodes
            or candidate.coordination != base.coordination
            or candidate.master_node != base.master_node
        )
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
    # The batch knows what it changed: publication sends this diff without comparing the maps.
    record_derivation(base, new_state, diff_between(base, new_state, map_changes))
    return new_state, results
