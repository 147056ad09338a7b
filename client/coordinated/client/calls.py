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
from coordinated.client.models import (
    Compare,
    KeyCount,
    KeyValue,
    Listing,
    PrefixDeleted,
    RangePage,
    SessionInfo,
    TxnResult,
    WatchBatch,
    WatchEvent,
    WriteResult,
)
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
    params: Mapping[str, str | list[str]] = field(default_factory=dict)
    body: Any = NO_BODY
    retry: Retry = Retry.ALWAYS
    wait_s: float = 0.0  # how long the server may hold the request (a watch), on top of the usual timeout
    # The call takes `master_timeout` (how long the master may take), which the client may set for all.
    master_timeout: bool = True
    # A held stream: a 200's body stays open for the flow to read line by line (`parse` gets the headers).
    stream: bool = False


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


def key_value(entry: Mapping[str, Any], key: str | None = None) -> KeyValue:
    """A key as the API shows it (a `GET`, a range read's entry, a write's `prev`)."""
    return KeyValue(
        entry["key"] if key is None else key,
        entry.get("value"),
        entry["version"],
        entry["create_version"],
        entry.get("session"),
    )


def _write(status: int, body: Any) -> WriteResult:
    body = ok(status, body)
    prev = body.get("prev")
    return WriteResult(
        body["key"], body["term"], body["version"], None if prev is None else key_value(prev, body["key"])
    )


def _session_write(session: str | None) -> Callable[[int, Any], WriteResult]:
    def parse(status: int, body: Any) -> WriteResult:
        if status == 404 and session is not None:
            error = api_error(status, body)
            raise SessionNotFound(error.status, error.type, error.reason, body)
        return _write(status, body)

    return parse


def get(key: str, local: bool = False) -> Call[KeyValue]:
    def parse(status: int, body: Any) -> KeyValue:
        return key_value(ok(status, body))

    return Call("GET", key_path(key), parse, {"local": "true"} if local else {})


def put(
    key: str,
    value: Any,
    *,
    if_version: int | None = None,
    create: bool = False,
    session: str | None = None,
    prev_value: bool = False,
) -> Call[WriteResult]:
    params: dict[str, str | list[str]] = {}
    if prev_value:
        params["prev_value"] = "true"
    if create:
        params["op_type"] = "create"
    if if_version is not None:
        params["if_version"] = str(if_version)
    if session is not None:
        params["session"] = session
    # A blind retry of an applied write would answer with its own value as the previous one.
    conditional = create or if_version is not None or prev_value
    return Call(
        "PUT",
        key_path(key),
        _session_write(session),
        params,
        value,
        Retry.NEVER_BLIND if conditional else Retry.ALWAYS,
    )


def delete(key: str, *, if_version: int | None = None, prev_value: bool = False) -> Call[WriteResult]:
    params: dict[str, str | list[str]] = {} if if_version is None else {"if_version": str(if_version)}
    if prev_value:
        params["prev_value"] = "true"
    retry = Retry.NEVER_BLIND if params else Retry.ALWAYS
    return Call("DELETE", key_path(key), _write, params, retry=retry)


def _flag(name: str, on: bool) -> dict[str, str | list[str]]:
    return {name: "true"} if on else {}


def range_page(
    prefix: str,
    *,
    keys_only: bool = False,
    limit: int | None = None,
    after: str | None = None,
    at_version: int | None = None,
    local: bool = False,
) -> Call[RangePage]:
    """One page of the keys under `prefix`; a continuation names the first page's `version` as `at_version`
    and the previous page's `next` as `after` (410 `ChangesGone` once its node no longer holds that state)."""

    def parse(status: int, body: Any) -> RangePage:
        body = ok(status, body)
        return RangePage(body["version"], [key_value(entry) for entry in body["keys"]], body["more"], body.get("next"))

    params: dict[str, str | list[str]] = {"prefix": checked_prefix(prefix)}
    params |= _flag("keys_only", keys_only) | _flag("local", local)
    if limit is not None:
        params["limit"] = str(limit)
    if after is not None:
        params["after"] = after
    if at_version is not None:
        params["at_version"] = str(at_version)
    return Call("GET", "/_cluster/metadata", parse, params)


def count(prefix: str, *, local: bool = False) -> Call[KeyCount]:
    def parse(status: int, body: Any) -> KeyCount:
        body = ok(status, body)
        return KeyCount(body["version"], body["count"])

    params: dict[str, str | list[str]] = {"prefix": checked_prefix(prefix), "count_only": "true"}
    return Call("GET", "/_cluster/metadata", parse, params | _flag("local", local))


