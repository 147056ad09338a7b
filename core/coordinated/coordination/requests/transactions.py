"""Transactions: compares on keys, then one branch of ops (put, delete, get, prefix delete), all in one
committed state; the request type, its checks, and its run against the state a batch builds."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from coordinated.coordination import client
from coordinated.coordination.batch_keys import BatchKeys
from coordinated.coordination.client import ClientRequest, ClusterError, TxnOpResult, TxnResult
from coordinated.coordination.requests.base import Action, Runs
from coordinated.coordination.state import KeyVersion, Long
from coordinated.coordination.validation import (
    key_prefix_problem,
    metadata_key_problem,
    session_id_problem,
    value_problem,
)

CompareOp = Literal["=", "!=", "<", ">"]


class TxnCompare(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Compares one of the key's `version`, `create_version` (both 0 when the key does not exist) or `value`
    (false for any `op` when the key does not exist) with the given one; exactly one is given. Values are
    equal when their JSON encodings with sorted object keys are; `<` and `>` hold between two numbers or two
    strings, never between values of other types."""

    key: str
    version: Long | msgspec.UnsetType = msgspec.UNSET
    create_version: Long | msgspec.UnsetType = msgspec.UNSET
    value: Any | msgspec.UnsetType = msgspec.UNSET
    op: CompareOp = "="


class TxnOp(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    op: Literal["put", "delete", "get", "delete_prefix"]
    key: str = ""  # every op's but delete_prefix's
    value: Any | msgspec.UnsetType = msgspec.UNSET  # a put's value (which may be null)
    session: str | None = None  # a put's session: the key is ephemeral
    prefix: str | None = None  # a delete_prefix's
    prev_value: bool = False  # a put's or a delete's result carries the key as it was before


class Txn(ClientRequest[TxnResult], frozen=True, tag="txn"):
    """If every compare holds, the success ops run, otherwise the failure ops: all in one committed state. Each
    `delete_prefix` op deletes at most `delete_limit` keys (as `KvDeletePrefix.limit`)."""

    compare: tuple[TxnCompare, ...] = ()
    success: tuple[TxnOp, ...] = ()
    failure: tuple[TxnOp, ...] = ()
    delete_limit: Long | None = None


MAX_TXN_OPS = 64


def compare_problem(compare: TxnCompare) -> str | None:
    """A key named well, exactly one of `version`, `create_version` and `value` (nested no deeper than a key's
    value may be), and an ordering of values only between numbers or strings."""
    problem = metadata_key_problem(compare.key)
    if problem is not None:
        return problem
    given = [name for name in ("version", "create_version", "value") if getattr(compare, name) is not msgspec.UNSET]
    if len(given) != 1:
        return f"the compare of [{compare.key}] needs exactly one of [version], [create_version] and [value]"
    if given == ["value"] and (problem := value_problem(compare.key, compare.value)) is not None:
        return problem
    if given == ["value"] and compare.op in ("<", ">"):
        value = compare.value
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return f"the compare of [{compare.key}] orders values with [{compare.op}]: give a number or a string"
    return None


def _op_problem(op: TxnOp) -> str | None:
    """The fields one op takes: a delete_prefix a `prefix` and nothing else, any other op a key."""
    if op.op == "delete_prefix":
        if op.key or op.value is not msgspec.UNSET or op.session is not None or op.prev_value:
            return "a [delete_prefix] op takes only a [prefix]"
        return key_prefix_problem(op.prefix) if op.prefix is not None else "a [delete_prefix] op needs a [prefix]"
    if op.prefix is not None:
        return f"a [{op.op}] op takes no [prefix]"
    if op.prev_value and op.op == "get":
        return "a [get] op takes no [prev_value]"
    return metadata_key_problem(op.key)


def txn_problem(txn: Txn) -> str | None:
    """Every key named well, at most MAX_TXN_OPS compares and ops, a value for every put, and in each branch a
    key at most once among the put and delete ops (their order within a state would be ambiguous)."""
    if len(txn.compare) > MAX_TXN_OPS or len(txn.success) + len(txn.failure) > MAX_TXN_OPS:
        return f"a transaction has at most [{MAX_TXN_OPS}] compares and [{MAX_TXN_OPS}] ops"
    for compare in txn.compare:
        problem = compare_problem(compare)
        if problem is not None:
            return f"compare: {problem}"
    for branch, ops in (("success", txn.success), ("failure", txn.failure)):
        written: set[str] = set()
        for op in ops:
            problem = _op_problem(op)
            if problem is not None:
                return f"{branch}: {problem}"
            if op.op == "delete_prefix":
                continue
            if op.op == "put" and op.value is msgspec.UNSET:
                return f"{branch}: the put of [{op.key}] has no [value]"
            if op.op == "put" and (problem := value_problem(op.key, op.value)) is not None:
                return f"{branch}: {problem}"
            if op.op != "put" and op.value is not msgspec.UNSET:
                return f"{branch}: a [{op.op}] op takes no [value]"
            if op.session is not None:
                if op.op != "put":
                    return f"{branch}: a [{op.op}] op takes no [session]"
                problem = session_id_problem(op.session)
                if problem is not None:
                    return f"{branch}: {problem}"
            if op.op in ("put", "delete"):
                if op.key in written:
                    return f"{branch}: key [{op.key}] is put or deleted more than once"
                written.add(op.key)
    return None


_CANONICAL = msgspec.json.Encoder(order="sorted")


def _ordered(actual: Any, expected: Any, op: CompareOp) -> bool:
    if op == "=":
        return bool(actual == expected)
    if op == "!=":
        return bool(actual != expected)
    return bool(actual < expected) if op == "<" else bool(actual > expected)


def compare_holds(compare: TxnCompare, versions: KeyVersion | None, value: Any) -> bool:
    """Whether the key, with `versions` (None: it does not exist) and `value`, satisfies `compare`."""
    if compare.value is not msgspec.UNSET:
        if versions is None:
            return False  # no value to compare, whatever the op (as etcd's value compares)
        if compare.op in ("=", "!="):
            return _ordered(_CANONICAL.encode(value), _CANONICAL.encode(compare.value), compare.op)
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, compare.value)) or all(
            isinstance(v, str) for v in (value, compare.value)
        ):
            return _ordered(value, compare.value, compare.op)
        return False
    if compare.create_version is not msgspec.UNSET:
        return _ordered(versions.create_version if versions else 0, compare.create_version, compare.op)
    return _ordered(versions.version if versions else 0, compare.version, compare.op)


