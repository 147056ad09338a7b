"""The master's check of key names (`validation.request_problem`), which applies the rules of
`coordinated.key_names` to every request whether the API checked it or a peer skipped the API; and keys
that an earlier version stored under a name the rules now refuse."""

from __future__ import annotations

import pytest

from coordinated.coordination.client import KvDelete, KvGet, KvPut, Txn, TxnCompare, TxnOp
from coordinated.coordination.registry import default_settings
from coordinated.coordination.state import ClusterState
from coordinated.coordination.validation import request_problem
from coordinated.key_names import RULES

LEGACY = {"dir/": 1, "a/./b": 2, "bidi\u202ename": 3, "c1\x85": 4}


@pytest.mark.parametrize("key", ["locks/../config/app", "a/./b", "a//b", "x\u2028", "\u200bzero", "_txn"])
def test_every_request_naming_a_bad_key_is_refused(key: str) -> None:
    state = ClusterState("c")
    for request in (
        KvPut(key, 1),
        KvGet(key),
        KvDelete(key),
        Txn(compare=(TxnCompare(key, 0),)),
        Txn(success=(TxnOp("put", key, 1),)),
        Txn(failure=(TxnOp("delete", key),)),
    ):
        problem = request_problem(request, state, default_settings())
        assert problem is not None and "breaks the rule [" in problem, request
        assert any(f"[{rule.name}]" in problem for rule in RULES)


def test_a_key_stored_under_older_rules_stays_readable_and_deletable_but_is_never_written_again() -> None:
    state = ClusterState("c", kv=LEGACY)
    for key in LEGACY:
        assert request_problem(KvGet(key), state, default_settings()) is None
        assert request_problem(KvDelete(key), state, default_settings()) is None
        assert request_problem(KvPut(key, 0), state, default_settings()) is not None
        assert request_problem(KvDelete(key + "/"), state, default_settings()) is not None  # not stored
