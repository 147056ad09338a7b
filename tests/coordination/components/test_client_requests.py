"""Client requests on one node: routing, the no-master answer, and forwarded requests on the master."""

from __future__ import annotations

from coordinated.coordination.client import ClusterError, Committed, KvGet, KvPut
from coordinated.coordination.messages import ForwardedRequest, ForwardedResponse

from .harness import OneNode, leader

FOLLOWER = "follower:9300"


def test_a_forwarded_request_keeps_its_clients_timeout() -> None:
    """The master gives up on a forwarded request when its client does, not after the default 30 s."""
    node = leader()
    node.hold_own_publications = True
    node.submit(KvPut("a", "1"))  # a publication in flight: later tasks queue behind it
    node.receive(FOLLOWER, ForwardedRequest("follower-id", 7, KvPut("b", "2"), timeout_ms=1_000))
    node.advance(2_000)
    node.release()
    [(destination, response)] = node.take_sent(ForwardedResponse)
    assert destination == FOLLOWER and isinstance(response, ForwardedResponse)
    assert isinstance(response.result, ClusterError), response.result
    assert response.result.type == "process_cluster_event_timeout_exception"
    assert "b" not in node.coordinator.applied_state.kv


def test_a_forwarded_request_within_its_timeout_is_committed() -> None:
    node = leader()
    node.receive(FOLLOWER, ForwardedRequest("follower-id", 8, KvPut("b", "2"), timeout_ms=1_000))
    [(_, response)] = node.take_sent(ForwardedResponse)
    assert isinstance(response, ForwardedResponse) and isinstance(response.result, Committed)
    assert node.coordinator.applied_state.kv["b"] == "2"


def test_without_a_master_reads_and_writes_are_refused() -> None:
    node = OneNode.start(bootstrap=False)
    node.advance(1_000)
    for request in (KvGet("k"), KvPut("k", "v")):
        result = node.results[node.submit(request)]
        assert isinstance(result, ClusterError) and result.type == "cluster_block_exception", result
