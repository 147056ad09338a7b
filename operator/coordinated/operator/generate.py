"""Writes what is generated from the settings registries: docs/settings.md and the CRD's `spec.settings` schema.

python -m coordinated.operator.generate            # rewrite both
python -m coordinated.operator.generate --check    # exit 1 when either is out of date (`make lint` runs it)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinated.operator import crd_settings, settings_doc

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "settings.md"
CRD = REPO / "crds" / "coordinatedclusters.coordinated.dev.yaml"


def generated(doc: Path = DOC, crd: Path = CRD) -> dict[Path, str]:
    """Each generated file's path and the text it must have."""
    return {doc: settings_doc.render(), crd: crd_settings.render(crd.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file is out of date")
    parser.add_argument("--doc", type=Path, default=DOC, help=argparse.SUPPRESS)
    parser.add_argument("--crd", type=Path, default=CRD, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated(args.doc, args.crd).items():
        current = path.read_text() if path.exists() else ""
        if current == text:
            continue
        if args.check:
            stale.append(path)
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path} is out of date: run python -m coordinated.operator.generate", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
