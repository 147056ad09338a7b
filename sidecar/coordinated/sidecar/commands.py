"""The sidecar's programs in the `coordinated` command (registered in pyproject.toml, `coordinated.commands`):
each imports the sidecar only when it runs."""

from __future__ import annotations

from coordinated.programs import Main, program


@program("run one sidecar node in the foreground")
def node() -> Main:
    from coordinated.sidecar.cli import main

    return main


@program("recover a stopped node after a quorum loss (unsafe-bootstrap)")
def node_tool() -> Main:
    from coordinated.sidecar.node_tool import main

    return main
