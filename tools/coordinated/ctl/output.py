"""The output formats: `-o table` for people, `-o json` (stable: sorted keys, two-space indent) and `-o yaml`
for scripts. A command gives its result as JSON-able data and, for the table, its columns."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import click

FORMATS = ("table", "json", "yaml")

output_option = click.option(
    "-o",
    "--output",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table for people; json or yaml for scripts",
)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def table(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """Aligned columns under upper-case headers; a row's missing field shows as `-`."""
    grid = [[column.upper() for column in columns], *([cell(row.get(c)) for c in columns] for row in rows)]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip() for line in grid
    )


def render(data: Any, output: str, columns: Sequence[str] = (), rows: Sequence[Mapping[str, Any]] | None = None) -> str:
    if output == "json":
        return json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True)
    if output == "yaml":
        import yaml  # only for -o yaml: it is a tenth of a command's start-up

        return yaml.safe_dump(data, sort_keys=True, allow_unicode=True).rstrip("\n")
    if rows is None:
        rows = data if isinstance(data, list) else [data]
    return table(columns or sorted({name for row in rows for name in row}), rows)


def emit(data: Any, output: str, columns: Sequence[str] = (), rows: Sequence[Mapping[str, Any]] | None = None) -> None:
    click.echo(render(data, output, columns, rows))
