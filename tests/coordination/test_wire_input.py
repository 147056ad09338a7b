"""Input from the wire and from clients: bounded numbers, one validation shared by the API and the master."""

from __future__ import annotations

import msgspec
import pytest

from coordinated.coordination.client import ClusterError, Committed
from coordinated.coordination.counters import LONG_MAX
from coordinated.coordination.messages import (
    Envelope,
    JoinRequest,
    PublishRequest,
    StartJoinRequest,
    decode_envelope,
    encode_envelope,
)
from coordinated.coordination.registry import coordination_registry
from coordinated.coordination.requests.cluster import AddVotingConfigExclusions, UpdateSettings, exclusions_problem
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.requests.transactions import Txn, TxnOp
from coordinated.coordination.state import ClusterState, DiscoveryNode
from coordinated.coordination.validation import (
    MAX_VALUE_DEPTH,
    MAX_VOTING_CONFIG_EXCLUSIONS,
    hook_name_problem,
    metadata_key_problem,
    settings_problem,
)
from coordinated.simulation.cluster import SIM_SETTINGS, SimulatedCluster

SECOND = 1000
NODE = DiscoveryNode("id1", "node1", "127.0.0.1:9300")


def start_join_body(term: str) -> bytes:
    candidate = msgspec.json.encode(NODE).decode()
    return f'{{"sender":"x","message":{{"type":"start_join","candidate":{candidate},"term":{term}}}}}'.encode()


@pytest.mark.parametrize("term", [str(LONG_MAX + 1), "9" * 4300, "-1"])
def test_a_term_outside_a_64_bit_long_is_refused_when_decoded(term: str) -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.message\.term"):
        decode_envelope(start_join_body(term))


def test_the_largest_long_term_still_decodes() -> None:
    envelope = decode_envelope(start_join_body(str(LONG_MAX)))
    assert isinstance(envelope.message, StartJoinRequest) and envelope.message.term == LONG_MAX


def test_a_version_outside_a_long_inside_a_published_state_is_refused() -> None:
    state = ClusterState("c", version=LONG_MAX)
    body = encode_envelope(Envelope("x", PublishRequest(NODE, 1, LONG_MAX, state=state)))
    assert decode_envelope(body).message == PublishRequest(NODE, 1, LONG_MAX, state=state)
    too_big = body.replace(str(LONG_MAX).encode(), str(LONG_MAX + 1).encode())
    with pytest.raises(msgspec.ValidationError, match="version"):
        decode_envelope(too_big)


def test_invalid_utf8_is_a_decode_error() -> None:
    body = b'{"sender":"x\xff","message":{"type":"leader_check","source_id":"a","request_id":1}}'
    with pytest.raises(msgspec.DecodeError, match="UTF-8"):
        decode_envelope(body)


@pytest.mark.parametrize("key", ["a\n", "\n", "", "a\x00b", "x" * 257])
def test_bad_keys(key: str) -> None:
    assert metadata_key_problem(key) is not None


@pytest.mark.parametrize("name", ["hook\n", "-x", "", "a/b"])
def test_bad_hook_names(name: str) -> None:
    assert hook_name_problem(name) is not None


def test_good_names() -> None:
    assert metadata_key_problem("app/config.yaml") is None and hook_name_problem("reload-app.1") is None


@pytest.mark.parametrize(
    ("updates", "reason"),
    [
        ({"no.such.setting": "1"}, "unknown setting [no.such.setting]"),
        ({"cluster.no_master_block": "soon"}, "invalid value for setting [cluster.no_master_block]"),
        ({"cluster.metadata.max_state_size": "99999999999999999999d"}, "[cluster.metadata.max_state_size]"),
        ({"cluster.name": "other"}, "not dynamically updateable"),
        ({"cluster.publish.timeout": "1ms"}, "[cluster.publish.timeout] is not dynamically updateable"),
        ({}, "no settings to update"),
    ],
)
def test_bad_settings(updates: dict[str, str | None], reason: str) -> None:
    problem = settings_problem(updates, coordination_registry())
    assert problem is not None and reason in problem


def test_excluding_every_master_eligible_node_is_refused() -> None:
    nodes = {f"id{i}": DiscoveryNode(f"id{i}", f"node{i}", f"127.0.0.1:{i}") for i in range(3)}
    voter = DiscoveryNode("id9", "data9", "127.0.0.1:9", roles=())
    nodes[voter.id] = voter
    all_names = AddVotingConfigExclusions(node_names=("node0", "node1", "node2"))
    problem = exclusions_problem(all_names, nodes, (), 10)
    assert problem is not None and "every master-eligible node" in problem
    assert exclusions_problem(AddVotingConfigExclusions(node_names=("node0", "node1")), nodes, (), 10) is None
    assert exclusions_problem(AddVotingConfigExclusions(node_ids=("id0",)), nodes, (), 10) is None
    assert exclusions_problem(AddVotingConfigExclusions(), nodes, (), 10) is not None


