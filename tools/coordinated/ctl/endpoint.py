"""`coordinated endpoint status|health`: each endpoint's node, asked on its own (no failover), as a table:
whether it is the master, its term and applied version, whether it votes, how far it lags behind the
newest version among the nodes, and its health."""

from __future__ import annotations

from typing import Any

import click

from coordinated.client import CoordinatedError
from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.failures import Failed, Unreachable, describe
from coordinated.ctl.output import emit

STATUS_COLUMNS = ("endpoint", "name", "id", "master", "term", "version", "voting", "applied_lag", "health", "error")
HEALTH_COLUMNS = ("endpoint", "name", "health", "master_node", "problems", "error")


@click.group()
def endpoint() -> None:
    """The nodes behind the endpoints, each asked on its own."""


def node_row(connection: Connection, address: str) -> dict[str, Any]:
    row: dict[str, Any] = {"endpoint": address}
    try:
        with connection.client([address], retry=False) as client:
            info = client.node_info()
            health = client.cluster_health()
            state = client.cluster_state(local=True)
    except CoordinatedError as error:
        return {**row, "health": "unreachable", "error": describe(error)}
    voters = state["metadata"]["cluster_coordination"]["last_committed_config"]
    problems = [problem["kind"] for problem in health.get("problems", [])]
    return {
        **row,
        "name": info["name"],
        "id": info["node_id"],
        "master": health["master_node"] == info["node_id"],
        "master_node": health["master_node"],
        "term": health["term"],
        "version": health["version"],
        "voting": info["node_id"] in voters,
        "health": health["status"],
        "problems": problems or None,
        "formation_problem": health.get("formation_problem"),
        "error": None,
    }


def all_rows(connection: Connection) -> list[dict[str, Any]]:
    rows = [node_row(connection, address) for address in connection.endpoints]
    versions = [row["version"] for row in rows if "version" in row]
    if not versions:
        raise Unreachable(f"no endpoint answered: {rows[0]['error']}")
    for row in rows:
        if "version" in row:
            row["applied_lag"] = max(versions) - row["version"]
    return rows


@endpoint.command()
@connection_options
def status(connection: Connection) -> None:
    """Master, term, version, voting membership, applied lag and health of each endpoint's node. Exits 3 if
    no endpoint answered."""
    rows = all_rows(connection)
    emit(rows, connection.output, STATUS_COLUMNS)


@endpoint.command()
@connection_options
def health(connection: Connection) -> None:
    """The health of each endpoint's node (green, yellow, red, unreachable). Exits 1 unless every one is
    green, 3 if none answered."""
    rows = all_rows(connection)
    emit(rows, connection.output, HEALTH_COLUMNS)
    unhealthy = [row["endpoint"] for row in rows if row["health"] != "green"]
    if unhealthy:
        raise Failed(f"not green: {', '.join(unhealthy)}")
