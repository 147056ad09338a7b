"""Writes what is generated from the settings registries: docs/settings.md and the CRD's `spec.settings` schema.

python -m coordinated.operator.generate            # rewrite both
python -m coordinated.operator.generate --check    # exit 1 when either is out of date (`make lint` runs it)
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from coordinated.operator import crd_settings, settings_doc
from coordinated.programs import run_program

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "settings.md"
CRD = REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml"


def generated(doc: Path = DOC, crd: Path = CRD) -> dict[Path, str]:
    """Each generated file's path and the text it must have."""
    return {doc: settings_doc.render(), crd: crd_settings.render(crd.read_text())}


@click.command(help=__doc__.splitlines()[0] if __doc__ else None)
@click.option("--check", is_flag=True, help="exit 1 if a generated file is out of date")
@click.option("--doc", type=click.Path(path_type=Path), default=DOC, hidden=True)
@click.option("--crd", type=click.Path(path_type=Path), default=CRD, hidden=True)
def generate(check: bool, doc: Path, crd: Path) -> int:
    stale = []
    for path, text in generated(doc, crd).items():
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if check:
            stale.append(path)
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path} is out of date: run python -m coordinated.operator.generate", file=sys.stderr)
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    return run_program(generate, argv, "python -m coordinated.operator.generate")


if __name__ == "__main__":
    sys.exit(main())
