"""`http.auth.tokens_file`: the file of client tokens, each the credential of one named principal with one role
(its format, and the `Tokens` that read it, are in auth/tokens_file.py; web/access checks the requests)."""

from __future__ import annotations

from coordinated.coordination.settings import Parsed, Setting
from coordinated.sidecar.auth.tokens_file import TokensFileError, load_tokens


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
    "file of `ROLE TOKEN [NAME]` lines (ROLE: `admin`, `writer`, `reader`, a custom role or `none`); without it "
    "(and without another realm), no authentication",
)