def run_txn(txn: Txn, keys: BatchKeys) -> TxnResult | ClusterError:
    """Compare, then run one branch against the state the batch builds. The version is stamped later.
    A put bound to a session that does not exist fails the whole transaction, before any op runs."""
    succeeded = all(compare_holds(c, keys.get(c.key), keys.kv.get(c.key)) for c in txn.compare)
    ops = txn.success if succeeded else txn.failure
    for op in ops:
        if op.session is not None and op.session not in keys.sessions:
            return client.session_not_found_error(op.session)
    results: list[TxnOpResult] = []
    for op in ops:
        prev = keys.previous(op.key) if op.prev_value else msgspec.UNSET
        if op.op == "put":
            versions = keys.put(op.key, None if op.value is msgspec.UNSET else op.value, op.session)
            results.append(TxnOpResult("put", op.key, True, None, versions.version, versions.create_version, prev=prev))
        elif op.op == "delete":
            results.append(TxnOpResult("delete", op.key, keys.delete(op.key), prev=prev))
        elif op.op == "delete_prefix":
            assert op.prefix is not None  # checked by txn_problem
            deleted, more = keys.delete_prefix(op.prefix, txn.delete_limit)
            results.append(TxnOpResult("delete_prefix", op.prefix, deleted > 0, deleted=deleted, more=more))
        else:
            found = keys.get(op.key)
            if found is None:
                results.append(TxnOpResult("get", op.key, False))
            else:
                value = keys.kv[op.key]
                results.append(TxnOpResult("get", op.key, True, value, found.version, found.create_version))
    return TxnResult(succeeded, 0, 0, tuple(results))


def _puts(txn: Txn) -> list[tuple[str, Any]]:
    return [(op.key, op.value) for op in (*txn.success, *txn.failure) if op.op == "put"]


TXN = Action(
    Txn,
    Runs.MASTER,
    validate=lambda request, state, settings: txn_problem(request),
    execute=lambda request, draft: run_txn(request, draft.keys),
    confirm_unwritten=True,
    writes_values=_puts,
    describe=lambda txn: f"Txn [{len(txn.compare)} compares, {len(txn.success)}/{len(txn.failure)} ops]",
)
ACTIONS: tuple[Action[Any], ...] = (TXN,)
