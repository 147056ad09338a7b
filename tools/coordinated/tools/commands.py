"""The process tools' program in the `coordinated` command (registered in pyproject.toml, `coordinated.commands`)."""

from __future__ import annotations

from coordinated.programs import Main, program


@program("run a local multi-node cluster demo, then audit it")
def demo() -> Main:
    from coordinated.tools.demo import main

    return main
