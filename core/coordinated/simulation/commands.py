"""The core's program in the `coordinated` command (registered in pyproject.toml, `coordinated.commands`)."""

from __future__ import annotations

from coordinated.programs import Main, program


@program("run the deterministic simulator")
def simulate() -> Main:
    from coordinated.simulation.cli import main

    return main
