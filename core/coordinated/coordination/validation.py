"""The checks of names and values that client requests share, the HTTP API and the master alike: keys and
prefixes, session ids, values, hook, repository and snapshot names, settings.

The API checks keys and settings before submitting a request, for a quick and precise 400; exclusions it
leaves to the master, since their limit depends on the exclusions the master holds. The master checks every
request when it executes it (each request type's `validate`, in `coordinated.coordination.requests`), whether it
was submitted locally or forwarded by a follower, so that a peer that skips the API (an older version, a bug, a
forged message) cannot commit a bad key, setting or exclusion. Each check returns None when the input is valid,
otherwise the reason, which goes back to the client in a 400.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from coordinated.coordination.settings import SettingsError, SettingsRegistry, int_setting
from coordinated.coordination.state import ClusterState
from coordinated.key_names import key_problem, prefix_problem

# Full matches: `$` would also accept a trailing newline.
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


def settings_problem(updates: Mapping[str, str | None], registry: SettingsRegistry) -> str | None:
    """A `persistent` settings update: every setting known, dynamic and valid (None removes it: the default)."""
    if not updates:
        return 'no settings to update: give {"persistent": {"setting.name": "value"}}'
    try:
        registry.validate_dynamic(updates)
    except SettingsError as error:
        return str(error)
    return None
