"""Client requests on one node: routing, the no-master answer, and forwarded requests on the master."""

from __future__ import annotations

import typing

import msgspec
import pytest

from coordinated.coordination.client import ClusterError, Committed, ReadValue, SessionInfo, answer_types
from coordinated.coordination.messages import ForwardedRequest, ForwardedResponse
from coordinated.coordination.requests import ACTIONS, AnyRequest, action_of
from coordinated.coordination.requests.base import Action, Runs
from coordinated.coordination.requests.keys import KvGet, KvPut
from coordinated.coordination.requests.sessions import SessionKeepAlive

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


def test_the_wire_decodes_every_registered_request_type_by_its_tag() -> None:
    """`ForwardedRequest.request` is the union of the registry's types: a type registered with an Action crosses
    the wire with no other change, and each has a tag of its own."""
    members = set(typing.get_args(AnyRequest))
    assert members == set(ACTIONS) and len(members) >= 15
    tags = [request_type.__struct_config__.tag for request_type in ACTIONS]
    assert len(tags) == len(set(tags))
    encoded = msgspec.msgpack.encode(ForwardedRequest("follower-id", 9, SessionKeepAlive("s1")))
    decoded = msgspec.msgpack.decode(encoded, type=ForwardedRequest)
    assert decoded.request == SessionKeepAlive("s1")


def test_an_action_says_how_its_request_runs_and_refuses_a_contradiction() -> None:
    with pytest.raises(ValueError, match="a master task has an executor"):
        Action(KvPut, Runs.MASTER)
    with pytest.raises(ValueError, match="a read round has a read answer"):
        Action(KvGet, Runs.READ)
    assert action_of(KvGet("k")).runs is Runs.READ and action_of(KvPut("k", 1)).runs is Runs.MASTER
    assert answer_types(KvGet) == (ReadValue,) and answer_types(SessionKeepAlive) == (SessionInfo, Committed)
