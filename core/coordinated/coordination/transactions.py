"""A transaction, run against the state a batch builds: its compares, then one branch of ops."""

from __future__ import annotations

from typing import Any

import msgspec

from coordinated.coordination import client
from coordinated.coordination.batch_keys import BatchKeys
from coordinated.coordination.client import ClusterError, CompareOp, Txn, TxnCompare, TxnOpResult, TxnResult
from coordinated.coordination.state import KeyVersion

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
