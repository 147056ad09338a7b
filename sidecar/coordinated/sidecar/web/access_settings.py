"""`http.auth.tokens_file`: the file of client tokens and their roles, and its format (`access` checks the tokens).

One `ROLE TOKEN` pair per line (blank lines and `#` comments are ignored); a token is at least 16 characters."""

from __future__ import annotations

import hashlib
from pathlib import Path

from coordinated.coordination.settings import Parsed, Setting
from coordinated.sidecar.web.privileges import Role

ROLE_NAMES = {"reader": Role.READER, "writer": Role.WRITER, "admin": Role.ADMIN}


class TokensFileError(ValueError):
    pass


def parse_tokens(text: str, path: str) -> list[tuple[bytes, Role]]:
    tokens: list[tuple[bytes, Role]] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        parts = stripped.split()
        if len(parts) != 2:
            raise TokensFileError(f"line {number} of [{path}] must be `ROLE TOKEN`")
        role, token = parts
        if role not in ROLE_NAMES:
            raise TokensFileError(f"line {number} of [{path}] has unknown role [{role}]; use admin, writer or reader")
        if len(token) < 16:
            raise TokensFileError(f"the token on line {number} of [{path}] is shorter than 16 characters")
        tokens.append((token_digest(token), ROLE_NAMES[role]))
    if not tokens:
        raise TokensFileError(f"[{path}] holds no tokens")
    return tokens


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def load_tokens(path: str) -> list[tuple[bytes, Role]]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TokensFileError(f"cannot read [{path}]: {error}") from None
    return parse_tokens(text, path)


def parse_tokens_file(value: str) -> str:
    try:
        load_tokens(value)
    except TokensFileError as error:
        raise ValueError(str(error)) from None
    return value


TOKENS_FILE: Setting[str | None] = Setting(
    "http.auth.tokens_file",
    Parsed(parse_tokens_file),
    None,
    "file of `ROLE TOKEN` lines (`admin`, `writer`, `reader`); without it, no authentication",
)
