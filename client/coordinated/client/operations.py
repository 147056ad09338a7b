"""The client's calls as flows, each written once: `Client` and `AsyncClient` bind every function of
`__all__` as a method (a test checks that both bind exactly these). The docstrings are the methods'."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from coordinated.client import admin_calls, calls, security_calls
from coordinated.client.base import ClientBase, attempt, perform
from coordinated.client.endpoints import Retryable
from coordinated.client.errors import ChangesGone, ListingLost
from coordinated.client.flow import CloseStream, Emit, Flow, ReadLine, Sleep, Stream
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
from coordinated.client.watch_stream import MalformedStream, StreamPosition, event_of, parse_line

__all__ = [
    "add_voting_config_exclusions",
    "authenticate",
    "cas",
    "clear_voting_config_exclusions",
    "cluster_health",
    "cluster_settings",
    "cluster_state",
    "count",
    "create",
    "create_session",
    "create_snapshot",
    "delete",
    "delete_prefix",
    "delete_quota",
    "delete_role",
    "delete_role_mapping",
    "delete_snapshot",
    "end_session",
    "get",
    "get_range",
    "keepalive",
    "list_prefix",
    "list_snapshots",
    "node_info",
    "put",
    "put_cluster_settings",
    "put_fs_repository",
    "put_quota",
    "put_repository",
    "put_role",
    "put_role_mapping",
    "quotas",
    "range_pages",
    "restore_snapshot",
    "role_mappings",
    "roles",
    "sessions",
    "txn",
    "watch",
    "watch_once",
]

WATCH_TIMEOUT_S = 30.0
# How many times `list_prefix` lists again from the first page when a listing's state is lost mid-way.
LISTING_ATTEMPTS = 3
# The pause before a stream that ended at once is opened again, doubling up to the second.
STREAM_REOPEN_S = (0.05, 1.0)

# -- keys ---------------------------------------------------------------------------------------------------


def get(client: ClientBase, key: str, *, local: bool = False) -> Flow[KeyValue]:
    """Linearizable unless `local` (this node's applied state). Raises NotFound."""
    return (yield from perform(client, calls.get(key, local)))


def put(
    client: ClientBase, key: str, value: Any, *, session: str | None = None, prev_value: bool = False
) -> Flow[WriteResult]:
    """An unconditional write (retried if its outcome is unknown: writing the same value twice is harmless).
    With `session` the key is ephemeral: deleted when the session ends. With `prev_value` the result's `prev`
    is the key before the write; such a write is not retried blindly (OutcomeUnknown instead), since a retry
    would report its own value as the previous one."""
    return (yield from perform(client, calls.put(key, value, session=session, prev_value=prev_value)))


def create(client: ClientBase, key: str, value: Any, *, session: str | None = None) -> Flow[WriteResult]:
    """Writes only if the key does not exist; raises VersionConflict if it does."""
    return (yield from perform(client, calls.put(key, value, create=True, session=session)))


def cas(client: ClientBase, key: str, value: Any, version: int, *, session: str | None = None) -> Flow[WriteResult]:
    """Writes only if the key's version is `version` (0: absent); raises VersionConflict otherwise."""
    return (yield from perform(client, calls.put(key, value, if_version=version, session=session)))


def delete(
    client: ClientBase, key: str, *, if_version: int | None = None, prev_value: bool = False
) -> Flow[WriteResult]:
    """Deletes the key; with `if_version`, only if that is its version (VersionConflict otherwise). With
    `prev_value` the result's `prev` is the key before the delete (None: there was none)."""
    return (yield from perform(client, calls.delete(key, if_version=if_version, prev_value=prev_value)))


def delete_prefix(client: ClientBase, prefix: str, *, every_key: bool = False) -> Flow[PrefixDeleted]:
    """Deletes every key under `prefix` (`""` with `every_key=True`: every key), in key order, in committed
    states of at most 1,000 keys each (a node deletes no more in one), calling until none is left; `deleted`
    counts them all, `version` is the last state's."""
    total = 0
    while True:
        done = yield from perform(client, calls.delete_prefix(prefix, every_key=every_key))
        total += done.deleted
        if not done.more:
            return PrefixDeleted(done.prefix, total, done.term, done.version)


def txn(
    client: ClientBase,
    compare: Sequence[Compare | tuple[str, int]],
    success: Sequence[Mapping[str, Any]],
    failure: Sequence[Mapping[str, Any]] = (),
) -> Flow[TxnResult]:
    """All or nothing in one committed state. A compare is a `Compare` (on `version`, `create_version` or
    `value`, with `=`, `!=`, `<` or `>`), or `(key, version)` for `Compare.version(key, "=", version)`. Build
    ops with `put_op`, `delete_op`, `delete_prefix_op` and `get_op`."""
    return (yield from perform(client, calls.txn(compare, success, failure)))


# -- range reads --------------------------------------------------------------------------------------------


def get_range(
    client: ClientBase,
    prefix: str = "",
    *,
    keys_only: bool = False,
    limit: int | None = None,
    after: str | None = None,
    at_version: int | None = None,
    local: bool = False,
) -> Flow[RangePage]:
    """One page of the keys under `prefix` (matched literally), in key order: linearizable unless `local`.
    `limit`: at most this many keys (the server's default 1,000, at most 10,000); `after`: only keys above
    it (a page's `next`); `at_version`: a continuation read from the state of the first page (ChangesGone
    if the node serving it no longer holds it). `range_pages` and `list_prefix` follow the pages for you."""
    call = calls.range_page(prefix, keys_only=keys_only, limit=limit, after=after, at_version=at_version, local=local)
    return (yield from perform(client, call))


def _first_page(
    client: ClientBase, prefix: str, keys_only: bool, page_size: int | None, local: bool
) -> Flow[tuple[RangePage, str]]:
    """The first page of a listing, and the address of the node that served it (which holds its state)."""
    page = yield from get_range(client, prefix, keys_only=keys_only, limit=page_size, local=local)
    return page, client.endpoints.current


def _next_page(
    client: ClientBase, address: str, prefix: str, page: RangePage, keys_only: bool, page_size: int | None
) -> Flow[RangePage]:
    """The page after `page`, from the state of the listing's first page, at the node holding it."""
    call = calls.range_page(prefix, keys_only=keys_only, limit=page_size, after=page.next, at_version=page.version)
    try:
        return (yield from attempt(client, address, call))
    except ChangesGone as gone:
        raise ListingLost(f"the listing of {prefix!r} at version {page.version} is gone: {gone.reason}") from gone
    except Retryable as failed:
        raise ListingLost(f"the node serving the listing of {prefix!r} failed: {failed.error}") from failed.error


def range_pages(
    client: ClientBase,
    prefix: str = "",
    *,
    keys_only: bool = False,
    page_size: int | None = None,
    local: bool = False,
) -> Stream[RangePage]:
    """Every page of the keys under `prefix`, all read from the state of the first page (whose `version`
    every page carries): the first page is linearizable unless `local`, and the next ones are read from the
    same state at the node that served it. If that node no longer holds the state (more than 60 s between
    pages, or it failed), raises ListingLost after the pages already given: list again."""
    page, address = yield from _first_page(client, prefix, keys_only, page_size, local)
    yield Emit(page)
    while page.more:
        page = yield from _next_page(client, address, prefix, page, keys_only, page_size)
        yield Emit(page)


def list_prefix(
    client: ClientBase,
    prefix: str = "",
    *,
    keys_only: bool = False,
    page_size: int | None = None,
    local: bool = False,
) -> Flow[Listing]:
    """Every key under `prefix`, in key order, from one state version (see `range_pages`). If the listing's
    state is lost mid-way, it lists again from the first page, up to 3 times in all (then ListingLost)."""
    for attempt_number in range(1, LISTING_ATTEMPTS + 1):
        page, address = yield from _first_page(client, prefix, keys_only, page_size, local)
        keys = list(page.keys)
        try:
            while page.more:
                page = yield from _next_page(client, address, prefix, page, keys_only, page_size)
                keys.extend(page.keys)
        except ListingLost:
            if attempt_number == LISTING_ATTEMPTS:
                raise
            continue
        return Listing(page.version, keys)
    raise AssertionError("unreachable")


def count(client: ClientBase, prefix: str = "", *, local: bool = False) -> Flow[KeyCount]:
    """How many keys are under `prefix`, and the state version counted (linearizable unless `local`)."""
    return (yield from perform(client, calls.count(prefix, local=local)))


# -- watches ------------------------------------------------------------------------------------------------


def watch_once(
    client: ClientBase,
    prefix: str = "",
    after_version: int | None = None,
    *,
    timeout: float = WATCH_TIMEOUT_S,
    local: bool = False,
) -> Flow[WatchBatch]:
    """One long poll: the changes after `after_version` (None: from now), or none after `timeout`."""
    return (yield from perform(client, calls.watch(prefix, after_version, timeout, local)))


def next_events(
    client: ClientBase, prefix: str, after: int | None, *, timeout: float, local: bool = False
) -> Flow[tuple[list[WatchEvent], int]]:
    """The next changes under `prefix` and the version to resume from. A watch that fell behind the node's
    change log (410) re-reads the prefix instead: a `reset` event, then a `put` of every key there."""
    try:
        batch = yield from watch_once(client, prefix, after, timeout=timeout, local=local)
    except ChangesGone:
        listing = yield from list_prefix(client, prefix, local=local)
        return calls.reset_events(prefix, listing), listing.version
    return batch.events, batch.version


def _re_read(client: ClientBase, prefixes: list[str], local: bool, position: StreamPosition) -> Stream[WatchEvent]:
    """After the watch fell behind: each prefix listed, a `reset` and its keys; the watch goes on from there."""
    listings = {}
    for watched in prefixes:
        listings[watched] = yield from list_prefix(client, watched, local=local)
    for watched, listing in listings.items():
        for reset in calls.reset_events(watched, listing):
            yield Emit(reset)
    position.reset({watched: listing.version for watched, listing in listings.items()})


def watch(
    client: ClientBase,
    prefix: str | Sequence[str] = "",
    after_version: int | None = None,
    *,
    prev_value: bool = False,
    filter: str | None = None,
    local: bool = False,
    progress: bool = False,
) -> Stream[WatchEvent]:
    """Every change under `prefix` (a prefix, or several), for ever, on one held stream: the changes after
    `after_version` (None: from now), in version order. `prev_value`: events carry the value before the
    change; `filter`: `"put"` or `"delete"` events only. A dropped stream (its node killed, a failover, a
    stream ended by the node) is resumed on another one, through any node, with no change missed or
    reported twice. If the watch falls behind a node's change log, it re-reads each prefix (a range read at
    one version) and yields a `reset` event for it followed by a `put` of every key there, and goes on.
    `progress`: also a `progress` event whenever every change up to a later version has been given, the
    first one as soon as the watch has started (a watch from now gives every change after its version).
    The blocking client's iterator ends at once when `close()`d, from any thread."""
    prefixes = [prefix] if isinstance(prefix, str) else list(prefix) or [""]
    position = StreamPosition(after_version)
    quiet_ends = 0
    while True:
        call = calls.watch_stream(prefixes, position.resume_after(), prev_value, filter, local)
        try:
            start = yield from perform(client, call)
        except ChangesGone:  # a node that answers a stream's 410 as a status rather than a `gone` line
            yield from _re_read(client, prefixes, local, position)
            continue
        # Where this stream starts, known before its first line: a break from here on resumes from there.
        if start is not None and position.progress(start) and progress:
            yield Emit(WatchEvent("progress", "", None, start))
        address = client.endpoints.current
        lines = 0
        while True:
            try:
                line = yield ReadLine()
                message = None if line is None else parse_line(line) if line else {}
            except (httpx.TransportError, MalformedStream):
                message = None
            if message is None:  # the stream broke or ended without a final line: resume elsewhere
                client.endpoints.failed(address)
                break
            lines += 1
            kind = message.get("type")
            if kind in ("progress", "closed"):  # `closed`: the node ended the stream, everything up to it sent
                if position.progress(message["version"]) and progress:
                    yield Emit(WatchEvent("progress", "", None, message["version"]))
                if kind == "closed":
                    client.endpoints.failed(address)
                    break
            elif kind in ("put", "delete"):
                event = event_of(message)
                if position.report(event):
                    yield Emit(event)
            elif kind == "gone":
                yield CloseStream()
                yield from _re_read(client, prefixes, local, position)
                break
        yield CloseStream()
        quiet_ends = quiet_ends + 1 if lines == 0 else 0
        if quiet_ends:
            yield Sleep(min(STREAM_REOPEN_S[1], STREAM_REOPEN_S[0] * 2**quiet_ends))


# -- sessions -----------------------------------------------------------------------------------------------


def create_session(
    client: ClientBase, ttl: float | None = None, *, node: str | None = None, prefix: str | None = None
) -> Flow[SessionInfo]:
    """A session with a TTL in seconds (kept alive by `keepalive`), or bound to a node's membership. With access
    control on, `prefix` names the keys it is for (its creator holds `session` on them; default: every key, or
    the one prefix the creator holds `session` on)."""
    return (yield from perform(client, calls.create_session(ttl, node, prefix)))


def keepalive(client: ClientBase, session_id: str) -> Flow[None]:
    """Raises SessionNotFound once the session has ended."""
    return (yield from perform(client, calls.keepalive(session_id)))


def end_session(client: ClientBase, session_id: str) -> Flow[None]:
    """Ends the session; its ephemeral keys are deleted in the same committed state."""
    return (yield from perform(client, calls.end_session(session_id)))


def sessions(client: ClientBase) -> Flow[Any]:
    """`{"version", "sessions": [{"id", "ttl" or "node", "keys"}]}`, from the master's state."""
    return (yield from perform(client, calls.list_sessions()))


# -- the admin API ------------------------------------------------------------------------------------------


def node_info(client: ClientBase) -> Flow[dict[str, Any]]:
    """`GET /`: `{"name", "node_id", "cluster_name", ...}` of the node the client is sent to. A node that lost its
    data comes back under a new `node_id`."""
    return (yield from perform(client, admin_calls.node_info()))


def cluster_health(
    client: ClientBase, *, wait_for_nodes: int | None = None, timeout: float = 30.0
) -> Flow[dict[str, Any]]:
    """`GET /_cluster/health`; with `wait_for_nodes`, once that many nodes have joined (or after `timeout`)."""
    return (yield from perform(client, admin_calls.cluster_health(wait_for_nodes, timeout)))


def cluster_state(client: ClientBase, *, local: bool = False, filter_path: str | None = None) -> Flow[dict[str, Any]]:
    """`GET /_cluster/state`: from the master, or with `local` this node's applied state; with `filter_path`,
    only the fields it names."""
    return (yield from perform(client, admin_calls.cluster_state(local, filter_path)))


def cluster_settings(client: ClientBase) -> Flow[dict[str, Any]]:
    """`GET /_cluster/settings`: `{"persistent": {...}}`, the dynamic settings set on the cluster."""
    return (yield from perform(client, admin_calls.cluster_settings()))


def put_cluster_settings(client: ClientBase, persistent: Mapping[str, Any]) -> Flow[dict[str, Any]]:
    """Sets dynamic settings (docs/settings.md); a None value resets a setting to its default."""
    return (yield from perform(client, admin_calls.put_cluster_settings(persistent)))


def add_voting_config_exclusions(
    client: ClientBase, node_names: Sequence[str], *, timeout: float = 30.0
) -> Flow[dict[str, Any]]:
    """Excludes the nodes from the voting configuration; answers once they have left it."""
    return (yield from perform(client, admin_calls.add_voting_config_exclusions(node_names, timeout)))


def clear_voting_config_exclusions(
    client: ClientBase, *, wait_for_removal: bool = True, timeout: float = 30.0
) -> Flow[dict[str, Any]]:
    """Clears the exclusions; with `wait_for_removal`, once the excluded nodes have left the cluster."""
    return (yield from perform(client, admin_calls.clear_voting_config_exclusions(wait_for_removal, timeout)))


def put_repository(
    client: ClientBase, repository: str, repository_type: str, settings: Mapping[str, str]
) -> Flow[dict[str, Any]]:
    """Registers a snapshot repository of any type with its settings (an `s3` one: bucket, base_path, client)."""
    return (yield from perform(client, admin_calls.put_repository(repository, repository_type, settings)))


def put_fs_repository(client: ClientBase, repository: str, location: str) -> Flow[dict[str, Any]]:
    """Registers an `fs` snapshot repository at `location`, under the nodes' `path.repo`."""
    return (yield from perform(client, admin_calls.put_fs_repository(repository, location)))


def create_snapshot(client: ClientBase, repository: str, snapshot: str) -> Flow[dict[str, Any]]:
    """Writes the committed state to the repository and answers once it is complete."""
    return (yield from perform(client, admin_calls.create_snapshot(repository, snapshot)))


def list_snapshots(client: ClientBase, repository: str) -> Flow[dict[str, Any]]:
    """`{"snapshots": [...]}`: the repository's snapshots."""
    return (yield from perform(client, admin_calls.list_snapshots(repository)))


def delete_snapshot(client: ClientBase, repository: str, snapshot: str) -> Flow[dict[str, Any]]:
    return (yield from perform(client, admin_calls.delete_snapshot(repository, snapshot)))


def restore_snapshot(client: ClientBase, repository: str, snapshot: str) -> Flow[dict[str, Any]]:
    """Replaces the keys and settings with the snapshot's, in one committed state."""
    return (yield from perform(client, admin_calls.restore_snapshot(repository, snapshot)))


# -- access control -------------------------------------------------------------------------------------------


def authenticate(client: ClientBase) -> Flow[dict[str, Any]]:
    """Who this client is to the cluster: `{"principal", "realm", "roles", "admin"}`."""
    return (yield from perform(client, security_calls.authenticate()))


def roles(client: ClientBase, name: str | None = None) -> Flow[dict[str, Any]]:
    """Every role, built-in ones included, or the one named (NotFound): `{NAME: {"keys", "cluster", "built_in"}}`."""
    return (yield from perform(client, security_calls.roles(name)))


def put_role(
    client: ClientBase, name: str, grants: Mapping[str, Sequence[str]], cluster: Sequence[str] = ()
) -> Flow[dict[str, Any]]:
    """Defines or replaces the custom role `name`: `grants` are the key privileges (`read`, `write`, `session`)
    by prefix (`{"app/a/": ["read", "write"]}`; `""`: every key), `cluster` its cluster privileges (`monitor`,
    `manage`). Answers `{"role": {"created"}, "acknowledged"}` once every node has applied it."""
    return (yield from perform(client, security_calls.put_role(name, security_calls.role_body(grants, cluster))))


def delete_role(client: ClientBase, name: str) -> Flow[dict[str, Any]]:
    return (yield from perform(client, security_calls.delete_role(name)))


def role_mappings(client: ClientBase, name: str | None = None) -> Flow[dict[str, Any]]:
    """Every role mapping, or the one named (NotFound): `{NAME: {"roles", "principals"}}`."""
    return (yield from perform(client, security_calls.role_mappings(name)))


def put_role_mapping(
    client: ClientBase, name: str, roles: Sequence[str], principals: Sequence[str]
) -> Flow[dict[str, Any]]:
    """Gives `roles` to `principals` (names, or a name's start followed by `*`, such as
    `system:serviceaccount:team-a:*`)."""
    return (yield from perform(client, security_calls.put_role_mapping(name, roles, principals)))


def delete_role_mapping(client: ClientBase, name: str) -> Flow[dict[str, Any]]:
    return (yield from perform(client, security_calls.delete_role_mapping(name)))


def quotas(client: ClientBase, name: str | None = None) -> Flow[dict[str, Any]]:
    """Every quota, or the one named (NotFound), with its usage."""
    return (yield from perform(client, security_calls.quotas(name)))


def put_quota(
    client: ClientBase,
    name: str,
    prefix: str,
    *,
    max_keys: int | None = None,
    max_bytes: int | None = None,
    max_sessions: int | None = None,
    max_watch_streams: int | None = None,
    max_writes_per_second: int | None = None,
    force: bool = False,
) -> Flow[dict[str, Any]]:
    """Limits on what is under `prefix` (None: not limited; at least one is set). A request that would pass one
    raises QuotaExceeded. Limits below what the prefix uses now are refused unless `force`."""
    limits = {
        "max_keys": max_keys,
        "max_bytes": max_bytes,
        "max_sessions": max_sessions,
        "max_watch_streams": max_watch_streams,
        "max_writes_per_second": max_writes_per_second,
    }
    return (yield from perform(client, security_calls.put_quota(name, prefix, limits, force)))


def delete_quota(client: ClientBase, name: str) -> Flow[dict[str, Any]]:
    return (yield from perform(client, security_calls.delete_quota(name)))
