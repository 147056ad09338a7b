"""`coordinated member list|exclude|clear-exclusions`: the cluster's nodes and its voting configuration."""

from __future__ import annotations

from typing import Any

import click

from coordinated.ctl.connection import Connection, connection_options
from coordinated.ctl.output import emit

COLUMNS = ("name", "id", "transport_address", "master", "voting", "excluded")


@click.group()
def member() -> None:
    """The nodes of the cluster, as the master's state has them."""


def members(state: dict[str, Any]) -> list[dict[str, Any]]:
    coordination = state["metadata"]["cluster_coordination"]
    voters = set(coordination["last_committed_config"])
    excluded = {exclusion["node_id"] for exclusion in coordination["voting_config_exclusions"]}
    return [
        {
            "name": info["name"],
            "id": node_id,
            "transport_address": info.get("transport_address"),
            "master": node_id == state["master_node"],
            "voting": node_id in voters,
            "excluded": node_id in excluded,
        }
        for node_id, info in sorted(state["nodes"].items(), key=lambda item: item[1]["name"])
    ]


@member.command(name="list")
@connection_options
def list_members(connection: Connection) -> None:
    """The nodes, which is master, which vote, and which are excluded from voting."""
    with connection.client() as client:
        state = client.cluster_state()
    emit(members(state), connection.output, COLUMNS)


@member.command()
@click.argument("names", nargs=-1, required=True)
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True, help="seconds")
@connection_options
def exclude(connection: Connection, names: tuple[str, ...], wait: float) -> None:
    """Excludes the nodes NAMES from voting (before removing them for good); answers once they have left the
    voting configuration."""
    with connection.client() as client:
        answer = client.add_voting_config_exclusions(list(names), timeout=wait)
    emit(answer["voting_config_exclusions"], connection.output, ("node_name", "node_id"), rows=None)


@member.command(name="clear-exclusions")
@click.option("--no-wait", is_flag=True, help="do not wait for the excluded nodes to leave the cluster")
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True, help="seconds")
@connection_options
def clear_exclusions(connection: Connection, no_wait: bool, wait: float) -> None:
    """Clears the voting exclusions (by default once the excluded nodes have left the cluster)."""
    with connection.client() as client:
        answer = client.clear_voting_config_exclusions(wait_for_removal=not no_wait, timeout=wait)
    emit(answer, connection.output, ("acknowledged",))
