"""Sessions and ephemeral keys in the core: the master alone expires sessions, by its own clock; ending a
session deletes its ephemeral keys in the same committed state; the master checkpoints each session's
remaining TTL, and a new master continues every session from its checkpoint."""

from __future__ import annotations

import random

import pytest

from coordinated.coordination.batch import execute_batch
from coordinated.coordination.batch_draft import BatchContext
from coordinated.coordination.client import ClientRequest, ClusterError, Committed, ReadValue, SessionInfo, TxnResult
from coordinated.coordination.coordinator import Coordinator
from coordinated.coordination.messages import (
    Envelope,
    ForwardedRequest,
    ForwardedResponse,
    decode_envelope,
    encode_envelope,
)
from coordinated.coordination.registry import default_settings
from coordinated.coordination.requests import request_problem
from coordinated.coordination.requests.keys import KvDelete, KvGet, KvPut
from coordinated.coordination.requests.sessions import (
    MAX_SESSION_TTL_MS,
    MAX_SESSIONS,
    MIN_SESSION_TTL_MS,
    SessionCreate,
    SessionEnd,
    SessionKeepAlive,
)
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp
from coordinated.coordination.safety import InMemoryPersistedState
from coordinated.coordination.sessions import checkpoint_interval_ms, failover_allowance_ms
from coordinated.coordination.state import (
    ClusterState,
    DiscoveryNode,
    Session,
    apply_diff,
    compute_diff,
    decode_diff,
    decode_state,
    encode_diff,
    encode_state,
)
from coordinated.coordination.tasks import ClientTask, NodeJoin, NodeLeft

from .harness import OneNode, leader, result_of

TTL = 10_000
FOLLOWER = "follower:9300"


def create(node: OneNode, ttl_ms: int = TTL) -> str:
    result = result_of(node, SessionCreate(ttl_ms=ttl_ms))
    assert isinstance(result, SessionInfo), result
    assert result.ttl_ms == ttl_ms and result.version == node.coordinator.last_accepted_state.version
    return result.id


def read(node: OneNode, key: str) -> ReadValue:
    result = result_of(node, KvGet(key))
    assert isinstance(result, ReadValue), result
    return result


def not_found(result: object, session: str) -> None:
    assert isinstance(result, ClusterError), result
    assert (result.status, result.type) == (404, "resource_not_found_exception")
    assert f"session [{session}]" in result.reason


def session_history(node: OneNode) -> list[tuple[object, object]]:
    return [(event["type"], event["session"]) for event in node.history if "session" in event]


def test_an_ephemeral_key_names_its_session_and_ends_with_it_in_the_same_state() -> None:
    node = leader()
    session = create(node)
    assert isinstance(result_of(node, KvPut("locks/a", "me", session=session)), Committed)
    assert isinstance(result_of(node, KvPut("plain", 1)), Committed)
    assert read(node, "locks/a").session == session and read(node, "plain").session is None
    before = node.coordinator.last_accepted_state
    assert isinstance(result_of(node, SessionEnd(session)), Committed)
    after = node.coordinator.last_accepted_state
    assert after.version == before.version + 1  # one state: the session and its key end together
    assert session not in after.sessions and "locks/a" not in after.kv and "locks/a" not in after.kv_sessions
    assert after.kv["plain"] == 1
    assert not read(node, "locks/a").found
    assert session_history(node) == [("session_created", session), ("session_ended", session)]


def test_a_session_without_keepalives_expires_after_its_ttl_on_the_master_and_takes_its_keys() -> None:
    node = leader()
    session = create(node)
    created_at = node.now
    result_of(node, KvPut("eph", 1, session=session))
    node.advance(TTL - 100)
    assert session in node.coordinator.last_accepted_state.sessions
    node.advance(200)
    state = node.coordinator.last_accepted_state
    assert session not in state.sessions and "eph" not in state.kv
    assert node.now - created_at >= TTL
    assert ("session_expired", session) in session_history(node)
    not_found(result_of(node, SessionKeepAlive(session)), session)


