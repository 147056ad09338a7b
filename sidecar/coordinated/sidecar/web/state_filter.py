"""Elasticsearch's `filter_path` for `GET /_cluster/state`: only the fields the caller names.

`filter_path=cluster_uuid,master_node,nodes,metadata.cluster_coordination` answers those fields and nothing else.
A path is dot-separated field names; `*` in a name matches any characters, and `**` any number of levels.
Arrays are filtered element by element. The parts of the state a filter cannot select (the keys, the sessions)
are never rendered, so a caller that asks for the membership alone (the operator, on every pass over every pod)
costs the node and itself the membership, not the whole state.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import msgspec

from coordinated.coordination.state import EMPTY_MAP, ClusterState

Pattern = tuple[str, ...]
_MISSING: Any = object()

# The state's maps and where state_to_api puts them: left out unless a pattern may select them.
_HEAVY_PARTS = {
    "kv": ("metadata", "kv"),
    "kv_sessions": ("metadata", "ephemeral_keys"),
    "sessions": ("metadata", "sessions"),
    "persistent_settings": ("metadata", "persistent_settings"),
}


def parse(text: str) -> tuple[Pattern, ...]:
    """The patterns of a `filter_path` value; ValueError says why one is unusable."""
    patterns = []
    for part in (piece.strip() for piece in text.split(",")):
        if not part:
            continue
        if part.startswith("-"):
            raise ValueError(f"[filter_path] exclusions (a leading -) are not supported: [{part}]")
        names = tuple(part.split("."))
        if any(not name for name in names):
            raise ValueError(f"[filter_path] has an empty field name: [{part}]")
        patterns.append(names)
    if not patterns:
        raise ValueError("[filter_path] names no field")
    return tuple(patterns)


@lru_cache(maxsize=256)
def _regex(name: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(piece) for piece in name.split("*")))


def _matches(name_pattern: str, name: str) -> bool:
    return name_pattern == name or ("*" in name_pattern and _regex(name_pattern).fullmatch(name) is not None)


def _step(patterns: Sequence[Pattern], name: str) -> tuple[bool, list[Pattern]]:
    """Into the field `name`: whether it is selected whole, and the patterns that apply below it."""
    whole, below = False, []
    for pattern in patterns:
        head = pattern[0]
        if head == "**":
            if len(pattern) == 1:
                return True, []
            below.append(pattern)  # ** goes on matching deeper levels
            pattern = pattern[1:]  # ... or none: the rest applies to this field
            head = pattern[0]
        if _matches(head, name):
            if len(pattern) == 1:
                whole = True
            else:
                below.append(pattern[1:])
    return whole, below


def may_select(patterns: Sequence[Pattern], path: Sequence[str]) -> bool:
    """Whether some pattern may select a field at or below `path`."""
    current = list(patterns)
    for name in path:
        whole, current = _step(current, name)
        if whole:
            return True
        if not current:
            return False
    return True


def apply(value: Any, patterns: Sequence[Pattern]) -> Any:
    """`value` (an answer's JSON tree) with only the selected fields; `{}` when none is."""
    filtered = _apply(value, patterns)
    return {} if filtered is _MISSING else filtered


def _apply(value: Any, patterns: Sequence[Pattern]) -> Any:
    if isinstance(value, dict):
        kept = {}
        for key, item in value.items():
            whole, below = _step(patterns, str(key))
            if whole:
                kept[key] = item
            elif below and (inner := _apply(item, below)) is not _MISSING:
                kept[key] = inner
        return kept if kept else _MISSING
    if isinstance(value, list):
        items = [inner for item in value if (inner := _apply(item, patterns)) is not _MISSING]
        return items if items else _MISSING
    return _MISSING  # a plain value with patterns still to go below it: not selected


def lighten(state: ClusterState, patterns: Sequence[Pattern]) -> ClusterState:
    """The state without the maps no pattern selects, so that rendering it costs what is asked for."""
    dropped: dict[str, Any] = {
        field: EMPTY_MAP for field, path in _HEAVY_PARTS.items() if not may_select(patterns, path)
    }
    if not may_select(patterns, ("metadata", "repositories")):
        dropped["repositories"] = {}
    return msgspec.structs.replace(state, **dropped) if dropped else state
