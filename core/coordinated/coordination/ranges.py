"""Range reads: one page of the keys under a prefix, in key order, read from one state.

A page holds at most `limit` keys (default DEFAULT_RANGE_LIMIT, at most MAX_RANGE_LIMIT) and at most about
MAX_RANGE_BYTES of encoded keys and values, but always at least one key. `more` says whether keys under the
prefix follow the page; `next` is the page's last key, from which the next page continues (`after`). The
values are kept as the JSON they encode to (`msgspec.Raw`), so that measuring a page and answering it encode
each value once. Pure: the caller picks the state (its consistency is the caller's) and the keys in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec

from coordinated.coordination.state import ClusterState

DEFAULT_RANGE_LIMIT = 1_000
MAX_RANGE_LIMIT = 10_000
MAX_RANGE_BYTES = 4 * 1024 * 1024  # of keys and values in one page; a single larger key still makes a page
_ENTRY_OVERHEAD = 64  # the field names, the versions and the punctuation of one entry, about
_VALUE_ENCODER = msgspec.json.Encoder()


class RangeEntry(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """A key as `GET /_cluster/metadata/{key}` shows it (`value` left out with `keys_only`)."""

    key: str
    value: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    version: int
    create_version: int
    session: str | None = None  # an ephemeral key's session
    writer: str | None = None  # the principal that last wrote it (shown to admins)


class RangePage(msgspec.Struct, frozen=True):
    version: int  # of the state the page was read from
    keys: list[RangeEntry]
    more: bool
    next: str | None  # the last key of the page: where the next page continues (None: an empty page)


def range_page(
    state: ClusterState,
    keys_in_order: Iterable[str],
    limit: int = DEFAULT_RANGE_LIMIT,
    keys_only: bool = False,
    max_bytes: int = MAX_RANGE_BYTES,
    writers: bool = False,
) -> RangePage:
    """The first keys of `keys_in_order` (names of `state`'s keys, in order) that fit the page; with `writers`,
    each with the principal that last wrote it."""
    entries: list[RangeEntry] = []
    size = 0
    keys: Iterator[str] = iter(keys_in_order)
    for key in keys:
        if len(entries) == limit:
            return RangePage(state.version, entries, True, entries[-1].key)
        versions = state.key_version(key)
        if versions is None:
            continue  # not a key of this state: the caller's order is of another one
        value: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
        entry_size = len(key) + _ENTRY_OVERHEAD
        if not keys_only:
            value = msgspec.Raw(_VALUE_ENCODER.encode(state.kv[key]))
            entry_size += len(value)
        if entries and size + entry_size > max_bytes:
            return RangePage(state.version, entries, True, entries[-1].key)
        size += entry_size
        entries.append(
            RangeEntry(
                key=key,
                value=value,
                version=versions.version,
                create_version=versions.create_version,
                session=state.kv_sessions.get(key),
                writer=state.kv_writers.get(key) if writers else None,
            )
        )
    return RangePage(state.version, entries, False, entries[-1].key if entries else None)


def decoded_value(entry: RangeEntry) -> object:
    """An entry's value as Python data (the simulator's checks read it)."""
    return msgspec.json.decode(entry.value) if isinstance(entry.value, msgspec.Raw) else None
