"""Each API call as data: what to send, how to read the answer, and whether a lost answer may be retried.

Every call the client makes is built here, so the flows that send them (`perform`) and the drivers stay
free of paths and JSON shapes. Key names are checked against `coordinated.key_names` and percent-encoded
whole (every byte that is not unreserved, except `/`): the name the server stores is the name given, or the
call is refused here with `InvalidKey` before anything is sent.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from coordinated.client.errors import InvalidKey, SessionNotFound, api_error
from coordinated.client.models import KeyValue, SessionInfo, TxnResult, WatchBatch, WatchEvent, WriteResult
from coordinated.key_names import key_problem, prefix_problem

T = TypeVar("T")
NO_BODY = object()


class Retry(enum.Enum):
    """What the client may do when it cannot know whether the cluster applied a call."""

    ALWAYS = "always"  # reads, watches, and writes whose repetition ends in the same state
    NEVER_BLIND = "never_blind"  # conditional writes and transactions: raise OutcomeUnknown instead


# 503s that mean the request was certainly not applied: safe to retry any call elsewhere.
NOT_APPLIED_503 = frozenset(
    {"cluster_block_exception", "process_cluster_event_timeout_exception", "master_not_discovered_exception"}
)


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str  # percent-encoded
    parse: Callable[[int, Any], T]
    params: Mapping[str, str] = field(default_factory=dict)
    body: Any = NO_BODY
    retry: Retry = Retry.ALWAYS
    wait_s: float = 0.0  # how long the server may hold the request (a watch), on top of the usual timeout
    # The call takes `master_timeout` (how long the master may take), which the client may set for all.
    master_timeout: bool = True


def duration(seconds: float, name: str) -> str:
    """A time value as the API takes it: whole seconds as `30s`, anything else in milliseconds."""
    if seconds < 0:
        raise ValueError(f"{name} must not be negative, got {seconds}")
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def checked_key(key: str) -> str:
    problem = key_problem(key)
    if problem is not None:
        raise InvalidKey(problem)
    return key


def checked_prefix(prefix: str) -> str:
    problem = prefix_problem(prefix)
    if problem is not None:
        raise InvalidKey(problem)
    return prefix


def key_path(key: str) -> str:
    """The path that names `key`: `/` stays literal (hierarchical names), every other byte that is not
    unreserved is percent-encoded, `%` included, so the server decodes exactly the name given."""
    return "/_cluster/metadata/" + quote(checked_key(key), safe="/")


def segment(name: str) -> str:
    """One path segment, every reserved byte encoded (session ids, repository and snapshot names)."""
    return quote(name, safe="")


def ok(status: int, body: Any) -> Any:
    if status >= 400:
        raise api_error(status, body)
    return body


def _write(status: int, body: Any) -> WriteResult:
    body = ok(status, body)
    return WriteResult(body["key"], body["term"], body["version"])


def _session_write(session: str | None) -> Callable[[int, Any], WriteResult]:
    def parse(status: int, body: Any) -> WriteResult:
        if status == 404 and session is not None:
            error = api_error(status, body)
            raise SessionNotFound(error.status, error.type, error.reason, body)
        return _write(status, body)

    return parse


def get(key: str, local: bool = False) -> Call[KeyValue]:
    def parse(status: int, body: Any) -> KeyValue:
        body = ok(status, body)
        return KeyValue(body["key"], body["value"], body["version"], body["create_version"], body.get("session"))

    return Call("GET", key_path(key), parse, {"local": "true"} if local else {})


def put(
    key: str,
    value: Any,
    *,
    if_version: int | None = None,
    create: bool = False,
    session: str | None = None,
) -> Call[WriteResult]:
    params: dict[str, str] = {}
    if create:
        params["op_type"] = "create"
    if if_version is not None:
        params["if_version"] = str(if_version)
    if session is not None:
        params["session"] = session
    conditional = create or if_version is not None
    return Call(
        "PUT",
        key_path(key),
        _session_write(session),
        params,
        value,
        Retry.NEVER_BLIND if conditional else Retry.ALWAYS,
    )


def delete(key: str, *, if_version: int | None = None) -> Call[WriteResult]:
    params = {} if if_version is None else {"if_version": str(if_version)}
    retry = Retry.NEVER_BLIND if params else Retry.ALWAYS
    return Call("DELETE", key_path(key), _write, params, retry=retry)


def txn(
    compare: Sequence[tuple[str, int]], success: Sequence[Mapping[str, Any]], failure: Sequence[Mapping[str, Any]]
) -> Call[TxnResult]:
    def parse(status: int, body: Any) -> TxnResult:
        body = ok(status, body)
        return TxnResult(body["succeeded"], body["version"], list(body["results"]))

    for op in (*success, *failure):
        if isinstance(op.get("key"), str):
            checked_key(op["key"])
    payload = {
        "compare": [{"key": checked_key(key), "version": version} for key, version in compare],
        "success": [dict(op) for op in success],
        "failure": [dict(op) for op in failure],
    }
    return Call("POST", "/_cluster/metadata/_txn", parse, body=payload, retry=Retry.NEVER_BLIND)


def put_op(key: str, value: Any, session: str | None = None) -> dict[str, Any]:
    """A transaction's put; with `session`, the key is ephemeral."""
    op = {"op": "put", "key": key, "value": value}
    return op if session is None else {**op, "session": session}


