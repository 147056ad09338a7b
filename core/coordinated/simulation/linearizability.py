"""A linearizability checker for key-value histories (Wing & Gong search with Lowe's memoization).

Keys are independent registers, so each key's history is checked on its own (P-compositionality).
An operation whose outcome is unknown (it failed but may have taken effect) may be linearized anywhere
after its invocation, or not at all.

A register holds a value and the key's version, so that compare-and-set is modeled: a conditional write
(`if_version`; 0 means absent; or `if_value`) applies only where the register's version (value) is that, and
a refused one (`conflict`) only where it is not. A single-key transaction is recorded as such a conditional
write plus the get of its failure branch. The version a write of unknown outcome would have given is unknown
to the checker (None) until a read reveals it.

Operations over several keys (`TxnOperation`, `check_transactions`) are checked apart, on keys that only
they touch: there the keys are one register, since an operation changes or reads them together. Besides
transactions, that covers range reads (`range`: the keys under a prefix, with their values and versions, all
from one state) and prefix deletes (`delete_prefix`: every key under a prefix at once).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MISSING: Any = ("<missing>",)  # the value of an absent key
UNCONDITIONAL: Any = ("<unconditional>",)  # an `if_value` that is not given


@dataclass(frozen=True)
class Operation:
    client: int
    key: str
    kind: str  # "put", "delete" or "get"
    invoked: float
    completed: float  # math.inf when the outcome is unknown
    value: Any = None  # the value written by a put
    result: Any = None  # the value a get returned (MISSING for absent)
    certain: bool = True  # False: the write may or may not have taken effect
    if_version: int | None = None  # a conditional write: the key's version it requires (0: absent)
    conflict: bool = False  # a conditional write refused (certainly without effect)
    version: int | None = None  # the key's version a certain write gave it, or that a get saw (0: absent)
    if_value: Any = UNCONDITIONAL  # a conditional write: the value the key must hold (absent: never holds)

    def __post_init__(self) -> None:
        if self.kind not in ("put", "delete", "get"):
            raise ValueError(f"unknown operation kind {self.kind}")


@dataclass(frozen=True)
class Verdict:
    ok: bool
    key: str | None = None
    detail: str = ""
    undecided: bool = False  # the search ran out of its state budget: neither proven nor refuted


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _observable(operations: list[Operation]) -> list[Operation]:
    """Drop the writes of unknown outcome that no read could have observed.

    If such a write took effect, every read linearized after it and before the next write returns its value
    (MISSING for a delete), and that read completed after the write was invoked. When no read returning that
    value completed after the write's invocation, no read sits in that interval, so leaving the write out keeps
    every linearization valid; and an uncertain write is never required. Without this, each of k uncertain
    writes doubles the search space (taken or not), which made long chaos histories take hours.
    """
    latest_completion: dict[Any, float] = {}
    for op in operations:
        if op.kind == "get":
            result = _freeze(op.result)
            latest_completion[result] = max(latest_completion.get(result, -math.inf), op.completed)
    kept = []
    for op in operations:
        if not op.certain and op.kind != "get":
            written = _freeze(op.value if op.kind == "put" else MISSING)
            if latest_completion.get(written, -math.inf) < op.invoked:
                continue
        kept.append(op)
    return kept


def _step(op: Operation, value: Any, version: int | None) -> tuple[Any, int | None] | None:
    """The register after `op` takes effect on (value, version), or None if it cannot take effect there."""
    if op.kind == "get":
        if _freeze(op.result) != value:
            return None
        if op.version is not None and version is not None and op.version != version:
            return None
        return value, version if op.version is None else op.version
    conditional = op.if_version is not None or op.if_value is not UNCONDITIONAL
    if conditional:
        if op.if_value is not UNCONDITIONAL:
            holds: bool | None = value != MISSING and value == _freeze(op.if_value)
        elif op.if_version == 0:
            holds = value == MISSING
        elif value == MISSING:
            holds = False
        else:
            holds = None if version is None else version == op.if_version
        if op.conflict:
            return None if holds else (value, version)
        if holds is False:
            return None
    if op.kind == "put":
        return _freeze(op.value), op.version if op.certain else None
    return _freeze(MISSING), 0


def check_key(operations: list[Operation], initial: Any = MISSING, max_states: int | None = None) -> bool | None:
    """True if the key's history is linearizable, False if not, None if `max_states` ran out first."""
    if any(op.conflict for op in operations):
        # A refusal observes the version that an unread write of unknown outcome may have changed.
        ops = sorted(operations, key=lambda op: (op.invoked, op.completed))
    else:
        ops = sorted(_observable(operations), key=lambda op: (op.invoked, op.completed))
    count = len(ops)
    required_mask = 0
    for index, op in enumerate(ops):
        if op.certain:
            required_mask |= 1 << index
    seen: set[tuple[int, Any, int | None]] = set()
    initial_version = 0 if initial == MISSING else None
    stack: list[tuple[int, Any, int | None]] = [(0, _freeze(initial), initial_version)]
    while stack:
        done, value, version = stack.pop()
        if done & required_mask == required_mask:
            return True
        if (done, value, version) in seen:
            continue
        seen.add((done, value, version))
        if max_states is not None and len(seen) > max_states:
            return None
        # The next op to take effect must have been invoked before every pending op completed.
        horizon = math.inf
        for index in range(count):
            if not done >> index & 1 and ops[index].completed < horizon:
                horizon = ops[index].completed
        for index in range(count):
            if done >> index & 1:
                continue
            op = ops[index]
            if op.invoked > horizon:
                break
            after = _step(op, value, version)
            if after is not None:
                stack.append((done | 1 << index, *after))
    return False


