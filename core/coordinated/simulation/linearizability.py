"""A linearizability checker for key-value histories (Wing & Gong search with Lowe's memoization).

Keys are independent registers, so each key's history is checked on its own (P-compositionality).
An operation whose outcome is unknown (it failed but may have taken effect) may be linearized anywhere
after its invocation, or not at all.

A register holds a value and the key's version, so that compare-and-set is modeled: a conditional write
(`if_version`; 0 means absent; or `if_value`) applies only where the register's version (value) is that, and
a refused one (`conflict`) only where it is not. A single-key transaction is recorded as such a conditional
write plus the get of its failure branch. The version a write of unknown outcome would have given is unknown
to the checker (None) until a read reveals it.

A version names one write: the versions of a key's writes grow with every write and never repeat. So the
register also holds the highest version given to a write of the key so far (its floor), a put's version must be
above it, and a version that a read reveals of a write of unknown outcome too. A compare-and-set on a version
then holds only if nothing was written to the key since the write that version names: a write of unknown
outcome that took effect since counts, since its version, however unknown, is above the floor. (A delete's
answer names the state it committed or read, not a key's version: a delete of an absent key batched ahead of a
put of it is answered with that put's version. So a delete leaves the floor as it is.) Two
acknowledged writes of one key with one version are therefore never linearizable, nor a compare-and-set on a
version after another write of the key.

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
    # The key's version a certain write gave it, that a get saw, or that a refusal found (0: absent; None: unknown).
    version: int | None = None
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


def _certain_versions(operations: list[Operation]) -> frozenset[int]:
    """The versions that acknowledged puts of the key were given: no other write of it has one of them."""
    return frozenset(op.version for op in operations if _wrote_certainly(op) and op.version is not None)


def _wrote_certainly(op: Operation) -> bool:
    return op.kind == "put" and op.certain and not op.conflict


def _observable(operations: list[Operation], known: frozenset[int]) -> list[Operation]:
    """Drop the writes of unknown outcome that no operation could have observed.

    If such a write took effect, the operations linearized after it and before the next write see its value
    (MISSING for a delete) and its version, which is unknown but no acknowledged put's (`known`). Each of them
    completed after the write was invoked, and observes it by its value (a read of that value, a compare-and-set
    on that value, a create-only write for a delete) or by a version that is no acknowledged put's (a refusal
    that found it, a compare-and-set on it; a refusal that found no version observes anything). When nothing
    observes a write that way after its invocation, nothing sits in that interval, so leaving the write out keeps
    every linearization valid; and a write of unknown outcome is never required. Without this, each of k such
    writes doubles the search space (taken or not), which made long chaos histories take hours.
    """
    latest_completion: dict[Any, float] = {}
    anything_after = -math.inf  # the latest completion of an operation that may observe any of them

    def observes(value: Any, op: Operation) -> None:
        latest_completion[value] = max(latest_completion.get(value, -math.inf), op.completed)

    for op in operations:
        if op.kind == "get":
            observes(_freeze(op.result), op)
        elif op.conflict:
            if op.version is None or op.if_value is not UNCONDITIONAL or (op.version and op.version not in known):
                anything_after = max(anything_after, op.completed)
            elif op.version == 0:
                observes(MISSING, op)
        elif op.certain and op.if_value is not UNCONDITIONAL:
            observes(_freeze(op.if_value), op)
        elif op.certain and op.if_version == 0:
            observes(MISSING, op)
        elif op.certain and op.if_version is not None and op.if_version not in known:
            anything_after = max(anything_after, op.completed)
    kept = []
    for op in operations:
        if not op.certain and op.kind != "get":
            written = _freeze(op.value if op.kind == "put" else MISSING)
            if max(latest_completion.get(written, -math.inf), anything_after) < op.invoked:
                continue
        kept.append(op)
    return kept


Register = tuple[Any, int | None, int]  # value, version (None: given by a write of unknown outcome), floor


def _step(op: Operation, value: Any, version: int | None, floor: int, known: frozenset[int]) -> Register | None:
    """The register after `op` takes effect on (value, version, floor), or None if it cannot take effect there.
    `known`: the versions of the key's acknowledged puts, which no write of unknown outcome can have."""
    if op.kind == "get":
        if _freeze(op.result) != value:
            return None
        if op.version is None or op.result is MISSING:
            return value, version, floor
        return _found(op.version, value, version, floor, known)
    conditional = op.if_version is not None or op.if_value is not UNCONDITIONAL
    if conditional:
        if op.if_value is not UNCONDITIONAL:
            holds: bool | None = value != MISSING and value == _freeze(op.if_value)
        elif op.if_version == 0:
            holds = value == MISSING
        elif value == MISSING:
            holds = False
        elif version is None:  # written since by a write of unknown outcome, with its own version above the floor
            assert op.if_version is not None
            holds = None if op.if_version > floor and op.if_version not in known else False
        else:
            holds = version == op.if_version
        if op.conflict:
            if holds is True:
                return None
            if op.version is None:
                return value, version, floor
            if op.version == 0 or value == MISSING:  # it found the key absent, or present
                return (value, version, floor) if (op.version == 0) == (value == MISSING) else None
            return _found(op.version, value, version, floor, known)
        if holds is False:
            return None
    if op.kind == "put":
        if not op.certain or op.version is None:
            return _freeze(op.value), None, floor
        if op.version <= floor:
            return None  # a version given to an earlier write of the key, or below it
        return _freeze(op.value), op.version, op.version
    return _freeze(MISSING), 0, floor