def test_timely_keepalives_keep_a_session_and_its_keys_for_many_ttls() -> None:
    node = leader()
    session = create(node)
    result_of(node, KvPut("eph", 1, session=session))
    for _ in range(20):
        node.advance(TTL // 2)
        renewed = result_of(node, SessionKeepAlive(session))
        assert isinstance(renewed, SessionInfo) and renewed.id == session, renewed
    assert read(node, "eph").session == session
    assert [kind for kind, _ in session_history(node)] == ["session_created"]


def test_a_put_without_a_session_makes_an_ephemeral_key_persistent() -> None:
    node = leader()
    session = create(node)
    result_of(node, KvPut("k", 1, session=session))
    result_of(node, KvPut("k", 2))
    result_of(node, SessionEnd(session))
    assert read(node, "k").value == 2


def test_writes_naming_an_unknown_or_ended_session_are_refused_and_write_nothing() -> None:
    node = leader()
    session = create(node)
    result_of(node, SessionEnd(session))
    version = node.coordinator.last_accepted_state.version
    not_found(result_of(node, KvPut("k", 1, session=session)), session)
    not_found(result_of(node, KvPut("k", 1, session="nosuchsession")), "nosuchsession")
    not_found(result_of(node, SessionEnd(session)), session)
    not_found(result_of(node, SessionKeepAlive(session)), session)
    txn = Txn(success=(TxnOp("put", "a", 1), TxnOp("put", "b", 2, session=session)))
    not_found(result_of(node, txn), session)
    assert node.coordinator.last_accepted_state.version == version
    assert not read(node, "a").found


def test_a_transaction_writes_ephemeral_keys() -> None:
    node = leader()
    session = create(node)
    txn = Txn(
        compare=(TxnCompare("lock", 0),),
        success=(TxnOp("put", "lock", "holder", session=session), TxnOp("put", "log", "took")),
    )
    result = result_of(node, txn)
    assert isinstance(result, TxnResult) and result.succeeded, result
    result_of(node, SessionEnd(session))
    assert not read(node, "lock").found and read(node, "log").found


def test_a_keepalive_forwarded_by_a_follower_renews_the_session_on_the_master() -> None:
    node = leader()
    session = create(node)
    node.advance(TTL - 1_000)
    wire = encode_envelope(Envelope(FOLLOWER, ForwardedRequest("f", 7, SessionKeepAlive(session))))
    message = decode_envelope(wire).message
    assert isinstance(message, ForwardedRequest)
    node.receive(FOLLOWER, message)
    node.advance(1)
    (_, response), *_ = node.take_sent(ForwardedResponse)
    assert isinstance(response, ForwardedResponse) and isinstance(response.result, SessionInfo), response
    node.advance(TTL - 100)  # past the first deadline, within the renewed one
    assert session in node.coordinator.last_accepted_state.sessions


def test_a_keepalive_that_arrives_while_the_expiry_waits_for_its_batch_saves_the_session() -> None:
    node = leader()
    session = create(node)
    node.hold_own_publications = True
    node.submit(KvPut("other", "x"))  # a publication in flight: the expiry task must wait behind it
    node.advance(TTL + 10)
    assert session in node.coordinator.sessions.expiring
    keepalive = node.submit(SessionKeepAlive(session))
    node.release()
    node.advance(10)
    assert isinstance(node.results[keepalive], SessionInfo), node.results[keepalive]
    assert session in node.coordinator.last_accepted_state.sessions
    node.advance(TTL + 10)  # and it still expires once the keepalives stop
    assert session not in node.coordinator.last_accepted_state.sessions


def restarted(node: OneNode) -> OneNode:
    """The same node restarted from its persisted state: a new master, with a clock of its own."""
    old = node.coordinator
    coordinator = Coordinator(
        local_node=node.node,
        settings=old.base_settings,
        persisted=InMemoryPersistedState(old.current_term, old.last_accepted_state),
        rng=random.Random(2),
        now=0,
    )
    fresh = OneNode(node.node, coordinator)
    fresh._run(coordinator.start(0))
    return fresh


def test_a_new_master_continues_each_session_from_its_checkpoint_and_sessions_survive_a_restart() -> None:
    node = leader()
    session = create(node)
    result_of(node, KvPut("eph", 1, session=session))
    node.advance(TTL - 500)  # nearly expired on the old master, whose checkpoints record about that much left
    recorded = node.coordinator.last_accepted_state.sessions[session].remaining_ms
    assert recorded is not None and 500 <= recorded <= 500 + checkpoint_interval_ms(TTL), recorded
    again = restarted(node)
    while again.coordinator.leader != again.node:
        again.advance(100)
    elected = again.now
    again.advance(recorded - 200)  # the session survived the restart, and continues from its record
    assert session in again.coordinator.last_accepted_state.sessions
    assert read(again, "eph").session == session
    again.advance(400)  # not a fresh TTL: it ends once the record has run out on the new master
    assert session not in again.coordinator.last_accepted_state.sessions, again.now - elected
    assert "eph" not in again.coordinator.last_accepted_state.kv


def test_checkpoints_keep_the_record_within_half_the_failover_allowance() -> None:
    node = leader()
    session = create(node)
    interval = checkpoint_interval_ms(TTL)
    assert failover_allowance_ms(TTL) == TTL // 5 and failover_allowance_ms(2_000) == 1_000
    created = node.now
    assert node.coordinator.last_accepted_state.sessions[session].remaining_ms is None  # the whole TTL
    for step in range(1, 5):
        node.advance(interval)
        recorded = node.coordinator.last_accepted_state.sessions[session].remaining_ms
        elapsed = node.now - created
        assert recorded is not None and TTL - elapsed <= recorded <= TTL - elapsed + interval, (step, recorded)


def test_a_keepalive_needs_no_publication_until_a_checkpoint_and_then_resets_the_record_before_its_answer() -> None:
    node = leader()
    session = create(node)
    interval = checkpoint_interval_ms(TTL)
    node.advance(interval // 2)
    version = node.coordinator.last_accepted_state.version
    renewed = result_of(node, SessionKeepAlive(session))
    assert isinstance(renewed, SessionInfo) and TTL - 10 <= renewed.remaining_ms <= TTL, renewed
    assert node.coordinator.last_accepted_state.version == version  # renewed on the master alone
    node.advance(interval + 10)  # a checkpoint of the remaining TTL
    assert node.coordinator.last_accepted_state.sessions[session].remaining_ms is not None
    version = node.coordinator.last_accepted_state.version
    node.hold_own_publications = True  # the reset is published, and the keepalive waits for its commit
    keepalive = node.submit(SessionKeepAlive(session))
    node.advance(1)
    assert keepalive not in node.results
    node.release()
    node.advance(1)
    renewed = node.results[keepalive]
    assert isinstance(renewed, SessionInfo) and renewed.remaining_ms >= TTL - 10, renewed
    state = node.coordinator.last_accepted_state
    assert state.version == version + 1 and state.sessions[session].remaining_ms is None


def test_a_node_session_ends_with_its_node_and_needs_no_keepalive() -> None:
    master = DiscoveryNode("m-id", "m", "m:9300")
    worker = DiscoveryNode("w-id", "w", "w:9300", roles=())
    base = ClusterState(cluster_name="t", cluster_uuid="u", version=3, state_uuid="s3", nodes={"m-id": master})
    uuids = iter(f"uuid-{n}" for n in range(100))
    context = BatchContext(master, 1, {"m-id"}, 10, True, lambda: next(uuids))
    joined, _ = execute_batch(base, [NodeJoin(worker)], context)
    assert joined is not None
    with_session, results = execute_batch(joined, [ClientTask(SessionCreate(node_name="w"))], context)
    assert with_session is not None and isinstance(results[0], SessionInfo)
    session = results[0].id
    assert with_session.sessions[session] == Session(0, "w-id", with_session.version)
    with_key, _ = execute_batch(with_session, [ClientTask(KvPut("leader", "w", session=session))], context)
    assert with_key is not None and dict(with_key.kv_sessions) == {"leader": session}
    left, _ = execute_batch(with_key, [NodeLeft("w-id")], context)
    assert left is not None
    assert session not in left.sessions and "leader" not in left.kv
    _, refused = execute_batch(joined, [ClientTask(SessionCreate(node_name="absent"))], context)
    assert isinstance(refused[0], ClusterError) and "[absent]" in refused[0].reason


def test_sessions_travel_in_diffs_and_in_the_persisted_encoding() -> None:
    before = ClusterState(cluster_name="t", version=4, state_uuid="s4", kv={"a": 1})
    after = before.replace(
        version=5,
        state_uuid="s5",
        parent_uuid="s4",
        kv={"a": 1, "e": 2},
        sessions={"s1": Session(TTL, None, 5), "s2": Session(0, "n-id", 5)},
        kv_sessions={"e": "s1"},
    )
    diff = decode_diff(encode_diff(compute_diff(before, after)))
    assert apply_diff(before, diff) == after
    ended = after.replace(version=6, state_uuid="s6", parent_uuid="s5", kv={"a": 1}, sessions={}, kv_sessions={})
    assert apply_diff(after, decode_diff(encode_diff(compute_diff(after, ended)))) == ended
    assert decode_state(encode_state(after)) == after
    assert dict(decode_state(encode_state(before)).sessions) == {}  # a state persisted before sessions loads


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (SessionCreate(), "exactly one of [ttl]"),
        (SessionCreate(ttl_ms=TTL, node_name="n"), "exactly one of [ttl]"),
        (SessionCreate(ttl_ms=MIN_SESSION_TTL_MS - 1), "invalid [ttl]"),
        (SessionCreate(ttl_ms=MAX_SESSION_TTL_MS + 1), "invalid [ttl]"),
        (SessionCreate(node_name="-bad name"), "invalid [node]"),
        (SessionKeepAlive("bad id!"), "invalid session id"),
        (SessionEnd(""), "invalid session id"),
        (KvPut("k", 1, session="a/b"), "invalid session id"),
        (Txn(success=(TxnOp("delete", "k", session="s"),)), "takes no [session]"),
        (Txn(success=(TxnOp("put", "k", 1, session="x y"),)), "invalid session id"),
    ],
)
def test_the_master_refuses_malformed_session_requests_naming_the_field(request_: ClientRequest, problem: str) -> None:
    reason = request_problem(request_, ClusterState(cluster_name="t"), default_settings())
    assert reason is not None and problem in reason, reason
    node = leader()
    result = result_of(node, request_)
    assert isinstance(result, ClusterError) and result.status == 400 and problem in result.reason


def test_a_deleted_ephemeral_key_is_no_longer_bound_to_its_session() -> None:
    node = leader()
    session = create(node)
    result_of(node, KvPut("k", 1, session=session))
    result_of(node, KvDelete("k"))
    assert "k" not in node.coordinator.last_accepted_state.kv_sessions
    result_of(node, KvPut("k", 2))
    result_of(node, SessionEnd(session))
    assert read(node, "k").value == 2


def test_the_number_of_sessions_is_bounded() -> None:
    master = DiscoveryNode("m-id", "m", "m:9300")
    full = {f"s{n}": Session(TTL, None, 1) for n in range(MAX_SESSIONS)}
    base = ClusterState(cluster_name="t", cluster_uuid="u", version=3, state_uuid="s3", nodes={"m-id": master})
    context = BatchContext(master, 1, {"m-id"}, 10, True, lambda: "new")
    after, results = execute_batch(base.replace(sessions=full), [ClientTask(SessionCreate(ttl_ms=TTL))], context)
    assert after is None or dict(after.sessions) == full
    assert isinstance(results[0], ClusterError) and results[0].status == 400
    assert f"[{MAX_SESSIONS}]" in results[0].reason
