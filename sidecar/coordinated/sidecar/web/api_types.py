"""The typed bodies of the client API: what each route takes and answers, as msgspec structs.

The OpenAPI document (`coordinated.sidecar.web.openapi`) is generated from these, so they describe the JSON the
handlers send. Answers are open (a client must ignore fields it does not know); request bodies are closed
(an unknown field is refused with a 400, so a typo is not silently ignored).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from coordinated.coordination.requests.transactions import TxnCompare, TxnOp

Omitted = msgspec.UnsetType  # a field an answer has only in some cases


# -- errors -------------------------------------------------------------------------------------------------


class ErrorDetail(msgspec.Struct):
    type: str  # e.g. `illegal_argument_exception`, `version_conflict_engine_exception`
    reason: str  # for people: names the parameter, key or limit at fault


class ErrorAnswer(msgspec.Struct):
    """Elasticsearch's error shape: every 4xx and 5xx answer of the client API but `GET /readyz`'s 503."""

    error: ErrorDetail
    status: int  # the HTTP status, repeated


# -- request bodies -----------------------------------------------------------------------------------------


class TxnBody(msgspec.Struct, forbid_unknown_fields=True):
    """If every compare holds, the success ops run, otherwise the failure ops: all in one committed state."""

    compare: list[TxnCompare] = []
    success: list[TxnOp] = []
    failure: list[TxnOp] = []


class SessionBody(msgspec.Struct, forbid_unknown_fields=True):
    """Give `ttl` (a time value such as `30s`: the session ends unless kept alive within it) or `node` (the
    session lives as long as that node is a member of the cluster)."""

    ttl: str | None = None
    node: str | None = None


class SettingsBody(msgspec.Struct, forbid_unknown_fields=True):
    """Flat (`{"a.b": 1}`) or nested (`{"a": {"b": 1}}`) keys; string, number or boolean values; null resets."""

    persistent: dict[str, Any] = {}


class RepositorySettings(msgspec.Struct, forbid_unknown_fields=True):
    location: str  # under one of the node's `path.repo` roots
    compress: Any | Omitted = msgspec.UNSET  # accepted and ignored, as Elasticsearch's fs repository allows it


class RepositoryBody(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["fs"]
    settings: RepositorySettings


class SnapshotBody(msgspec.Struct, forbid_unknown_fields=True):
    include_global_state: bool | Omitted = msgspec.UNSET  # a snapshot always holds the global state
    metadata: Any | Omitted = msgspec.UNSET  # accepted and ignored


class RestoreBody(msgspec.Struct, forbid_unknown_fields=True):
    """A restore brings the snapshot's global state, the only state a snapshot holds: `include_global_state`
    may be given, as Elasticsearch's clients send it, but only as true."""

    include_global_state: Annotated[bool, msgspec.Meta(extra_json_schema={"const": True})] | Omitted = msgspec.UNSET


# -- answers ------------------------------------------------------------------------------------------------


class VersionAnswer(msgspec.Struct):
    """A node's release (`number`, as `coordinated --version` prints it) and wire version."""

    number: str
    wire_version: int


class OwnVersionAnswer(msgspec.Struct):
    number: str
    wire_version: int
    minimum_wire_compatibility_version: int  # the oldest wire version this node talks to


class NodeInfo(msgspec.Struct):
    name: str
    node_id: str
    cluster_name: str
    cluster_uuid: str
    transport_address: str
    mode: str  # `leader`, `follower` or `candidate`
    term: int
    version: OwnVersionAnswer
    tagline: str


class ClusterStateAnswer(msgspec.Struct):
    cluster_name: str
    cluster_uuid: str
    version: int
    term: int
    state_uuid: str
    master_node: str | None
    nodes: dict[str, Any]
    metadata: dict[str, Any]
    wait_for_timed_out: bool | Omitted = msgspec.UNSET  # with `wait_for_version`


class NodeProblemAnswer(msgspec.Struct):
    kind: str
    reason: str


class HealthAnswer(msgspec.Struct):
    cluster_name: str
    cluster_uuid: str
    status: Literal["green", "yellow", "red"]
    timed_out: bool
    master_node: str | None
    number_of_nodes: int
    number_of_master_eligible_nodes: int
    formation_problem: str | None
    persistence_problem: str | None
    problems: list[NodeProblemAnswer]
    mode: str
    term: int
    version: int
    cluster_version: VersionAnswer  # the lowest among the nodes and voters (an unknown one counts as 0.1.0)
    node_versions: dict[str, VersionAnswer | None]  # by node name; null: not known to this node
    features: dict[str, bool]  # each feature added since the first release: on once every node has it


class MasterRow(msgspec.Struct):
    id: str
    host: str
    ip: str
    node: str


class NodeRow(msgspec.Struct, rename={"node_role": "node.role"}):
    id: str
    name: str
    ip: str
    transport_address: str
    node_role: str  # `m` (master-eligible) or `-`
    master: str  # `*` for the master, else `-`
    version: str | None  # the node's release; null when this node does not know it
    wire_version: int | None


