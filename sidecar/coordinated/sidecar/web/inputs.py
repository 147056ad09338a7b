"""What a handler reads of a request, each part checked with a 400 that names the problem: the query (its
parameters checked against the route's declaration before the handler runs), the key in the path, and the
body."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote

import msgspec
from aiohttp import web

from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.settings import parse_time_ms
from coordinated.coordination.validation import key_prefix_problem, metadata_key_problem, stored_key_problem
from coordinated.sidecar.web.app_keys import node_of
from coordinated.sidecar.web.errors import BadRequest

DEFAULT_TIMEOUT = "30s"
_DEFAULT_TIMEOUT_MS = parse_time_ms(DEFAULT_TIMEOUT)
NO_PARAMS: Mapping[str, str] = MappingProxyType({})
_COMMON_PARAMS = {"pretty", "human", "error_trace", "filter_path"}


# -- the query ----------------------------------------------------------------------------------------------


def check_params(
    request: web.Request, allowed: frozenset[str], repeatable: frozenset[str] = frozenset()
) -> Mapping[str, str]:
    """The query, once every parameter is known and given once (those of `repeatable` may repeat: read them
    with `request.query.getall`). The registration runs it with the route's declared parameters."""
    if not request.query_string:
        return NO_PARAMS  # most requests: no query to parse (yarl's parse of even an empty one costs)
    raw_query = request.rel_url.raw_query_string
    if "%" in raw_query:  # yarl would decode invalid UTF-8 to U+FFFD: a parameter changed without a word
        try:
            parse_qsl(raw_query, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError as error:
            raise BadRequest(f"the query string is not UTF-8 once percent-decoded: {error}") from None
    unknown = sorted(set(request.query) - allowed - _COMMON_PARAMS)
    if unknown:
        raise BadRequest(
            f"request [{request.path}] contains unrecognized parameter{'s' if len(unknown) > 1 else ''}: {unknown}"
        )
    for name in request.query:
        if name not in repeatable and len(request.query.getall(name)) > 1:
            raise BadRequest(f"parameter [{name}] is given more than once")
    return request.query


def param_bool(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value in ("", "true"):
        return True
    if value == "false":
        return False
    raise BadRequest(f"failed to parse value [{value}] as only [true] or [false] are allowed for parameter [{name}]")


def param_time_ms(query: Mapping[str, str], name: str, default: str) -> int:
    value = query.get(name, default)
    try:
        parsed = parse_time_ms(value)
    except ValueError as error:
        raise BadRequest(f"failed to parse parameter [{name}]: {error}") from None
    if parsed > 3_600_000:
        raise BadRequest(f"parameter [{name}] must be at most 1h, got [{value}]")
    return parsed


def param_int(query: Mapping[str, str], name: str, default: int | None, minimum: int = 0) -> int | None:
    value = query.get(name)
    if value is None:
        return default
    # Plain ASCII digits only: int() would also take " 5", "+5", "1_000" and other scripts' digits.
    if not value.isascii() or not value.isdigit() or int(value) > LONG_MAX:
        raise BadRequest(f"failed to parse parameter [{name}]: expected a non-negative long, got [{value}]")
    parsed = int(value)
    if parsed < minimum:
        raise BadRequest(f"parameter [{name}] must be at least {minimum}, got [{value}]")
    return parsed


def timeout_of(query: Mapping[str, str]) -> int:
    if not query:
        return _DEFAULT_TIMEOUT_MS
    if "timeout" in query and "master_timeout" in query:
        raise BadRequest("give only one of [timeout] and [master_timeout]")
    name = "master_timeout" if "master_timeout" in query else "timeout"
    return param_time_ms(query, name, DEFAULT_TIMEOUT)


def write_condition(query: Mapping[str, str]) -> int | None:
    """`if_version=N` (0: the key must not exist) or `op_type=create`; None for an unconditional write."""
    if not query:
        return None
    op_type = query.get("op_type", "index")
    if op_type not in ("index", "create"):
        raise BadRequest(f"opType must be 'create' or 'index', found: [{op_type}]")
    if_version: int | None = None
    if "if_version" in query:
        raw = query["if_version"]
        if not raw.isascii() or not raw.isdigit() or int(raw) > LONG_MAX:
            raise BadRequest(f"failed to parse parameter [if_version]: [{raw}] is not a non-negative long")
        if_version = int(raw)
    if op_type == "create":
        if if_version not in (None, 0):
            raise BadRequest("[op_type=create] means [if_version=0]; it cannot be combined with another version")
        return 0
    return if_version


def query_prefix(query: Mapping[str, str]) -> str:
    """The `prefix` parameter: empty (or absent) for every key."""
    prefix = query.get("prefix", "")
    problem = key_prefix_problem(prefix)
    if problem is not None:
        raise BadRequest(f"invalid parameter [prefix]: {problem}")
    return prefix


# -- the path -----------------------------------------------------------------------------------------------


def key_in_path(request: web.Request) -> str:
    """The key named by the rest of the path, percent-decoded once as UTF-8: `%2F` names the same key as `/`,
    and `%252F` a key with `%2F` in it. aiohttp's decoded path cannot tell those two apart, so the raw path
    is decoded here, exactly once."""
    encoded = request.rel_url.raw_path.split("/", 3)[3]  # after "", "_cluster" and "metadata"
    try:
        return unquote(encoded, errors="strict")
    except UnicodeDecodeError as error:
        raise BadRequest(f"the key in the path is not UTF-8 once percent-decoded: {error}") from None


def check_key(request: web.Request) -> str:
    """The key a write names, as every write checks it."""
    key = key_in_path(request)
    problem = metadata_key_problem(key)
    if problem is not None:
        raise BadRequest(problem)
    return key


def check_stored_key(request: web.Request) -> str:
    """The key a read or a delete names: any key this node's state holds, else a name the rules allow."""
    key = key_in_path(request)
    problem = stored_key_problem(key, node_of(request).keys.applied_state)
    if problem is not None:
        raise BadRequest(problem)
    return key


# -- the body -----------------------------------------------------------------------------------------------


async def read_json(request: web.Request, required: bool = True) -> Any:
    body = await request.read()
    if not body.strip():
        if required:
            raise BadRequest("request body is required", "parse_exception")
        return None
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as error:
        raise BadRequest(f"malformed JSON body: {error}", "parse_exception") from None
    except UnicodeDecodeError as error:
        raise BadRequest(f"malformed JSON body: invalid UTF-8: {error}", "parse_exception") from None
    except RecursionError:
        raise BadRequest("malformed JSON body: nested too deeply", "parse_exception") from None


def decode_body(data: Any, type_: type[Any], what: str) -> Any:
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as error:
        raise BadRequest(f"invalid {what}: {error}", "x_content_parse_exception") from None


async def no_body(request: web.Request) -> None:
    if (await request.read()).strip():
        raise BadRequest(f"request [{request.method} {request.path}] does not support having a body")
