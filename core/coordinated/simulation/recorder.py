"""What the simulated clients did, as the linearizability checkers model it.

- Single-key operations (`Operation`, checked key by key): puts, deletes and gets of keys of no other kind
  below, conditional ones (`if_version`) included, and single-key transactions of the counter clients
  ([compare version or value] then [put] else [get]), as a conditional write plus the get of their failure
  branch.
- Transactions over the keys under MULTI_KEY_PREFIX, which only such transactions touch (`txn_operations`,
  checked together).
- Everything done to the keys under RANGE_PREFIX (`range_operations`, checked together): puts, deletes, prefix
  deletes and range reads, each one `TxnOperation`, since a prefix delete or a range read spans the keys.

Ephemeral keys are left out: a session's end deletes them, which the session checks judge. A write that failed
but may have taken effect is recorded with an unknown outcome; a failed read is not recorded.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from coordinated.coordination.client import ClientRequest, ClientResult, ClusterError, Committed, ReadValue, TxnResult
from coordinated.coordination.ranges import RangeEntry, decoded_value
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvGet, KvPut
from coordinated.coordination.requests.transactions import Txn, TxnOp
from coordinated.simulation.linearizability import MISSING, UNCONDITIONAL, Operation, TxnOperation

MULTI_KEY_PREFIX = "acct/"
RANGE_PREFIX = "r/"


def _uncertain(result: ClientResult) -> bool:
    return isinstance(result, ClusterError) and result.maybe_applied


# The key's current version in a refusal's reason, as `client.version_conflict_error` words it.
_CURRENT_VERSION = re.compile(r"current version \[(\d+)\]")


def refused_at(result: ClientResult) -> int | None:
    """The key's version that a refused conditional write found (0: absent), None if it does not say: a 409 names
    it in its reason, and a single-key transaction's failure branch reads it."""
    if isinstance(result, TxnResult) and not result.succeeded and result.results:
        read = result.results[0]
        return read.version if read.found else 0
    if not isinstance(result, ClusterError) or result.status != 409:
        return None
    if result.reason.endswith("but no document was found"):
        return 0
    found = _CURRENT_VERSION.search(result.reason)
    return int(found.group(1)) if found else None


