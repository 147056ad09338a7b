"""The audit's program in the `coordinated` command (registered in pyproject.toml, `coordinated.commands`): it
imports the audit, and PySpark, only when it runs."""

from __future__ import annotations

from coordinated.programs import Main, program


@program("audit history files against the protocol's safety invariants")
def audit() -> Main:
    from coordinated.audit.cli import main

    return main
