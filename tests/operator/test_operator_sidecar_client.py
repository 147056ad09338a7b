"""The sidecar API shapes and the view the operator builds from several nodes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from coordinated.operator.observation import summarize_states
from coordinated.operator.sidecar_client import (
    ClusterHealth,
    ClusterState,
    SidecarAccess,
    SidecarClient,
    SidecarConnections,
    parse_cluster_health,
    parse_cluster_state,
    sidecar_url,
)
from coordinated.tools.localcluster import LocalCluster
from coordinated.tools.previous_release import PreviousRelease


def state_body(master: str | None, term: int = 2, version: int = 7, uuid: str = "u1") -> dict[str, Any]:
    return {
        "cluster_name": "demo",
        "cluster_uuid": uuid,
        "version": version,
        "term": term,
        "state_uuid": "s",
        "master_node": master,
        "nodes": {
            "id0": {"name": "demo-0", "transport_address": "10.0.0.1:9300", "roles": ["master"]},
            "id1": {"name": "demo-1", "transport_address": "10.0.0.2:9300", "roles": ["master"]},
            "id2": {"name": "demo-2", "transport_address": "10.0.0.3:9300", "roles": ["master"]},
        },
        "metadata": {
            "cluster_coordination": {
                "term": term,
                "last_committed_config": ["id0", "id1", "id2"],
                "last_accepted_config": ["id0", "id1"],
                "voting_config_exclusions": [{"node_id": "id2", "node_name": "demo-2"}],
            },
            "kv": {},
        },
    }


def test_parse_cluster_state_maps_ids_to_names() -> None:
    state = parse_cluster_state(state_body("id1"))
    assert state.master == "demo-1"
    assert state.committed_voters == ("demo-0", "demo-1", "demo-2")
    assert state.accepted_voters == ("demo-0", "demo-1")
    assert state.exclusion_names == ("demo-2",)
    assert state.node_names == {"demo-0", "demo-1", "demo-2"}
    assert (state.term, state.version, state.cluster_uuid) == (2, 7, "u1")


def test_unbootstrapped_uuid_is_none() -> None:
    assert parse_cluster_state({**state_body(None), "cluster_uuid": "_na_"}).cluster_uuid is None
    assert parse_cluster_state({}).cluster_uuid is None


def test_health() -> None:
    health = parse_cluster_health(
        {"status": "green", "master_node": "id0", "number_of_nodes": 3, "number_of_master_eligible_nodes": 3}
    )
    assert health == ClusterHealth("green", "id0", 3, 3)


def test_summary_prefers_the_masters_own_state() -> None:
    states = {
        "demo-0": parse_cluster_state(state_body("id1", version=6)),  # a lagging follower
        "demo-1": parse_cluster_state(state_body("id1", version=7)),  # the master itself
        "demo-2": parse_cluster_state(state_body(None, uuid="u2")),
    }
    view = summarize_states(states)
    assert view.master == "demo-1" and view.version == 7
    assert view.cluster_uuids == {"u1", "u2"}
    assert view.reachable == {"demo-0", "demo-1", "demo-2"}
    assert view.members == {"demo-0", "demo-1", "demo-2"}


def test_summary_without_master_has_no_members() -> None:
    view = summarize_states({"demo-0": parse_cluster_state(state_body(None))})
    assert view.master is None and view.members == frozenset()
    assert summarize_states({}).reachable == frozenset()


def test_sidecar_url_template() -> None:
    assert sidecar_url("http://{ip}:{port}", pod="p", ip="1.2.3.4", service="s", namespace="n") == "http://1.2.3.4:9200"
    dns = sidecar_url("http://{pod}.{service}.{namespace}.svc:{port}", pod="p", ip=None, service="s", namespace="n")
    assert dns == "http://p.s.n.svc:9200"


@pytest.mark.timeout(120)
def test_the_operator_reads_a_real_nodes_membership_without_its_keys(make_cluster: Callable[..., LocalCluster]) -> None:
    """The light read (filter_path) parses to what the whole state does, and its answer holds no key: the
    operator's memory does not grow with the cluster's data. A node that ignores filter_path (an older
    release) answers the whole state, which parses the same."""
    cluster = make_cluster()  # stopped by the fixture
    (node,) = cluster.bootstrap(1)
    for index in range(200):
        assert node.put(f"/_cluster/metadata/key{index}", "v" * 200)[0] == 200
    status, whole = node.request("GET", "/_cluster/state?local=true")
    assert status == 200

    async def read() -> tuple[ClusterState, int]:
        sizes: list[int] = []

        async def record(response: httpx.Response) -> None:
            await response.aread()
            sizes.append(len(response.content))

        async with SidecarConnections() as http:
            client = SidecarClient(http, node.url)
            http.pool(SidecarAccess()).event_hooks["response"].append(record)
            return await client.cluster_state(local=True), sizes[0]

    state, size = asyncio.run(read())
    assert state == parse_cluster_state(whole)
    assert size * 10 < len(json.dumps(whole)), (size, len(json.dumps(whole)))


@pytest.mark.timeout(300)
def test_the_operator_reads_a_previous_release_nodes_membership(
    make_cluster: Callable[..., LocalCluster], previous_release: PreviousRelease
) -> None:
    """During an upgrade the operator reads sidecars of the previous release, which take filter_path as a known
    parameter but ignore it: they answer their whole state (keys included), and the operator parses from it the
    same membership as from the whole state read without the parameter."""
    cluster = make_cluster()  # stopped by the fixture
    (node,) = cluster.bootstrap(1, python=str(previous_release.python))
    assert node.put("/_cluster/metadata/kept", "v")[0] == 200
    status, whole = node.request("GET", "/_cluster/state?local=true")
    assert status == 200
    status, filtered = node.request("GET", "/_cluster/state?local=true&filter_path=cluster_name")
    assert status == 200 and "kept" in json.dumps(filtered)  # the old release ignores filter_path

    async def read() -> ClusterState:
        async with SidecarConnections() as http:
            return await SidecarClient(http, node.url).cluster_state(local=True)

    state = asyncio.run(read())
    assert state == parse_cluster_state(whole)
    assert state.master_id is not None and [info.name for info in state.nodes.values()] == [node.name]
    assert state.committed_config_ids == tuple(state.nodes)
