"""Reading what the user gives: a JSON value on the command line or stdin (`-`), a JSON document from a file,
JSON Lines. Anything malformed is a `BadInput` naming the argument, file or line, before anything is sent."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from coordinated.ctl.failures import BadInput, one_line


def json_value(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        hint = " (a string is quoted in JSON: '\"text\"')" if text and text[0] not in '{["-0123456789tfn' else ""
        raise BadInput(f"{what} is not JSON: {one_line(str(error))}{hint}") from error


def value_argument(text: str) -> Any:
    """A VALUE argument: JSON, or `-` to read the JSON from stdin."""
    if text == "-":
        return json_value(read_text(sys.stdin, "stdin"), "the value on stdin")
    return json_value(text, "VALUE")


def read_text(stream: IO[str], name: str) -> str:
    try:
        return stream.read()
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{name}: cannot read it: {one_line(str(error))}") from error


def json_document(stream: IO[str]) -> Any:
    name = "stdin" if stream.name == "<stdin>" else str(stream.name)
    return json_value(read_text(stream, name), name)


def json_lines(stream: IO[str]) -> list[Any]:
    """Every non-blank line of the stream as JSON."""
    name = "stdin" if stream.name == "<stdin>" else str(stream.name)
    values = []
    for number, line in enumerate(read_text(stream, name).splitlines(), start=1):
        if line.strip():
            values.append(json_value(line, f"{name} line {number}"))
    return values