def check_history(operations: Iterable[Operation], max_states_per_key: int | None = None) -> Verdict:
    by_key: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        by_key[op.key].append(op)
    for key in sorted(by_key):
        linearizable = check_key(by_key[key], max_states=max_states_per_key)
        if linearizable is None:
            return Verdict(False, key, f"undecided: the search of key [{key}] exceeded {max_states_per_key} states")
        if not linearizable:
            ops = sorted(by_key[key], key=lambda op: op.invoked)
            lines = "\n".join(
                f"  client {op.client} {op.kind} value={op.value!r} result={op.result!r} version={op.version} "
                f"if_version={op.if_version}{' (refused)' if op.conflict else ''} "
                f"[{op.invoked}, {op.completed}]{'' if op.certain else ' (outcome unknown)'}"
                for op in ops
            )
            return Verdict(False, key, f"history of key [{key}] is not linearizable:\n{lines}")
    return Verdict(True)


# -- multi-key transactions ------------------------------------------------------------------------------
#
# A transaction over several keys takes effect on all of them at once, so its keys are no longer independent:
# they are checked together, as one register holding (value, version) per key. The search is the same.


@dataclass(frozen=True)
class TxnOperation:
    """A transaction over several keys: its compares, both branches, and what was seen of its outcome."""

    client: int
    invoked: float
    completed: float  # math.inf when the outcome is unknown
    compares: tuple[tuple[str, int], ...]  # (key, version); 0 means absent
    # (op, key, value): "put", "delete", "get", "delete_prefix" (key: the prefix) or "range" (key: the prefix)
    success: tuple[tuple[str, str, Any], ...]
    failure: tuple[tuple[str, str, Any], ...]
    succeeded: bool | None  # None: failed, but may have taken effect (either branch, as the compares say)
    version: int | None = None  # the state version its puts gave their keys (when it wrote)
    reads: tuple[tuple[str, Any, int], ...] = ()  # its gets, in order: (key, value or MISSING, version)
    # Its range reads, in order: the keys each returned, in the order returned, as (key, value, version).
    ranges: tuple[tuple[tuple[str, Any, int], ...], ...] = ()

    @property
    def certain(self) -> bool:
        return self.succeeded is not None


Registers = tuple[tuple[str, Any, int | None], ...]  # sorted (key, value, version); a key not listed is absent


def _compares_hold(compares: tuple[tuple[str, int], ...], registers: dict[str, tuple[Any, int | None]]) -> bool | None:
    """True or False, or None when a version that an unread write of unknown outcome gave a key decides it."""
    unknown = False
    for key, expected in compares:
        value, version = registers.get(key, (MISSING, 0))
        if expected == 0:
            holds: bool | None = value == MISSING
        elif value == MISSING:
            holds = False
        else:
            holds = None if version is None else version == expected
        if holds is False:
            return False
        unknown = unknown or holds is None
    return None if unknown else True