def delete_op(key: str) -> dict[str, Any]:
    return {"op": "delete", "key": key}


def get_op(key: str) -> dict[str, Any]:
    return {"op": "get", "key": key}


def watch(prefix: str, after_version: int | None, timeout_s: float, local: bool = False) -> Call[WatchBatch]:
    def parse(status: int, body: Any) -> WatchBatch:
        body = ok(status, body)
        events = [WatchEvent(e["type"], e["key"], e.get("value"), e["version"]) for e in body["events"]]
        return WatchBatch(body["version"], events)

    params = {"prefix": checked_prefix(prefix), "timeout": duration(timeout_s, "timeout")}
    if after_version is not None:
        params["after_version"] = str(after_version)
    if local:
        params["local"] = "true"
    return Call("GET", "/_cluster/metadata/_watch", parse, params, wait_s=timeout_s)


def snapshot(prefix: str) -> Call[tuple[int, dict[str, Any]]]:
    """The keys under a prefix and the state version they were read at (linearizable)."""

    def parse(status: int, body: Any) -> tuple[int, dict[str, Any]]:
        body = ok(status, body)
        kv = body["metadata"]["kv"]
        return body["version"], {key: value for key, value in kv.items() if key.startswith(prefix)}

    return Call("GET", "/_cluster/state", parse)


def reset_events(prefix: str, version: int, values: Mapping[str, Any]) -> list[WatchEvent]:
    return [
        WatchEvent("reset", prefix, None, version),
        *(WatchEvent("put", key, values[key], version) for key in sorted(values)),
    ]


def create_session(ttl_s: float | None = None, node: str | None = None) -> Call[SessionInfo]:
    if (ttl_s is None) == (node is None):
        raise ValueError("a session has either a ttl or a node")
    payload: dict[str, Any] = {"node": node} if node is not None else {"ttl": duration(ttl_s or 0, "ttl")}

    def parse(status: int, body: Any) -> SessionInfo:
        body = ok(status, body)
        return SessionInfo(body["id"], body.get("ttl"), body)

    # A lost answer leaves at most an unused session behind, which expires on its own.
    return Call("POST", "/_sessions", parse, body=payload)


def _session_call(session: str) -> Callable[[int, Any], None]:
    def parse(status: int, body: Any) -> None:
        if status == 404:
            error = api_error(status, body)
            raise SessionNotFound(error.status, error.type, error.reason, body)
        ok(status, body)

    return parse


def keepalive(session: str) -> Call[None]:
    path = f"/_sessions/{segment(session)}/_keepalive"
    return Call("PUT", path, _session_call(session))


def end_session(session: str) -> Call[None]:
    return Call("DELETE", f"/_sessions/{segment(session)}", _session_call(session))


def list_sessions() -> Call[Any]:
    return Call("GET", "/_sessions", ok)


def cat_master() -> Call[str | None]:
    def parse(status: int, body: Any) -> str | None:
        if status != 200 or not isinstance(body, list) or not body:
            return None
        return str(body[0].get("node"))

    return Call("GET", "/_cat/master", parse, {"format": "json"}, master_timeout=False)


def node_name() -> Call[str | None]:
    def parse(status: int, body: Any) -> str | None:
        return str(body["name"]) if status == 200 and isinstance(body, dict) and "name" in body else None

    return Call("GET", "/", parse, master_timeout=False)
