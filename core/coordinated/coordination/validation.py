"""What makes a client request valid: the one place that the HTTP API and the master both check.

The API checks keys and settings before submitting a request, for a quick and precise 400; exclusions it
leaves to the master, since their limit depends on the exclusions the master holds. The master checks every
request when it executes it, whether it was submitted locally or forwarded by a follower, so that a peer that skips the
API (an older version, a bug, a forged message) cannot commit a bad key, setting or exclusion. Each check
returns None when the input is valid, otherwise the reason, which goes back to the client in a 400.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from coordinated.coordination.client import (
    MAX_SESSION_TTL_MS,
    MAX_TXN_OPS,
    MIN_SESSION_TTL_MS,
    AddVotingConfigExclusions,
    ClientRequest,
    DeleteRepository,
    KvDelete,
    KvDeletePrefix,
    KvGet,
    KvPut,
    PutRepository,
    RestoreSnapshot,
    SessionCreate,
    SessionEnd,
    SessionKeepAlive,
    Txn,
    TxnCompare,
    TxnOp,
    UpdateSettings,
)
from coordinated.coordination.counters import CEILING
from coordinated.coordination.object_names import parse_base_path, parse_bucket, parse_client_name
from coordinated.coordination.offline_recovery import UNSAFE_BOOTSTRAP_SETTING
from coordinated.coordination.settings import (
    Settings,
    SettingsError,
    SettingsRegistry,
    format_time_ms,
    int_setting,
    parse_node_name,
)
from coordinated.coordination.state import ClusterState, DiscoveryNode, VotingConfigExclusion
from coordinated.key_names import key_problem, prefix_problem

# Full matches: `$` would also accept a trailing newline.
_NODE_ID = re.compile(r"[^\x00-\x1f\x7f]{1,256}")
_HOOK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
# Repository and snapshot names, as Elasticsearch allows them: lowercase, no separators, not `_all`-like.
_SNAPSHOT_NAME = re.compile(r"[a-z0-9][a-z0-9._+-]{0,254}")
REPOSITORY_TYPES = ("fs", "s3")
# How deeply a key's value may nest arrays and objects. Every decoder of the wire and the disk holds a value
# inside a few levels of its own (an envelope, a message, a state, a map), and a decoder's depth is bounded
# (msgspec's and Python's near 1000): a value that one node took but another could not decode would stop
# every publication that carries it. Jackson's default, which Elasticsearch keeps, is 1000 for a document.
MAX_VALUE_DEPTH = 100
ABSENT_PREFIX = "_absent_"  # an exclusion by name of a node that is not in the cluster (yet)

MAX_VOTING_CONFIG_EXCLUSIONS = int_setting(
    "cluster.max_voting_config_exclusions",
    10,
    minimum=1,
    maximum=1000,
    dynamic=True,
    doc="most voting exclusions at once",
)


def metadata_key_problem(key: str) -> str | None:
    """A key of the metadata map, as every write checks it: the rules of `coordinated.key_names`, the one
    definition that the client and the docs share. Names starting with `_` are reserved for the API's own
    endpoints (`_txn`, `_watch`), which can then never clash with a key."""
    return key_problem(key)


def key_prefix_problem(prefix: str) -> str | None:
    """A prefix of key names (a watch's): the rules of `coordinated.key_names` for characters."""
    return prefix_problem(prefix)


def stored_key_problem(key: str, state: ClusterState) -> str | None:
    """A key a read or a delete names: any key the state holds, whatever its name (an earlier version may
    have stored one that the rules now refuse; it stays readable and deletable), else the rules."""
    return None if key in state.kv else metadata_key_problem(key)


def session_id_problem(session: str) -> str | None:
    if not isinstance(session, str) or _SESSION_ID.fullmatch(session) is None:
        return f"invalid session id [{session}]: a session id is 1 to 64 letters, digits, '_' or '-'"
    return None


def session_create_problem(request: SessionCreate) -> str | None:
    """Exactly one of [ttl] and [node]; a TTL within the bounds; a well-formed node name."""
    if (request.ttl_ms > 0) == (request.node_name is not None):
        return 'a session needs exactly one of [ttl] (e.g. {"ttl": "10s"}) and [node] (a node name)'
    if request.node_name is not None:
        try:
            parse_node_name(request.node_name)
        except ValueError as error:
            return f"invalid [node]: {error}"
        return None
    if not MIN_SESSION_TTL_MS <= request.ttl_ms <= MAX_SESSION_TTL_MS:
        return (
            f"invalid [ttl]: [{format_time_ms(request.ttl_ms)}] is outside "
            f"[{format_time_ms(MIN_SESSION_TTL_MS)}] to [{format_time_ms(MAX_SESSION_TTL_MS)}]"
        )
    return None


def compare_problem(compare: TxnCompare) -> str | None:
    """A key named well, exactly one of `version`, `create_version` and `value` (nested no deeper than a key's
    value may be), and an ordering of values only between numbers or strings."""
    problem = metadata_key_problem(compare.key)
    if problem is not None:
        return problem
    given = [name for name in ("version", "create_version", "value") if getattr(compare, name) is not msgspec.UNSET]
    if len(given) != 1:
        return f"the compare of [{compare.key}] needs exactly one of [version], [create_version] and [value]"
    if given == ["value"] and (problem := value_problem(compare.key, compare.value)) is not None:
        return problem
    if given == ["value"] and compare.op in ("<", ">"):
        value = compare.value
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return f"the compare of [{compare.key}] orders values with [{compare.op}]: give a number or a string"
    return None


def _op_problem(op: TxnOp) -> str | None:
    """The fields one op takes: a delete_prefix a `prefix` and nothing else, any other op a key."""
    if op.op == "delete_prefix":
        if op.key or op.value is not msgspec.UNSET or op.session is not None or op.prev_value:
            return "a [delete_prefix] op takes only a [prefix]"
        return key_prefix_problem(op.prefix) if op.prefix is not None else "a [delete_prefix] op needs a [prefix]"
    if op.prefix is not None:
        return f"a [{op.op}] op takes no [prefix]"
    if op.prev_value and op.op == "get":
        return "a [get] op takes no [prev_value]"
    return metadata_key_problem(op.key)


def value_problem(key: str, value: Any) -> str | None:
    """A key's value nested deeper than MAX_VALUE_DEPTH levels of arrays and objects; measured without
    recursion, so that any value can be judged."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list | tuple):
            if depth > MAX_VALUE_DEPTH:
                return f"the value of key [{key}] nests deeper than [{MAX_VALUE_DEPTH}] levels of arrays and objects"
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return None


def txn_problem(txn: Txn) -> str | None:
    """Every key named well, at most MAX_TXN_OPS compares and ops, a value for every put, and in each branch a
    key at most once among the put and delete ops (their order within a state would be ambiguous)."""
    if len(txn.compare) > MAX_TXN_OPS or len(txn.success) + len(txn.failure) > MAX_TXN_OPS:
        return f"a transaction has at most [{MAX_TXN_OPS}] compares and [{MAX_TXN_OPS}] ops"
    for compare in txn.compare:
        problem = compare_problem(compare)
        if problem is not None:
            return f"compare: {problem}"
    for branch, ops in (("success", txn.success), ("failure", txn.failure)):
        written: set[str] = set()
        for op in ops:
            problem = _op_problem(op)
            if problem is not None:
                return f"{branch}: {problem}"
            if op.op == "delete_prefix":
                continue
            if op.op == "put" and op.value is msgspec.UNSET:
                return f"{branch}: the put of [{op.key}] has no [value]"
            if op.op == "put" and (problem := value_problem(op.key, op.value)) is not None:
                return f"{branch}: {problem}"
            if op.op != "put" and op.value is not msgspec.UNSET:
                return f"{branch}: a [{op.op}] op takes no [value]"
            if op.session is not None:
                if op.op != "put":
                    return f"{branch}: a [{op.op}] op takes no [session]"
                problem = session_id_problem(op.session)
                if problem is not None:
                    return f"{branch}: {problem}"
            if op.op in ("put", "delete"):
                if op.key in written:
                    return f"{branch}: key [{op.key}] is put or deleted more than once"
                written.add(op.key)
    return None


def hook_name_problem(name: str) -> str | None:
    if _HOOK_NAME.fullmatch(name) is None:
        return "a hook name must be 1-63 letters, digits, '.', '_' or '-'"
    return None


def snapshot_name_problem(name: str, what: str = "snapshot") -> str | None:
    """`what` is `snapshot` or `repository`; the reason reads as Elasticsearch's."""
    if _SNAPSHOT_NAME.fullmatch(name) is None:
        return (
            f"Invalid {what} name [{name}], must be 1 to 255 lowercase letters, digits, '.', '_', '+' or '-', "
            "starting with a letter or digit"
        )
    return None


def repository_problem(request: PutRepository) -> str | None:
    problem = snapshot_name_problem(request.name, "repository")
    if problem is not None:
        return problem
    if request.type not in REPOSITORY_TYPES:
        return f"[{request.name}] repository type [{request.type}] does not exist; the supported types are {list(REPOSITORY_TYPES)}"
    if request.type == "fs":
        if request.bucket or request.base_path or request.client:
            return f"[{request.name}] an fs repository takes [location] only, not [bucket], [base_path] or [client]"
        if not request.location.startswith("/"):
            return f"[{request.name}] location [{request.location}] must be an absolute path"
        return None
    if request.location:
        return f"[{request.name}] an s3 repository takes [bucket], [base_path] and [client], not [location]"
    for setting, value, parse in (
        ("bucket", request.bucket, parse_bucket),
        ("base_path", request.base_path, parse_base_path),
        ("client", request.client, parse_client_name),
    ):
        try:
            parse(value)
        except ValueError as error:
            return f"[{request.name}] invalid [{setting}]: {error}"
    return None


def restore_problem(request: RestoreSnapshot, registry: SettingsRegistry, current_version: int) -> str | None:
    """Every key named well, with consistent versions, and every setting valid: a damaged or hand-edited
    snapshot must not commit what the API would refuse. Its versions must also leave the cluster room to count
    on: no higher than the cluster's own version or `counters.CEILING`, whichever is higher (the restored
    state's version is one above them, and the nodes take it from the master as any publication). A node-level
    setting that an older version persisted is kept, and ignored, as it is in a running cluster."""
    if set(request.kv) != set(request.kv_versions):
        return f"snapshot [{request.snapshot}] does not give versions for exactly its keys"
    highest = max(current_version, CEILING)
    if request.snapshot_version > highest:
        return (
            f"snapshot [{request.snapshot}] is of version [{request.snapshot_version}], beyond the highest version "
            f"a restore may bring [{highest}]"
        )
    for key, versions in request.kv_versions.items():
        problem = metadata_key_problem(key) or value_problem(key, request.kv.get(key))
        if problem is not None:
            return f"snapshot [{request.snapshot}]: {problem}"
        if not 1 <= versions.create_version <= versions.version <= request.snapshot_version:
            return f"snapshot [{request.snapshot}]: key [{key}] has inconsistent versions (version [{versions.version}], create_version [{versions.create_version}])"
    # The node tool's marker of an unsafe bootstrap is a fact about the snapshot's cluster, not a setting.
    settings = {k: v for k, v in request.persistent_settings.items() if k != UNSAFE_BOOTSTRAP_SETTING}
    try:
        registry.validate_persisted(settings)
    except SettingsError as error:
        return f"snapshot [{request.snapshot}]: {error}"
    return None


def settings_problem(updates: Mapping[str, str | None], registry: SettingsRegistry) -> str | None:
    """A `persistent` settings update: every setting known, dynamic and valid (None removes it: the default)."""
    if not updates:
        return 'no settings to update: give {"persistent": {"setting.name": "value"}}'
    try:
        registry.validate_dynamic(updates)
    except SettingsError as error:
        return str(error)
    return None


def resolve_exclusions(
    request: AddVotingConfigExclusions, nodes: Mapping[str, DiscoveryNode]
) -> list[VotingConfigExclusion]:
    """The exclusions a request asks for. A node that is not in the cluster is excluded by name, with a
    placeholder id that it gets replaced with when it joins."""
    by_name = {node.name: node for node in nodes.values()}
    resolved: list[VotingConfigExclusion] = []
    for name in request.node_names:
        node = by_name.get(name)
        resolved.append(VotingConfigExclusion(node.id if node else f"{ABSENT_PREFIX}{name}", name))
    for node_id in request.node_ids:
        known = nodes.get(node_id)
        resolved.append(VotingConfigExclusion(node_id, known.name if known else ABSENT_PREFIX))
    return resolved


def exclusions_problem(
    request: AddVotingConfigExclusions,
    nodes: Mapping[str, DiscoveryNode],
    existing: tuple[VotingConfigExclusion, ...] | list[VotingConfigExclusion],
    limit: int,
) -> str | None:
    """Names or ids (not both), well formed, within `cluster.max_voting_config_exclusions`, and leaving at
    least one master-eligible node of the cluster able to vote: with none, the voting configuration could
    never move off the excluded nodes and the request would only time out."""
    if bool(request.node_names) == bool(request.node_ids):
        return "you must set [node_names] or [node_ids] but not both"
    try:
        for name in request.node_names:
            parse_node_name(name)
    except ValueError as error:
        return f"invalid parameter [node_names]: {error}"
    for node_id in request.node_ids:
        if not isinstance(node_id, str) or _NODE_ID.fullmatch(node_id) is None:
            return f"invalid parameter [node_ids]: [{node_id!r}] is not a node id"
    to_add = resolve_exclusions(request, nodes)
    existing_ids = {exclusion.node_id for exclusion in existing}
    new = {exclusion.node_id for exclusion in to_add} - existing_ids
    if len(existing_ids) + len(new) > limit:
        return (
            f"add voting config exclusions request for {[e.node_name for e in to_add]} would add "
            f"[{len(new)}] exclusions to the existing [{len(existing_ids)}] which would exceed the maximum "
            f"of [{limit}] set by [cluster.max_voting_config_exclusions]"
        )
    eligible = {node.id for node in nodes.values() if node.master_eligible}
    if eligible and eligible <= existing_ids | new:
        return (
            f"add voting config exclusions request for {[e.node_name for e in to_add]} would exclude every "
            f"master-eligible node of the cluster {sorted(node.name for node in nodes.values() if node.id in eligible)}"
            "; at least one must remain to hold the voting configuration"
        )
    return None


def request_problem(request: ClientRequest, state: ClusterState, settings: Settings) -> str | None:
    """The master's check of any client request against its current state and settings."""
    if isinstance(request, KvPut):
        problem = metadata_key_problem(request.key) or value_problem(request.key, request.value)
        if problem is None and request.session is not None:
            problem = session_id_problem(request.session)
        return problem
    if isinstance(request, KvDelete | KvGet):
        return stored_key_problem(request.key, state)
    if isinstance(request, KvDeletePrefix):
        return key_prefix_problem(request.prefix)
    if isinstance(request, SessionCreate):
        return session_create_problem(request)
    if isinstance(request, SessionKeepAlive | SessionEnd):
        return session_id_problem(request.session)
    if isinstance(request, Txn):
        return txn_problem(request)
    if isinstance(request, UpdateSettings):
        return settings_problem(request.persistent, settings.registry)
    if isinstance(request, AddVotingConfigExclusions):
        limit = settings[MAX_VOTING_CONFIG_EXCLUSIONS]
        return exclusions_problem(request, state.nodes, state.coordination.voting_config_exclusions, limit)
    if isinstance(request, PutRepository):
        return repository_problem(request)
    if isinstance(request, DeleteRepository):
        return snapshot_name_problem(request.name, "repository")
    if isinstance(request, RestoreSnapshot):
        return restore_problem(request, settings.registry, state.version)
    return None