def delete_prefix(prefix: str, *, every_key: bool = False) -> Call[PrefixDeleted]:
    """One call: the first keys under `prefix` (at most 1,000 a call, a node's limit); `more` says keys are left."""

    def parse(status: int, body: Any) -> PrefixDeleted:
        body = ok(status, body)
        return PrefixDeleted(body["prefix"], body["deleted"], body["term"], body["version"], body.get("more", False))

    if not prefix and not every_key:
        raise InvalidKey("an empty prefix deletes every key: pass every_key=True to mean it")
    params = {"prefix": checked_prefix(prefix)} | ({"all": "true"} if every_key and not prefix else {})
    # Retried like an unconditional delete: a repeat deletes what is under the prefix then.
    return Call("DELETE", "/_cluster/metadata", parse, params)


def _compare(compare: Compare | tuple[str, int]) -> dict[str, Any]:
    if isinstance(compare, Compare):
        checked_key(compare.key)
        return compare.to_api()
    key, version = compare
    return {"key": checked_key(key), "version": version}


def txn(
    compare: Sequence[Compare | tuple[str, int]],
    success: Sequence[Mapping[str, Any]],
    failure: Sequence[Mapping[str, Any]],
) -> Call[TxnResult]:
    def parse(status: int, body: Any) -> TxnResult:
        body = ok(status, body)
        return TxnResult(body["succeeded"], body["version"], list(body["results"]))

    for op in (*success, *failure):
        if isinstance(op.get("key"), str):
            checked_key(op["key"])
        if isinstance(op.get("prefix"), str):
            checked_prefix(op["prefix"])
    payload = {
        "compare": [_compare(one) for one in compare],
        "success": [dict(op) for op in success],
        "failure": [dict(op) for op in failure],
    }
    return Call("POST", "/_cluster/metadata/_txn", parse, body=payload, retry=Retry.NEVER_BLIND)


def put_op(key: str, value: Any, session: str | None = None, *, prev_value: bool = False) -> dict[str, Any]:
    """A transaction's put; with `session`, the key is ephemeral; with `prev_value`, its result has `prev`."""
    op: dict[str, Any] = {"op": "put", "key": key, "value": value}
    if session is not None:
        op["session"] = session
    return op | ({"prev_value": True} if prev_value else {})


def delete_op(key: str, *, prev_value: bool = False) -> dict[str, Any]:
    return {"op": "delete", "key": key} | ({"prev_value": True} if prev_value else {})


def delete_prefix_op(prefix: str) -> dict[str, Any]:
    """A transaction's delete of every key under `prefix`; its result has `deleted`, how many."""
    return {"op": "delete_prefix", "prefix": prefix}


def get_op(key: str) -> dict[str, Any]:
    return {"op": "get", "key": key}


def watch(prefix: str, after_version: int | None, timeout_s: float, local: bool = False) -> Call[WatchBatch]:
    def parse(status: int, body: Any) -> WatchBatch:
        body = ok(status, body)
        events = [WatchEvent(e["type"], e["key"], e.get("value"), e["version"]) for e in body["events"]]
        return WatchBatch(body["version"], events)

    params: dict[str, str | list[str]] = {"prefix": checked_prefix(prefix), "timeout": duration(timeout_s, "timeout")}
    if after_version is not None:
        params["after_version"] = str(after_version)
    if local:
        params["local"] = "true"
    return Call("GET", "/_cluster/metadata/_watch", parse, params, wait_s=timeout_s)


# How long a stream may stay silent before the client takes its connection for dead and resumes elsewhere:
# a node sends a progress line every `watch.stream.progress_interval` (10 s by default) when idle.
STREAM_SILENCE_S = 30.0


def watch_stream(
    prefixes: Sequence[str], after_version: int | None, prev_value: bool, only: str | None, local: bool
) -> Call[int | None]:
    """Opens a streaming watch (its lines are read by the flow); the result is where the stream starts."""
    if only not in (None, "put", "delete"):
        raise ValueError(f"filter must be 'put' or 'delete', got {only!r}")
    params: dict[str, str | list[str]] = {"stream": "true", "prefix": [checked_prefix(p) for p in prefixes]}
    params |= _flag("prev_value", prev_value) | _flag("local", local)
    if after_version is not None:
        params["after_version"] = str(after_version)
    if only is not None:
        params["filter"] = only
    return Call("GET", "/_cluster/metadata/_watch", _stream_start, params, wait_s=STREAM_SILENCE_S, stream=True)


# The header of a stream's answer that says where it starts: it reports every change after this version.
AFTER_VERSION_HEADER = "X-Coordinated-After-Version"


def _stream_start(status: int, headers: Any) -> int | None:
    """A stream's start, from its answer's headers (None from a node too old to send it)."""
    ok(status, headers)
    start = headers.get(AFTER_VERSION_HEADER) if headers is not None else None
    return int(start) if start is not None and start.isdigit() else None


def reset_events(prefix: str, listing: Listing) -> list[WatchEvent]:
    """What a watch reports after it re-read a prefix: `reset`, then a `put` of every key there."""
    return [
        WatchEvent("reset", prefix, None, listing.version),
        *(WatchEvent("put", kv.key, kv.value, listing.version) for kv in listing.keys),
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
