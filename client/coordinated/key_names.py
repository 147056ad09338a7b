"""The rules a key name follows: one definition for the server, the client and the docs.

The server refuses a name that breaks a rule with a 400 that names the rule; the client refuses it before
sending; docs/applications.md lists the rules from `RULES` (a test keeps it up to date). This module needs
only the standard library, so the server's protocol core imports it without the client's HTTP stack.

A name that follows the rules is stored and returned exactly as given, byte for byte: nothing normalizes it
(not Unicode normalization, not path segments). That is why the rules refuse what something on the way could
rewrite: `.` and `..` segments (URL dot-segment removal), empty segments (merged slashes), and characters
that are invisible or reorder the text around them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

MAX_KEY_LENGTH = 256  # characters (code points), not bytes
RESERVED_START = "_"  # the API's own paths under /_cluster/metadata/ (`_txn`, `_watch`) start with it
SEPARATOR = "/"


@dataclass(frozen=True)
class KeyRule:
    """One rule: `name` is what a refusal quotes, `summary` what the docs add to it, and `broken_by`
    returns what in a name breaks the rule (None when the name keeps it)."""

    name: str
    summary: str
    broken_by: Callable[[str], str | None]


def _shown(text: str) -> str:
    """`text` safe to print in an error message: characters a terminal would hide or act on are escaped."""
    return "".join(
        char if char.isprintable() and unicodedata.category(char) not in ("Cf", "Zl", "Zp") else _code(char)
        for char in text
    )


def _code(char: str) -> str:
    return f"U+{ord(char):04X}"


def _length(name: str) -> str | None:
    if 1 <= len(name) <= MAX_KEY_LENGTH:
        return None
    return f"it has {len(name)} characters"


def _reserved(name: str) -> str | None:
    if name.startswith(RESERVED_START):
        return f"it starts with [{RESERVED_START}], which is reserved for the API's own paths"
    return None


def _empty_segment(name: str) -> str | None:
    if name.startswith(SEPARATOR):
        return "it starts with [/]"
    if name.endswith(SEPARATOR):
        return "it ends with [/]"
    return "it has [//]" if SEPARATOR * 2 in name else None


def _dot_segment(name: str) -> str | None:
    for segment in name.split(SEPARATOR):
        if segment in (".", ".."):
            return f"it has a [{segment}] segment"
    return None


def _character_in(categories: tuple[str, ...], what: str) -> Callable[[str], str | None]:
    def broken_by(name: str) -> str | None:
        if name.isprintable():  # every category refused here is non-printable: most names end here, in C
            return None
        for char in name:
            category = unicodedata.category(char)
            if category in categories:
                return f"it has {_code(char)} ({what}, Unicode category {category})"
        return None

    return broken_by


# The rules on characters: a prefix (the start of a name) follows these and the reserved `_`, no others.
CHARACTER_RULES = (
    KeyRule(
        "no control characters",
        "Unicode category Cc: the C0 and C1 controls and DEL",
        _character_in(("Cc",), "a control character"),
    ),
    KeyRule(
        "no format characters",
        "Unicode category Cf: bidirectional overrides, isolates and marks, zero-width characters, the soft "
        "hyphen, the byte order mark",
        _character_in(("Cf",), "a format character"),
    ),
    KeyRule(
        "no line or paragraph separators",
        "U+2028 and U+2029",
        _character_in(("Zl", "Zp"), "a line or paragraph separator"),
    ),
    KeyRule(
        "no surrogates",
        "Unicode category Cs: a lone surrogate is not a character, and UTF-8 cannot carry it",
        _character_in(("Cs",), "a lone surrogate"),
    ),
)

RESERVED_RULE = KeyRule(
    "no leading underscore",
    "names starting with `_` are reserved for the API's own paths (`_txn`, `_watch`)",
    _reserved,
)
PREFIX_RULES = (RESERVED_RULE, *CHARACTER_RULES)
RULES = (
    KeyRule("1 to 256 characters", "counted in code points, not bytes", _length),
    RESERVED_RULE,
    KeyRule("no empty segments", "no `/` at the start or the end, no `//`", _empty_segment),
    KeyRule(
        "no dot segments", "no segment that is `.` or `..` (`a/./b`, `../a`); `.env` and `a..b` are fine", _dot_segment
    ),
    *CHARACTER_RULES,
)


def _first_broken(rules: tuple[KeyRule, ...], text: str, what: str) -> str | None:
    for rule in rules:
        broken = rule.broken_by(text)
        if broken is not None:
            return f"{what} [{_shown(text[:300])}] breaks the rule [{rule.name}]: {broken}"
    return None


def key_problem(name: object) -> str | None:
    """Why `name` cannot be a key, naming the rule it breaks; None when it can."""
    if not isinstance(name, str):
        return f"a key name is a string, not {type(name).__name__}"
    return _first_broken(RULES, name, "key name")


def prefix_problem(prefix: object) -> str | None:
    """Why `prefix` cannot start any key, naming the rule; None when it can. The empty prefix matches
    every key; segments are not checked, since a prefix may end inside a segment (`a/.` matches `a/.env`)."""
    if not isinstance(prefix, str):
        return f"a key prefix is a string, not {type(prefix).__name__}"
    if len(prefix) > MAX_KEY_LENGTH:
        return f"key prefix has {len(prefix)} characters, but a key has at most {MAX_KEY_LENGTH}"
    return _first_broken(PREFIX_RULES, prefix, "key prefix")


def rules_markdown() -> str:
    """The rules as the docs list them."""
    return "\n".join(f"- [{rule.name}]: {rule.summary}" for rule in RULES) + "\n"