def _found(found: int, value: Any, version: int | None, floor: int, known: frozenset[int]) -> Register | None:
    """A read or a refusal found the present key at version `found`: the register's version, or, where a write of
    unknown outcome left it unknown, that write's own version, above the floor and no acknowledged put's."""
    if version is None:
        return (value, found, found) if found > floor and found not in known else None
    return (value, version, floor) if version == found else None


def check_key(operations: list[Operation], initial: Any = MISSING, max_states: int | None = None) -> bool | None:
    """True if the key's history is linearizable, False if not, None if `max_states` ran out first."""
    known = _certain_versions(operations)
    ops = sorted(_observable(operations, known), key=lambda op: (op.invoked, op.completed))
    count = len(ops)
    required_mask = 0
    for index, op in enumerate(ops):
        if op.certain:
            required_mask |= 1 << index
    seen: set[tuple[int, Any, int | None, int]] = set()
    initial_version = 0 if initial == MISSING else None
    stack: list[tuple[int, Any, int | None, int]] = [(0, _freeze(initial), initial_version, 0)]
    while stack:
        done, value, version, floor = stack.pop()
        if done & required_mask == required_mask:
            return True
        if (done, value, version, floor) in seen:
            continue
        seen.add((done, value, version, floor))
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
            after = _step(op, value, version, floor, known)
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


# Sorted (key, value, version, floor): a key not listed is absent and was never written. The floor is the highest
# version given to a write of the key so far, as in a single key's register.
Registers = tuple[tuple[str, Any, int | None, int], ...]
Held = tuple[Any, int | None, int]  # a key's value, version and floor
_NEVER_WRITTEN: Held = (MISSING, 0, 0)


def _compares_hold(compares: tuple[tuple[str, int], ...], registers: dict[str, Held]) -> bool | None:
    """True or False, or None when a version that an unread write of unknown outcome gave a key decides it."""
    unknown = False
    for key, expected in compares:
        value, version, floor = registers.get(key, _NEVER_WRITTEN)
        if expected == 0:
            holds: bool | None = value == MISSING
        elif value == MISSING:
            holds = False
        elif version is None:  # written since by a write of unknown outcome, with a version above the floor
            holds = None if expected > floor else False
        else:
            holds = version == expected
        if holds is False:
            return False
        unknown = unknown or holds is None
    return None if unknown else True


def _txn_steps(op: TxnOperation, registers: dict[str, Held]) -> list[Registers]:
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
            _, _, floor = new.get(key, _NEVER_WRITTEN)
            if kind == "put":
                if op.certain and op.version is not None:
                    if op.version <= floor:  # a version given to an earlier write of the key, or below it
                        consistent = False
                        break
                    new[key] = (_freeze(value), op.version, op.version)
                else:
                    new[key] = (_freeze(value), None, floor)
            elif kind == "delete":
                new[key] = (MISSING, 0, floor)
            elif kind == "delete_prefix":
                # The first `limit` present keys in key order (None: all); where the answer was seen, it must
                # say how many that was and whether any was left.
                limit, seen = value if isinstance(value, tuple) else (None, None)
                present = sorted(name for name, held in new.items() if name.startswith(key) and held[0] != MISSING)
                gone = present if limit is None else present[:limit]
                for name in gone:
                    new[name] = (MISSING, 0, new[name][2])
                if op.certain and seen is not None and tuple(seen) != (len(gone), len(present) > len(gone)):
                    consistent = False
                    break
            elif kind == "range":
                if op.certain and not _range_matches(key, next(ranges), new):
                    consistent = False
                    break
            elif op.certain:
                _, read_value, read_version = next(reads)
                if not _read_matches(key, read_value, read_version, new):
                    consistent = False
                    break
        if consistent:
            after.append(tuple(sorted((key, *held) for key, held in new.items())))
    return after


def _read_matches(key: str, value: Any, version: int, registers: dict[str, Held]) -> bool:
    """A read of `key` returned `value` at `version`; a version it reveals (of a write of unknown outcome, which
    must be above the key's floor) is learned into `registers`."""
    current, held_version, floor = registers.get(key, _NEVER_WRITTEN)
    if _freeze(value) != current:
        return False
    if held_version is None:
        if value is not MISSING and version <= floor:
            return False
        registers[key] = (current, version, max(floor, version))
        return True
    return value is MISSING or held_version == version


def _range_matches(prefix: str, returned: tuple[tuple[str, Any, int], ...], registers: dict[str, Held]) -> bool:
    """A range read returned exactly the present keys under `prefix`, in key order, with their values and
    versions; versions it reveals (of writes of unknown outcome) are learned into `registers`."""
    present = sorted(key for key, held in registers.items() if key.startswith(prefix) and held[0] != MISSING)
    if [key for key, _, _ in returned] != present:
        return False
    return all(_read_matches(key, value, version, registers) for key, value, version in returned)


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
        current = {key: (value, version, floor) for key, value, version, floor in registers}
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
