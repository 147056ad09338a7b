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
    ClusterError,
    KvDelete,
    KvPut,
    SessionCreate,
    SessionEnd,
    SessionInfo,
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
    Session,
    VotingConfigExclusion,
)
from coordinated.coordination.tasks import ClientTask, ElectedAsMaster, ExpireSessions, NodeJoin, NodeLeft, TaskPayload
from coordinated.coordination.validation import ABSENT_PREFIX, exclusions_problem, resolve_exclusions


@dataclass(frozen=True)
class BatchContext:
    master: DiscoveryNode
    term: int
    voters: Collection[str]  # nodes whose join votes the master holds in this term
    max_exclusions: int
    auto_shrink: bool
    new_uuid: Callable[[], str]
    # The master's lease clock: whether a TTL session has gone without a keepalive for its TTL (now).
    session_expired: Callable[[str], bool] = lambda session_id: False


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
    """The key and session maps of the state a batch builds, each copied on its first change."""

    def __init__(self, base: ClusterState, new_version: int) -> None:
        self.kv, self.versions, self.new_version = base.kv, base.kv_versions, new_version
        self.kv_sessions, self.sessions = base.kv_sessions, base.sessions
        self._copied = False
        self._sessions_copied = False

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
            self.kv_sessions = dict(self.kv_sessions)

    def put(self, key: str, value: Any, session: str | None = None) -> KeyVersion:
        """A put with a session makes the key ephemeral; without one, persistent (as etcd's put without a lease)."""
        existing = self.get(key)
        self._copy()
        self.kv[key] = value
        versions = KeyVersion(self.new_version, existing.create_version if existing else self.new_version)
        self.versions[key] = versions
        if session is None:
            self.kv_sessions.pop(key, None)
        else:
            self.kv_sessions[key] = session
        return versions

    def delete(self, key: str) -> bool:
        if key not in self.kv:
            return False
        self._copy()
        del self.kv[key]
        self.versions.pop(key, None)
        self.kv_sessions.pop(key, None)
        return True

    def add_session(self, session_id: str, session: Session) -> None:
        self._copy_sessions()
        self.sessions[session_id] = session

    def end_session(self, session_id: str) -> bool:
        """Remove the session and delete its ephemeral keys; False if there is no such session."""
        if session_id not in self.sessions:
            return False
        self._copy_sessions()
        del self.sessions[session_id]
        for key in [key for key, owner in self.kv_sessions.items() if owner == session_id]:
            self.delete(key)
        return True

    def _copy_sessions(self) -> None:
        if not self._sessions_copied:
            self.sessions, self._sessions_copied = dict(self.sessions), True


def _create_session(
    request: SessionCreate, keys: _Keys, nodes: dict[str, DiscoveryNode], new_uuid: str
) -> ClientResult:
    if len(keys.sessions) >= client.MAX_SESSIONS:
        return client.bad_request(f"cannot create more than [{client.MAX_SESSIONS}] sessions")
    node_id: str | None = None
    if request.node_name is not None:
        node_id = next((node.id for node in nodes.values() if node.name == request.node_name), None)
        if node_id is None:
            return client.bad_request(f"node [{request.node_name}] is not in the cluster: cannot bind a session to it")
    keys.add_session(new_uuid, Session(request.ttl_ms if node_id is None else 0, node_id, keys.new_version))
    return SessionInfo(new_uuid, request.ttl_ms if node_id is None else 0, node_id, 0, 0)


def _run_txn(txn: Txn, keys: _Keys) -> TxnResult | ClusterError:
    """Compare, then run one branch against the state the batch builds. The version is stamped later.
    A put bound to a session that does not exist fails the whole transaction, before any op runs."""
    succeeded = all(keys.version(compare.key) == compare.version for compare in txn.compare)
    ops = txn.success if succeeded else txn.failure
    for op in ops:
        if op.session is not None and op.session not in keys.sessions:
            return client.session_not_found_error(op.session)
    results: list[TxnOpResult] = []
    for op in ops:
        if op.op == "put":
            versions = keys.put(op.key, None if op.value is msgspec.UNSET else op.value, op.session)
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
    if isinstance(result, TxnResult | SessionInfo):
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
    keys = _Keys(base, base.version + 1)
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
        elif isinstance(task, ExpireSessions):
            for session_id in task.session_ids:
                if context.session_expired(session_id):
                    keys.end_session(session_id)
        elif isinstance(task, ClientTask):
            payload = task.request
            if isinstance(payload, KvPut | KvDelete):
                # Decided against the state this batch builds, so of two conflicting conditional writes in
                # one batch only the first applies.
                current = keys.version(payload.key)
                if payload.if_version is not None and payload.if_version != current:
                    result = client.version_conflict_error(payload.key, payload.if_version, current)
                elif isinstance(payload, KvPut):
                    if payload.session is not None and payload.session not in keys.sessions:
                        result = client.session_not_found_error(payload.session)
                    else:
                        keys.put(payload.key, payload.value, payload.session)
                else:
                    keys.delete(payload.key)
            elif isinstance(payload, Txn):
                result = _run_txn(payload, keys)
            elif isinstance(payload, SessionCreate):
                result = _create_session(payload, keys, nodes, context.new_uuid())
            elif isinstance(payload, SessionEnd):
                if not keys.end_session(payload.session):
                    result = client.session_not_found_error(payload.session)
            elif isinstance(payload, UpdateSettings):
                settings = {k: v for k, v in {**settings, **payload.persistent}.items() if v is not None}
            elif isinstance(payload, AddVotingConfigExclusions):
                result = add_exclusions(payload, nodes, exclusions, context.max_exclusions)
            elif isinstance(payload, ClearVotingConfigExclusions):
                exclusions = []
        results.append(result)
    # A node session ends when its node leaves the cluster, in the state that removes the node.
    for session_id, session in list(keys.sessions.items()):
        if session.node is not None and session.node not in nodes:
            keys.end_session(session_id)
    candidate = base.replace(
        master_node=context.master.id,
        nodes=nodes,
        kv=keys.kv,
        kv_versions=keys.versions,
        sessions=keys.sessions,
        kv_sessions=keys.kv_sessions,
        persistent_settings=settings,
        coordination=replace(base.coordination, voting_config_exclusions=tuple(exclusions)),
    )
    candidate = improve_configuration(candidate, context.master.id, context.voters, context.auto_shrink)
    changed = elected or (
        candidate.nodes != base.nodes
        or keys.kv != base.kv
        or keys.versions != base.kv_versions
        or keys.sessions != base.sessions
        or keys.kv_sessions != base.kv_sessions
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
    return new_state, results