class PrevKey(msgspec.Struct):
    """A key as it was before a write (asked for with `prev_value`)."""

    value: Any
    version: int
    create_version: int
    session: str | Omitted = msgspec.UNSET


class WriteAnswer(msgspec.Struct):
    """An acknowledged write: committed by a quorum in the state of this `version`."""

    key: str
    term: int
    version: int
    prev: PrevKey | Omitted | None = msgspec.UNSET  # with `prev_value`: null if the key did not exist


class PrefixDeleted(msgspec.Struct):
    prefix: str
    deleted: int  # how many keys (at most 1,000 in one call)
    more: bool  # keys are left under the prefix: call again
    term: int
    version: int


class KeyCount(msgspec.Struct):
    """`count_only`: how many keys are under the prefix in the state of this `version`."""

    version: int
    count: int


class KeyAnswer(msgspec.Struct):
    key: str
    value: Any
    version: int
    create_version: int
    session: str | Omitted = msgspec.UNSET  # an ephemeral key's session


class TxnOpAnswer(msgspec.Struct):
    op: Literal["put", "delete", "get", "delete_prefix"]
    key: str | Omitted = msgspec.UNSET  # every op's but delete_prefix's
    prefix: str | Omitted = msgspec.UNSET  # a delete_prefix's
    prev: PrevKey | Omitted | None = msgspec.UNSET  # a put's or a delete's, with `prev_value`
    found: bool | Omitted = msgspec.UNSET  # a get's
    deleted: bool | int | Omitted = msgspec.UNSET  # a delete's (whether it existed), a delete_prefix's (how many)
    more: bool | Omitted = msgspec.UNSET  # a delete_prefix's: keys are left under the prefix (at most 1,000 a call)
    value: Any | Omitted = msgspec.UNSET  # a get's, when found
    version: int | Omitted = msgspec.UNSET
    create_version: int | Omitted = msgspec.UNSET


class TxnAnswer(msgspec.Struct):
    succeeded: bool
    version: int
    results: list[TxnOpAnswer]


class WatchEventAnswer(msgspec.Struct):
    type: str  # `put` or `delete`
    key: str
    value: Any
    version: int


class WatchAnswer(msgspec.Struct):
    version: int  # watch again with `after_version` set to this
    events: list[WatchEventAnswer]


class SessionAnswer(msgspec.Struct):
    id: str
    ttl: str | Omitted = msgspec.UNSET  # a TTL session's
    node: str | Omitted = msgspec.UNSET  # a node session's node (its name while it is a member)
    node_id: str | Omitted = msgspec.UNSET


class ListedSession(SessionAnswer):
    keys: list[str] = []  # its ephemeral keys


class SessionsAnswer(msgspec.Struct):
    version: int
    sessions: list[ListedSession]


class Acknowledged(msgspec.Struct):
    acknowledged: bool


class SettingsAnswer(msgspec.Struct):
    persistent: dict[str, Any]
    transient: dict[str, Any]


class SettingsUpdated(SettingsAnswer):
    acknowledged: bool


class Exclusion(msgspec.Struct):
    node_id: str
    node_name: str


class ExclusionsAnswer(msgspec.Struct):
    acknowledged: bool
    voting_config_exclusions: list[Exclusion]


class Healthz(msgspec.Struct):
    status: str


class Readiness(msgspec.Struct):
    """200 with `ready: true` and the master; 503 with `ready: false` and the reason."""

    ready: bool
    master_node: str | Omitted = msgspec.UNSET
    reason: str | Omitted = msgspec.UNSET


class HookAnswer(msgspec.Struct):
    url: str | None
    unix_socket: str | None
    path: str
    delivered: int
    failures: int
    last_error: str | None
    last_version: int | None


class HookPut(msgspec.Struct):
    acknowledged: bool
    created: bool


class RepositoryAnswer(msgspec.Struct):
    type: str
    settings: dict[str, Any]


class SnapshotInfo(msgspec.Struct):
    snapshot: str
    repository: str
    state: Literal["SUCCESS", "FAILED"]  # FAILED: a damaged file, named in `failures`
    start_time_in_millis: int
    end_time_in_millis: int
    failures: list[str]


class SnapshotCreated(msgspec.Struct):
    accepted: bool | Omitted = msgspec.UNSET  # without `wait_for_completion`
    snapshot: SnapshotInfo | Omitted = msgspec.UNSET  # with it


class SnapshotsAnswer(msgspec.Struct):
    snapshots: list[SnapshotInfo]
    total: int
    remaining: int


class RestoredSnapshot(msgspec.Struct):
    snapshot: str
    repository: str
    keys: int
    version: int
    term: int


class RestoreAnswer(msgspec.Struct):
    snapshot: RestoredSnapshot