def _txn_steps(op: TxnOperation, registers: dict[str, tuple[Any, int | None]]) -> list[Registers]:
    """The registers after `op` takes effect: none if it cannot take effect there, two if either branch may."""
    holds = _compares_hold(op.compares, registers)
    if op.succeeded is None:
        branches = [True, False] if holds is None else [holds]
    elif holds is not None and holds != op.succeeded:
        return []
    else:
        branches = [op.succeeded]
    after: list[Registers] = []
    for branch in branches:
        new = dict(registers)
        reads = iter(op.reads)
        ranges = iter(op.ranges)
        consistent = True
        for kind, key, value in op.success if branch else op.failure:
            if kind == "put":
                new[key] = (_freeze(value), op.version if op.certain else None)
            elif kind == "delete":
                new[key] = (MISSING, 0)
            elif kind == "delete_prefix":
                # The first `limit` present keys in key order (None: all); where the answer was seen, it must
                # say how many that was and whether any was left.
                limit, seen = value if isinstance(value, tuple) else (None, None)
                present = sorted(name for name, held in new.items() if name.startswith(key) and held[0] != MISSING)
                gone = present if limit is None else present[:limit]
                for name in gone:
                    new[name] = (MISSING, 0)
                if op.certain and seen is not None and tuple(seen) != (len(gone), len(present) > len(gone)):
                    consistent = False
                    break
            elif kind == "range":
                if op.certain and not _range_matches(key, next(ranges), new):
                    consistent = False
                    break
            elif op.certain:
                _, read_value, read_version = next(reads)
                current, version = new.get(key, (MISSING, 0))
                if _freeze(read_value) != current or (version is not None and version != read_version):
                    consistent = False
                    break
                new[key] = (current, read_version)  # a read reveals a version an uncertain write gave
        if consistent:
            after.append(tuple(sorted((key, value, version) for key, (value, version) in new.items())))
    return after


def _range_matches(
    prefix: str, returned: tuple[tuple[str, Any, int], ...], registers: dict[str, tuple[Any, int | None]]
) -> bool:
    """A range read returned exactly the present keys under `prefix`, in key order, with their values and
    versions; versions it reveals (of writes of unknown outcome) are learned into `registers`."""
    present = {key: held for key, held in registers.items() if key.startswith(prefix) and held[0] != MISSING}
    names = [key for key, _, _ in returned]
    if names != sorted(present):
        return False
    for key, value, version in returned:
        held, held_version = present[key]
        if _freeze(value) != held or (held_version is not None and held_version != version):
            return False
        registers[key] = (held, version)
    return True


def check_transactions(operations: list[TxnOperation], max_states: int | None = None) -> Verdict:
    """Linearizability of transactions over a set of keys that only these transactions touch."""
    ops = sorted(operations, key=lambda op: (op.invoked, op.completed))
    count = len(ops)
    required_mask = 0
    for index, op in enumerate(ops):
        if op.certain:
            required_mask |= 1 << index
    seen: set[tuple[int, Registers]] = set()
    stack: list[tuple[int, Registers]] = [(0, ())]
    while stack:
        done, registers = stack.pop()
        if done & required_mask == required_mask:
            return Verdict(True)
        if (done, registers) in seen:
            continue
        seen.add((done, registers))
        if max_states is not None and len(seen) > max_states:
            return Verdict(
                False, None, f"undecided: the search of the transactions exceeded {max_states} states", undecided=True
            )
        horizon = math.inf
        for index in range(count):
            if not done >> index & 1 and ops[index].completed < horizon:
                horizon = ops[index].completed
        current = {key: (value, version) for key, value, version in registers}
        for index in range(count):
            if done >> index & 1:
                continue
            op = ops[index]
            if op.invoked > horizon:
                break
            for after in _txn_steps(op, current):
                stack.append((done | 1 << index, after))
    lines = "\n".join(
        f"  client {op.client} compares={op.compares} success={op.success} failure={op.failure} "
        f"succeeded={op.succeeded} version={op.version} reads={op.reads} ranges={op.ranges} "
        f"[{op.invoked}, {op.completed}]"
        for op in ops
    )
    return Verdict(False, None, f"the multi-key operations are not linearizable:\n{lines}")
