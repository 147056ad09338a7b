"""Peers of another cluster with the same name: ignored for safety, but reported."""

from __future__ import annotations

import random

from coordinated.coordination.coordinator import Coordinator
from coordinated.coordination.effects import Log
from coordinated.coordination.foreign_clusters import REPORT_FOR_MS
from coordinated.coordination.messages import PeersResponse
from coordinated.coordination.registry import default_settings
from coordinated.coordination.safety import InMemoryPersistedState
from coordinated.coordination.settings import CLUSTER_NAME
from coordinated.coordination.state import ClusterState, DiscoveryNode

LOCAL = DiscoveryNode("id-b", "node-b", "127.0.0.1:9301")
PEER = DiscoveryNode("id-a", "node-a", "127.0.0.1:9300")


def node_of_cluster(uuid: str) -> Coordinator:
    state = ClusterState("same-name", cluster_uuid=uuid, cluster_uuid_committed=True, nodes={LOCAL.id: LOCAL})
    return Coordinator(
        local_node=LOCAL,
        settings=default_settings().with_values({CLUSTER_NAME: "same-name"}),
        persisted=InMemoryPersistedState(1, state),
        rng=random.Random(1),
        now=0,
    )


def answer(uuid: str) -> PeersResponse:
    return PeersResponse(PEER, None, (), term=7, cluster_uuid=uuid)


def warnings(effects: list[object]) -> list[str]:
    return [e.message for e in effects if isinstance(e, Log) and e.level == "warning" and "another" in e.message]


def test_a_peer_of_another_cluster_is_ignored_warned_about_once_and_reported() -> None:
    coordinator = node_of_cluster("uuid-b")
    coordinator.start(0)
    first = warnings(coordinator.handle_message(PEER.transport_address, answer("uuid-a"), 100))
    assert len(first) == 1 and "uuid-a" in first[0] and "uuid-b" in first[0]
    assert coordinator.peer_finder.peers_seen_terms == {}  # ignored: its terms do not disturb this cluster
    assert warnings(coordinator.handle_message(PEER.transport_address, answer("uuid-a"), 200)) == []
    problem = coordinator.foreign_clusters.problem("uuid-b", 300)
    assert problem is not None and PEER.transport_address in problem and "uuid-a" in problem
    # Reported while it keeps answering; forgotten some time after it stops.
    assert coordinator.foreign_clusters.problem("uuid-b", 200 + REPORT_FOR_MS + 1) is None


def test_the_report_clears_when_the_peer_answers_with_this_clusters_uuid() -> None:
    coordinator = node_of_cluster("uuid-b")
    coordinator.start(0)
    coordinator.handle_message(PEER.transport_address, answer("uuid-a"), 100)
    coordinator.handle_message(PEER.transport_address, answer("uuid-b"), 200)
    assert coordinator.foreign_clusters.problem("uuid-b", 300) is None
