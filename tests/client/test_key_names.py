"""Key names without a server: every rule of `coordinated.key_names` refuses what it should and only that,
the client refuses a name before sending anything, and the path it sends decodes to exactly the name,
whatever httpx does to URLs. Real nodes: test_key_names_on_nodes.py."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
from client_drivers import Driver
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinated.client import InvalidKey, put_op
from coordinated.client.calls import key_path
from coordinated.key_names import RULES, key_problem, prefix_problem
from coordinated.tools import key_rules_doc

# For each rule, names that break it and no rule before it.
BROKEN = {
    "1 to 256 characters": ["", "x" * 257],
    "no leading underscore": ["_txn", "_watch", "_a/b"],
    "no empty segments": ["/a", "a/", "/", "a//b", "a/b//"],
    "no dot segments": [".", "..", "a/./b", "locks/../config/app", "a/..", "./a", "../a"],
    "no control characters": ["a\x00", "bad\nkey", "a\x7f", "a\x85b", "a\x9bb", "tab\t"],
    "no format characters": ["a\u202eb", "a\u200bb", "\ufeffa", "a\u00adb", "a\u2066b", "a\u200db"],
    "no line or paragraph separators": ["a\u2028b", "a\u2029b"],
    "no surrogates": ["a\ud800b", "\udfff"],
}
# Names that look suspicious but keep every rule: they are stored exactly as given.
KEPT = [
    "x%2Fy",
    "x%252Fy",
    "%",
    "%zz",
    "a/.b",
    "a/..b",
    "a/.../b",
    "...",
    "a.b/c..d",
    "café",
    "cafe\u0301",  # the same letter decomposed: a different key, never normalized
    "日本/語",
    "emoji😀",
    "a b",
    "a+b",
    "a?b=c&d#e",
    "a;b",
    "\u00a0nbsp",
    "\\windows\\path",
    "x" * 256,
    "locks/app-1",
    "~user",
]


def test_every_rule_has_examples() -> None:
    assert set(BROKEN) == {rule.name for rule in RULES}


@pytest.mark.parametrize(("rule", "name"), [(rule, name) for rule, names in BROKEN.items() for name in names])
def test_a_name_that_breaks_a_rule_is_refused_naming_the_rule(rule: str, name: str) -> None:
    problem = key_problem(name)
    assert problem is not None and f"[{rule}]" in problem, problem
    assert problem.isprintable(), "the reason shows no raw control or format character"
    with pytest.raises(InvalidKey) as refused:
        key_path(name)
    assert str(refused.value) == problem


@pytest.mark.parametrize("name", KEPT)
def test_a_name_that_keeps_every_rule_is_sent_as_it_is(name: str) -> None:
    assert key_problem(name) is None
    assert sent_name(name) == name


def sent_name(name: str) -> str:
    """The name the server decodes from the path the client sends: what httpx puts on the wire, decoded
    once as UTF-8 (as the server does)."""
    url = httpx.URL("http://127.0.0.1:9200" + key_path(name))
    raw_path = url.raw_path.decode("ascii").split("?", 1)[0]
    return unquote(raw_path.removeprefix("/_cluster/metadata/"), errors="strict")


NAME_CHARACTERS = st.characters(codec="utf-8") | st.sampled_from(list("/.%?#+ _-~\u202e\u200b\u2028\x85\x00"))


@settings(max_examples=600, deadline=None)
@given(st.text(NAME_CHARACTERS, min_size=0, max_size=30))
def test_any_name_is_sent_byte_for_byte_or_refused(name: str) -> None:
    problem = key_problem(name)
    if problem is not None:
        with pytest.raises(InvalidKey):
            key_path(name)
    else:
        assert sent_name(name).encode() == name.encode()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["", ".", "..", "a", ".a", "a.", "%2F", "%2e%2e", "b c"]), min_size=1, max_size=6))
def test_names_made_of_tricky_segments(segments: list[str]) -> None:
    name = "/".join(segments)
    if any(segment in ("", ".", "..") for segment in segments):
        assert key_problem(name) is not None
    else:
        assert key_problem(name) is None and sent_name(name) == name


def test_prefixes_follow_the_character_rules_only() -> None:
    assert prefix_problem("") is None
    assert prefix_problem("config/") is None  # ends inside a name: `config/app`
    assert prefix_problem("a/.") is None  # matches `a/.env`
    assert "[no format characters]" in (prefix_problem("a\u202e") or "")
    assert "reserved" in (prefix_problem("_t") or "")
    assert prefix_problem("x" * 257) is not None


def test_the_client_refuses_a_bad_name_without_sending_anything(driver: Driver) -> None:
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500)

    client = driver.client("127.0.0.1:1", handler=record)
    for call in (
        lambda: client.put("locks/../config/app", 1),
        lambda: client.get("a/./b"),
        lambda: client.delete("dir/"),
        lambda: client.create("a\u202eb", 1),
        lambda: client.txn([("ok", 0)], [put_op("a//b", 1)]),
        lambda: client.txn([("..", 0)], []),
        lambda: client.watch_once("a\x85", timeout=0),
    ):
        with pytest.raises(InvalidKey):
            driver.run(call())
    assert sent == []


def test_the_documented_rules_are_the_checked_ones(tmp_path: Path) -> None:
    assert key_rules_doc.main(check=True) == 0, f"run: {key_rules_doc.COMMAND}"
    stale = tmp_path / "applications.md"
    stale.write_text(key_rules_doc.DOC.read_text().replace("[no dot segments]", "[no dots]"))
    assert key_rules_doc.main(check=True, output=stale) == 1
    assert key_rules_doc.main(output=stale) == 0 and key_rules_doc.main(check=True, output=stale) == 0