# -- the master re-checks what a follower forwards to it (deterministic simulator) --------------------------


def formed() -> SimulatedCluster:
    cluster = SimulatedCluster(1, 3)
    assert cluster.run_until(lambda: cluster.leader() is not None, 30 * SECOND)
    cluster.run_for(5 * SECOND)
    return cluster


def nested(depth: int) -> object:
    value: object = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def follower_index(cluster: SimulatedCluster) -> int:
    leader = cluster.leader()
    return next(node.index for node in cluster.nodes if node is not leader)


def submit(cluster: SimulatedCluster, index: int, request: object) -> object:
    results: list[object] = []
    cluster.submit(index, request, on_done=results.append)  # type: ignore[arg-type]
    assert cluster.run_until(lambda: bool(results), 15 * SECOND)
    return results[0]


@pytest.mark.parametrize(
    ("request_", "reason"),
    [
        (KvPut("bad\x07key\n", 1), "key name"),
        (UpdateSettings({"no.such.setting": "1"}), "unknown setting"),
        (UpdateSettings({"cluster.publish.timeout": "-5s"}), "cluster.publish.timeout"),
        (AddVotingConfigExclusions(node_names=("node0", "node1", "node2")), "every master-eligible node"),
        (KvPut("deep", nested(MAX_VALUE_DEPTH + 1)), "nests deeper than [100] levels"),
        (Txn(success=(TxnOp("put", "deep", nested(MAX_VALUE_DEPTH + 1)),)), "nests deeper"),
    ],
)
def test_the_master_refuses_a_bad_forwarded_request(request_: object, reason: str) -> None:
    cluster = formed()
    leader = cluster.leader()
    assert leader is not None
    before = leader.running().applied_state
    result = submit(cluster, follower_index(cluster), request_)
    assert isinstance(result, ClusterError) and result.status == 400 and reason in result.reason, result
    assert not result.maybe_applied
    after = leader.running().applied_state
    assert (after.kv, after.persistent_settings, after.coordination) == (
        before.kv,
        before.persistent_settings,
        before.coordination,
    )


def test_a_good_forwarded_request_still_commits() -> None:
    cluster = formed()
    result = submit(cluster, follower_index(cluster), KvPut("good", 1))
    assert isinstance(result, Committed)
    result = submit(cluster, follower_index(cluster), KvPut("deep-enough", nested(MAX_VALUE_DEPTH)))
    assert isinstance(result, Committed)


def test_exclusions_that_would_leave_no_voter_are_refused_in_the_same_batch() -> None:
    # Two requests that are each fine but together exclude every node: the second one is refused.
    cluster = SimulatedCluster(1, 3, settings=SIM_SETTINGS.with_values({MAX_VOTING_CONFIG_EXCLUSIONS: 5}))
    assert cluster.run_until(lambda: cluster.leader() is not None, 30 * SECOND)
    cluster.run_for(5 * SECOND)
    leader = cluster.leader()
    assert leader is not None
    results: list[object] = []
    followers = tuple(node.name for node in cluster.nodes if node is not leader)
    cluster.submit(leader.index, AddVotingConfigExclusions(node_names=followers), on_done=results.append)
    cluster.submit(leader.index, AddVotingConfigExclusions(node_names=(leader.name,)), on_done=results.append)
    assert cluster.run_until(lambda: len(results) == 2, 40 * SECOND)
    refused = [r for r in results if isinstance(r, ClusterError) and r.status == 400]
    assert isinstance(results[0], Committed) and len(refused) == 1, results
    assert "every master-eligible node" in refused[0].reason


@pytest.mark.parametrize("status", [200, 99999])
def test_a_forwarded_error_status_must_be_an_http_error(status: int) -> None:
    body = (
        '{"sender":"x","message":{"type":"forwarded_response","request_id":1,"result":'
        f'{{"result":"error","type":"t","reason":"r","status":{status}}}}}}}'
    ).encode()
    with pytest.raises(msgspec.ValidationError, match="status"):
        decode_envelope(body)


def test_a_join_claiming_the_masters_own_address_is_refused_and_the_master_stays() -> None:
    """Found by the forged-numbers property test: a join from another id at the master's own address made the
    master drop itself from its state, publish to itself as another node, and fail an assertion."""
    cluster = formed()
    leader = cluster.leader()
    assert leader is not None
    impostor = DiscoveryNode("impostor", leader.name, leader.address)
    join = JoinRequest(impostor, 1, 0, None, leader.running().applied_state.cluster_uuid, True)
    assert (
        cluster.deliver_from_wire(leader, "elsewhere:9300", encode_envelope(Envelope("elsewhere:9300", join))) is None
    )
    cluster.run_for(35 * SECOND)
    assert cluster.leader() is leader
    assert "impostor" not in leader.running().applied_state.nodes
    assert isinstance(submit(cluster, leader.index, KvPut("after", 1)), Committed)
