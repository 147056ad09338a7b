"""The `coordinated` command: one entry point for the sidecar, the demo, the audit job and the operator.

Each subcommand lives in its own package and is imported lazily, so that running a node never imports
pyspark or kopf.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module exposing `main(argv) -> int`, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "node": ("coordinated.sidecar.cli", "run one sidecar node in the foreground"),
    "demo": ("coordinated.tools.demo", "run a local multi-node cluster demo, then audit it"),
    "node-tool": ("coordinated.sidecar.node_tool", "recover a stopped node after a quorum loss (unsafe-bootstrap)"),
    "audit": ("coordinated.audit.cli", "audit history files against the protocol's safety invariants"),
    "operator": ("coordinated.operator.cli", "run the Kopf operator for CoordinatedCluster resources"),
    "simulate": ("coordinated.simulation.cli", "run the deterministic simulator"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="coordinated", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in SUBCOMMANDS:
        parser.parse_args(argv)  # prints usage and exits 2
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
