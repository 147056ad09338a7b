"""The values the client returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: Any
    version: int  # the state version of the write that last changed the key
    create_version: int  # the state version of the write that created it (a lock's fencing token)
    session: str | None = None  # the session an ephemeral key belongs to


@dataclass(frozen=True)
class WriteResult:
    key: str
    term: int
    version: int  # the key's new version (for a create, also its create_version)
    prev: KeyValue | None = None  # with `prev_value=True`: the key before the write (None: it did not exist)


@dataclass(frozen=True)
class RangePage:
    """One page of a range read: keys in key order, all read from the state of `version`. `more`: keys
    follow; `next`: the last key of the page (the `after` of the next page). With `keys_only` every
    `value` is None."""

    version: int
    keys: list[KeyValue]
    more: bool
    next: str | None


@dataclass(frozen=True)
class Listing:
    """Every key under a prefix, in key order, read from the state of `version` (all pages of one state)."""

    version: int
    keys: list[KeyValue]

    def values(self) -> dict[str, Any]:
        return {kv.key: kv.value for kv in self.keys}


@dataclass(frozen=True)
class KeyCount:
    version: int  # the state version counted
    count: int


@dataclass(frozen=True)
class PrefixDeleted:
    prefix: str
    deleted: int  # how many keys were under the prefix
    term: int
    version: int  # the state version of the (last) delete (or the current one, if nothing was there)
    more: bool = False  # of one call (`calls.delete_prefix`): keys are left under the prefix


CompareOp = Literal["=", "!=", "<", ">"]
COMPARE_OPS: tuple[CompareOp, ...] = ("=", "!=", "<", ">")
CompareTarget = Literal["version", "create_version", "value"]
COMPARE_TARGETS: tuple[CompareTarget, ...] = ("version", "create_version", "value")


@dataclass(frozen=True)
class Compare:
    """One condition of a transaction: the key's `version`, `create_version` or `value` compared with
    `operand` by `op`. A missing key has version and create version 0, and no value compare holds for it.
    Build them with the class methods: `Compare.version("a", "=", 59)`, `Compare.value("n", "<", 10)`,
    `Compare.absent("lock")`, `Compare.exists("lock")`."""

    key: str
    target: CompareTarget
    op: CompareOp
    operand: Any

    @classmethod
    def version(cls, key: str, op: CompareOp, version: int) -> Compare:
        return cls(key, "version", op, version)

    @classmethod
    def create_version(cls, key: str, op: CompareOp, create_version: int) -> Compare:
        return cls(key, "create_version", op, create_version)

    @classmethod
    def value(cls, key: str, op: CompareOp, value: Any) -> Compare:
        """Values are equal when their JSON with sorted object keys is; `<` and `>` order two numbers or
        two strings."""
        return cls(key, "value", op, value)

    @classmethod
    def absent(cls, key: str) -> Compare:
        return cls(key, "version", "=", 0)

    @classmethod
    def exists(cls, key: str) -> Compare:
        return cls(key, "version", ">", 0)

    def to_api(self) -> dict[str, Any]:
        return {"key": self.key, self.target: self.operand, "op": self.op}

    @classmethod
    def from_api(cls, compare: Any) -> Compare:
        """A compare as the API takes it: `{"key", one of "version", "create_version", "value", "op"}` (`op`
        one of `=` (the default), `!=`, `<`, `>`). ValueError names what is wrong with a malformed one."""
        if not isinstance(compare, dict) or not isinstance(compare.get("key"), str):
            raise ValueError(f"a compare is an object with a [key]: {compare!r}")
        unknown = set(compare) - {"key", "op", *COMPARE_TARGETS}
        if unknown:
            raise ValueError(f"the compare of [{compare['key']}] has unknown fields {sorted(unknown)}")
        given = [target for target in COMPARE_TARGETS if target in compare]
        if len(given) != 1:
            raise ValueError(
                f"the compare of [{compare['key']}] needs exactly one of [version], [create_version] and [value]"
            )
        target, op = given[0], compare.get("op", "=")
        if op not in COMPARE_OPS:
            raise ValueError(f"the compare of [{compare['key']}] has op [{op}]: give one of {list(COMPARE_OPS)}")
        operand = compare[target]
        if target != "value" and (isinstance(operand, bool) or not isinstance(operand, int) or operand < 0):
            raise ValueError(f"the compare of [{compare['key']}]: [{target}] is a version, 0 or more: {operand!r}")
        return cls(compare["key"], target, op, operand)


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    version: int
    results: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class WatchEvent:
    """A change under a watched prefix. `reset` says the watch fell behind the node's change log: forget what
    you know under the prefix; the `put` events that follow (at the version of that re-read) are its keys.
    `progress` (only on a watch that asks for it) is no change: every change up to its `version` has been
    given; the first one says the watch has started, and gives every change after its version."""

    type: Literal["put", "delete", "reset", "progress"]
    key: str
    value: Any
    version: int
    prev_value: Any = None  # on a stream with `prev_value=True`: the value before the change (None: none)


@dataclass(frozen=True)
class WatchBatch:
    version: int  # every change up to this version has been reported; watch on from here
    events: list[WatchEvent]


@dataclass(frozen=True)
class SessionInfo:
    id: str
    ttl: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
