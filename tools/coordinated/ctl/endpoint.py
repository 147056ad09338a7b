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
CLUSTER_HEALTH_COLUMNS = ("name", "id", "endpoint", "master", "voting", "health", "problems", "error")
# With --cluster: a member the master lists that no endpoint reaches (it is in the cluster, not asked).
JOINED = "joined"


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


def cluster_rows(connection: Connection, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per member of the cluster: every node in the master's state and every voter, each with its
    endpoint's row when an endpoint reaches it."""
    with connection.client() as client:
        state = client.cluster_state()
    nodes: dict[str, Any] = state["nodes"]
    voters = set(state["metadata"]["cluster_coordination"]["last_committed_config"])
    by_id = {row["id"]: row for row in rows if row.get("id")}
    members = []
    for node_id in sorted(set(nodes) | voters, key=lambda member: (nodes.get(member, {}).get("name", ""), member)):
        row = by_id.get(node_id)
        if row is None:
            row = {"id": node_id, "name": nodes.get(node_id, {}).get("name"), "endpoint": None}
            row["master"], row["voting"] = state["master_node"] == node_id, node_id in voters
            if node_id in nodes:
                row |= {"health": JOINED, "error": None}
            else:
                row |= {"health": "missing", "error": "a voter that is not in the cluster"}
        members.append(row)
    unknown = [row for row in rows if not row.get("id")]  # endpoints that did not answer
    return members + unknown


@endpoint.command()
@click.option("--cluster", is_flag=True, help="every member of the cluster, not only the endpoints' nodes")
@connection_options
def health(connection: Connection, cluster: bool) -> None:
    """The health of each endpoint's node (green, yellow, red, unreachable). With --cluster, one row per
    member of the cluster as the master knows it: its own health where an endpoint reaches it, `joined`
    where none does (it is in the cluster, not asked), `missing` for a voter that is not in the cluster.
    Exits 1 unless every row is green (or joined), 3 if no endpoint answered."""
    rows = all_rows(connection)
    if cluster:
        rows = cluster_rows(connection, rows)
    emit(rows, connection.output, CLUSTER_HEALTH_COLUMNS if cluster else HEALTH_COLUMNS)
    unhealthy = [row.get("name") or row["endpoint"] for row in rows if row["health"] not in ("green", JOINED)]
    if unhealthy:
        raise Failed(f"not green: {', '.join(map(str, unhealthy))}")
