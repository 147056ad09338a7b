"""The operator's program in the `coordinated` command (registered in pyproject.toml, `coordinated.commands`):
it imports the operator, and Kopf, only when it runs."""

from __future__ import annotations

from coordinated.programs import Main, program


@program("run the Kopf operator for CoordinatedCluster resources")
def operator() -> Main:
    from coordinated.operator.cli import main

    return main
