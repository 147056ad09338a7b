"""The master's check of key names (`validation.request_problem`), which applies the rules of
`coordinated.key_names` to every request whether the API checked it or a peer skipped the API; and keys
that an earlier version stored under a name the rules now refuse."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinated import key_names
from coordinated.coordination.registry import default_settings
from coordinated.coordination.requests import request_problem
from coordinated.coordination.requests.keys import KvDelete, KvGet, KvPut
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp
from coordinated.coordination.state import ClusterState
from coordinated.key_names import CHARACTER_RULES, RULES

# The Unicode categories each of CHARACTER_RULES refuses, in its order.
CHARACTER_CATEGORIES = (("Cc",), ("Cf",), ("Zl", "Zp"), ("Cs",))

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


@given(st.text(max_size=40))
@settings(max_examples=500, deadline=None)
def test_each_character_rule_refuses_exactly_the_names_with_a_character_of_its_categories(name: str) -> None:
    categories = {rule.name: found for rule, found in zip(CHARACTER_RULES, CHARACTER_CATEGORIES, strict=True)}
    for rule in CHARACTER_RULES:
        has_one = any(unicodedata.category(char) in categories[rule.name] for char in name)
        assert (rule.broken_by(name) is not None) == has_one, (rule.name, name)


def test_a_printable_name_is_checked_without_looking_up_each_character(monkeypatch: pytest.MonkeyPatch) -> None:
    lookups = 0
    category = unicodedata.category

    def counted(char: str) -> str:
        nonlocal lookups
        lookups += 1
        return category(char)

    monkeypatch.setattr(unicodedata, "category", counted)  # the module key_names looks it up in
    assert key_names.key_problem("services/web-1/config.json") is None
    assert key_names.key_problem("città/über") is None
    assert lookups == 0
    assert key_names.key_problem("bidi\u202ename") is not None and lookups > 0