class OperationRecorder:
    def __init__(self) -> None:
        self.operations: list[Operation] = []
        self.txn_operations: list[TxnOperation] = []
        self.range_operations: list[TxnOperation] = []

    def record(
        self, client: int, request: ClientRequest[Any], invoked: int, result: ClientResult, completed: int
    ) -> None:
        if isinstance(request, Txn):
            self._record_txn(client, request, invoked, result, completed)
        elif isinstance(request, KvDeletePrefix):
            if request.prefix.startswith(RANGE_PREFIX):
                # (its limit, and what it answered: how many it deleted and whether any was left)
                seen = None
                if isinstance(result, Committed):
                    seen = (0 if result.deleted is msgspec.UNSET else result.deleted, result.more)
                deletion = ("delete_prefix", request.prefix, (request.limit, seen))
                self._record_on_ranges(client, (deletion,), invoked, result, completed)
        elif isinstance(request, KvPut | KvDelete) and request.key.startswith(RANGE_PREFIX) and not _ephemeral(request):
            op = ("put", request.key, request.value) if isinstance(request, KvPut) else ("delete", request.key, None)
            self._record_on_ranges(client, (op,), invoked, result, completed)
        elif isinstance(request, KvGet):
            if isinstance(result, ReadValue):
                value = result.value if result.found else MISSING
                self.operations.append(
                    Operation(client, request.key, "get", invoked, completed, result=value, version=result.key_version)
                )
        elif isinstance(request, KvPut | KvDelete) and not _ephemeral(request):
            kind = "put" if isinstance(request, KvPut) else "delete"
            self._record_write(
                client,
                request.key,
                kind,
                getattr(request, "value", None),
                request.if_version,
                UNCONDITIONAL,
                invoked,
                result,
                completed,
            )

    def record_range(self, client: int, invoked: int, completed: int, prefix: str, entries: list[RangeEntry]) -> None:
        returned = tuple((entry.key, decoded_value(entry), entry.version) for entry in entries)
        op = TxnOperation(client, invoked, completed, (), (("range", prefix, None),), (), True, ranges=(returned,))
        self.range_operations.append(op)

    def _record_write(
        self,
        client: int,
        key: str,
        kind: str,
        value: Any,
        if_version: int | None,
        if_value: Any,
        invoked: int,
        result: ClientResult,
        completed: int,
    ) -> None:
        conditions: dict[str, Any] = {"if_version": if_version, "if_value": if_value}
        if isinstance(result, Committed) or (isinstance(result, TxnResult) and result.succeeded):
            self.operations.append(
                Operation(client, key, kind, invoked, completed, value, version=result.version, **conditions)
            )
        elif (isinstance(result, ClusterError) and result.status == 409) or isinstance(result, TxnResult):
            self.operations.append(
                Operation(
                    client,
                    key,
                    kind,
                    invoked,
                    completed,
                    value,
                    conflict=True,
                    version=refused_at(result),
                    **conditions,
                )
            )
        elif _uncertain(result):
            self.operations.append(Operation(client, key, kind, invoked, math.inf, value, certain=False, **conditions))

    def _record_on_ranges(
        self,
        client: int,
        ops: tuple[tuple[str, str, Any], ...],
        invoked: int,
        result: ClientResult,
        completed: int,
    ) -> None:
        if isinstance(result, Committed):
            self.range_operations.append(TxnOperation(client, invoked, completed, (), ops, (), True, result.version))
        elif _uncertain(result):
            self.range_operations.append(TxnOperation(client, invoked, math.inf, (), ops, (), None))

    def _record_txn(self, client: int, txn: Txn, invoked: int, result: ClientResult, completed: int) -> None:
        """A single-key transaction as the checker models it: [compare version or value] then [put] else [get].
        Other transactions are not recorded: the checker tests keys one at a time."""
        keys = {compare.key for compare in txn.compare} | {o.key for o in (*txn.success, *txn.failure)}
        if keys and all(key.startswith(MULTI_KEY_PREFIX) for key in keys):
            self._record_multi_key_txn(client, txn, invoked, result, completed)
            return
        shape = [(op.op, op.key) for op in (*txn.success, *txn.failure)]
        if len(txn.compare) != 1 or shape != [("put", txn.compare[0].key), ("get", txn.compare[0].key)]:
            return
        compare, write = txn.compare[0], txn.success[0]
        if compare.op != "=" or compare.create_version is not msgspec.UNSET:
            return
        if_version = None if compare.version is msgspec.UNSET else compare.version
        if_value = UNCONDITIONAL if compare.value is msgspec.UNSET else compare.value
        self._record_write(client, compare.key, "put", write.value, if_version, if_value, invoked, result, completed)
        if isinstance(result, TxnResult) and not result.succeeded:
            read = result.results[0]
            self.operations.append(
                Operation(
                    client,
                    compare.key,
                    "get",
                    invoked,
                    completed,
                    result=read.value if read.found else MISSING,
                    version=read.version,
                )
            )

    def _record_multi_key_txn(self, client: int, txn: Txn, invoked: int, result: ClientResult, completed: int) -> None:
        def ops(branch: tuple[TxnOp, ...]) -> tuple[tuple[str, str, Any], ...]:
            return tuple((o.op, o.key, None if o.value is msgspec.UNSET else o.value) for o in branch)

        if any(c.op != "=" or c.version is msgspec.UNSET for c in txn.compare):
            return  # the transfer clients compare versions only
        compares = tuple((c.key, c.version) for c in txn.compare if c.version is not msgspec.UNSET)
        if isinstance(result, TxnResult):
            reads = tuple(
                (r.key, r.value if r.found else MISSING, r.version if r.found else 0)
                for r in result.results
                if r.op == "get"
            )
            version = result.version if result.wrote() else None
            self.txn_operations.append(
                TxnOperation(
                    client,
                    invoked,
                    completed,
                    compares,
                    ops(txn.success),
                    ops(txn.failure),
                    result.succeeded,
                    version,
                    reads,
                )
            )
        elif _uncertain(result):
            self.txn_operations.append(
                TxnOperation(client, invoked, math.inf, compares, ops(txn.success), ops(txn.failure), None)
            )


def _ephemeral(request: KvPut | KvDelete) -> bool:
    return isinstance(request, KvPut) and request.session is not None
