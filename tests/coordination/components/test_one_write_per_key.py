"""One write per key per batch (batch_writes.py): a task that would change a key that an earlier task of the batch
changed waits for the next publication, so that every acknowledged write of a key gets its own version."""

from __future__ import annotations

import pytest

from coordinated.coordination.batch import BatchResult, execute_batch
from coordinated.coordination.batch_draft import BatchContext
from coordinated.coordination.batch_writes import DEFERRED, WriteClaims
from coordinated.coordination.client import ClusterError, Committed, SessionInfo, TxnResult
from coordinated.coordination.requests.keys import KvDelete, KvDeletePrefix, KvPut
from coordinated.coordination.requests.sessions import SessionCreate, SessionEnd
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp
from coordinated.coordination.state import ClusterState, DiscoveryNode, KeyVersion, Session
from coordinated.coordination.tasks import ClientTask, ExpireSessions, NodeLeft, TaskPayload

from .harness import leader

MASTER = DiscoveryNode("m-id", "m", "m:9300")
WORKER = DiscoveryNode("w-id", "w", "w:9300", roles=())


def base(**fields: object) -> ClusterState:
    defaults: dict[str, object] = {
        "cluster_name": "t",
        "cluster_uuid": "u",
        "version": 10,
        "state_uuid": "s10",
        "master_node": "m-id",
        "nodes": {"m-id": MASTER, "w-id": WORKER},
        "kv": {"a": 0, "b": 0, "dir/x": 0},
        "kv_versions": {"a": KeyVersion(3, 3), "b": KeyVersion(4, 4), "dir/x": KeyVersion(5, 5)},
    }
    return ClusterState(**{**defaults, **fields})  # type: ignore[arg-type]


def context(expired: frozenset[str] = frozenset()) -> BatchContext:
    uuids = iter(f"uuid-{n}" for n in range(1000))
    return BatchContext(MASTER, 2, {"m-id"}, 10, True, lambda: next(uuids), session_expired=lambda s: s in expired)


def run(state: ClusterState, *requests: object, ctx: BatchContext | None = None) -> tuple[ClusterState, list[object]]:
    payloads: list[TaskPayload] = [r if isinstance(r, NodeLeft | ExpireSessions) else ClientTask(r) for r in requests]  # type: ignore[arg-type]
    new_state, results = execute_batch(state, payloads, ctx or context())
    assert new_state is not None
    return new_state, list(results)


def test_a_second_write_of_a_key_waits_for_the_next_batch_and_other_keys_still_share_it() -> None:
    state, results = run(base(), KvPut("a", 1), KvPut("b", 1), KvPut("a", 2), KvDelete("a"), KvPut("c", 1))
    assert results == [None, None, DEFERRED, DEFERRED, None]
    assert state.kv["a"] == 1 and state.kv["b"] == 1 and state.kv["c"] == 1
    assert {state.key_version(key).version for key in "abc"} == {11}  # type: ignore[union-attr]
    # The deferred ones, in their order, each in a batch of its own for that key.
    second, results = run(state, KvPut("a", 2), KvDelete("a"))
    assert results == [None, DEFERRED] and second.kv["a"] == 2 and second.key_version("a") == KeyVersion(12, 3)
    third, results = run(second, KvDelete("a"))
    assert results == [None] and "a" not in third.kv


def test_n_writes_of_one_key_drain_in_n_batches_with_n_distinct_versions() -> None:
    state, pending = base(), [KvPut("a", n) for n in range(8)]
    written: list[tuple[int, object]] = []
    while pending:
        state, results = run(state, *pending)
        assert results[0] is None and all(result is DEFERRED for result in results[1:])
        written.append((state.key_version("a").version, state.kv["a"]))  # type: ignore[union-attr]
        pending = pending[1:]
    assert written == [(11 + n, n) for n in range(8)]


def test_a_refused_compare_and_set_or_a_no_op_writes_nothing_and_is_never_deferred() -> None:
    _, results = run(
        base(), KvPut("a", 1), KvPut("a", 2, if_version=3), KvDeletePrefix("nothing/"), Txn((TxnCompare("a", 3),))
    )
    assert results[0] is None and results[2] == Committed(2, 11, deleted=0)
    refused = results[1]
    assert isinstance(refused, ClusterError) and refused.status == 409 and "current version [11]" in refused.reason
    assert isinstance(results[3], TxnResult) and not results[3].succeeded


def test_a_deferred_task_keeps_its_place_ahead_of_later_writes_of_its_keys() -> None:
    both = Txn(success=(TxnOp("put", "a", 2), TxnOp("put", "b", 2)))
    state, results = run(base(), KvPut("a", 1), both, KvPut("b", 3))
    assert results == [None, DEFERRED, DEFERRED]  # b waits behind the transaction that writes a and b
    assert state.kv["b"] == 0
    state, results = run(state, both, KvPut("b", 3))
    assert results[0] == TxnResult(True, 2, 12, results[0].results) and results[1] is DEFERRED  # type: ignore[union-attr]
    state, results = run(state, KvPut("b", 3))
    assert dict(state.kv) == {"a": 2, "b": 3, "dir/x": 0}


def test_a_transactions_ops_are_one_write_and_its_failure_branch_may_write_too() -> None:
    txn = Txn((TxnCompare("a", 99),), (TxnOp("put", "a", 5),), (TxnOp("delete_prefix", prefix="dir/"),))
    state, results = run(base(), txn, KvPut("dir/x", 1), KvPut("dir/new", 1))
    assert isinstance(results[0], TxnResult) and not results[0].succeeded
    assert results[1:] == [DEFERRED, None]  # dir/x was deleted by the batch; dir/new was never there
    assert "dir/x" not in state.kv and state.kv["dir/new"] == 1


def test_a_prefix_delete_waits_for_a_write_under_its_prefix_and_vice_versa() -> None:
    state, results = run(base(), KvPut("dir/y", 1), KvDeletePrefix("dir/"), KvPut("dir/x", 2))
    assert results == [None, DEFERRED, DEFERRED]
    state, results = run(state, KvDeletePrefix("dir/"), KvPut("dir/x", 2))
    assert results == [Committed(2, 12, deleted=2), DEFERRED]
    state, results = run(base(), KvDeletePrefix("dir/"), KvPut("dir/x", 2))
    assert results == [Committed(2, 11, deleted=1), DEFERRED]


def session_state(node: str | None = None) -> ClusterState:
    session = Session(0 if node else 5_000, node, 9)
    return base(
        sessions={"s1": session},
        kv={"a": 0, "lock": "me"},
        kv_versions={"a": KeyVersion(3, 3), "lock": KeyVersion(9, 9)},
    ).replace(kv_sessions={"lock": "s1"})


def test_a_sessions_end_waits_for_a_write_of_its_keys_and_is_taken_back_whole() -> None:
    state, results = run(session_state(), KvPut("lock", "again", session="s1"), SessionEnd("s1"))
    assert results == [None, DEFERRED]
    assert "s1" in state.sessions and state.kv["lock"] == "again"  # the session is as it was: not ended
    state, results = run(state, SessionEnd("s1"))
    assert results == [None] and "s1" not in state.sessions and "lock" not in state.kv
    # Ended first, its key's later write in the batch waits: the deletion was a write of it.
    state, results = run(session_state(), SessionEnd("s1"), KvPut("lock", "mine"))
    assert results == [None, DEFERRED] and "lock" not in state.kv


def test_an_expiry_waits_like_an_end() -> None:
    expired = context(frozenset({"s1"}))
    state, results = run(session_state(), KvPut("lock", "again", session="s1"), ExpireSessions(("s1",)), ctx=expired)
    assert results == [None, DEFERRED] and "s1" in state.sessions


def test_a_node_session_ends_before_the_batch_writes_so_a_write_bound_to_it_is_refused() -> None:
    """Before, the write was acknowledged with the batch's version and its key deleted in that same state."""
    state, results = run(session_state(node="w-id"), NodeLeft("w-id"), KvPut("lock", "late", session="s1"))
    refused = results[1]
    assert isinstance(refused, ClusterError) and refused.status == 404
    assert "s1" not in state.sessions and "lock" not in state.kv


def test_sessions_created_in_a_batch_never_conflict() -> None:
    state, results = run(base(), SessionCreate(ttl_ms=5_000), SessionCreate(ttl_ms=5_000), KvPut("a", 1))
    assert isinstance(results[0], SessionInfo) and isinstance(results[1], SessionInfo) and results[2] is None
    assert len(state.sessions) == 2


@pytest.mark.parametrize("old_rule", [False, True])
def test_every_acknowledged_write_is_in_the_state_of_its_version(
    old_rule: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule itself, checked by turning it off: two writes of a key in one batch then both get its version."""
    if old_rule:
        monkeypatch.setattr(WriteClaims, "must_wait", lambda self, writes: False)
    state, results = run(base(), KvPut("a", "first"), KvPut("a", "second"))
    acknowledged: list[BatchResult] = [result for result in results if result is not DEFERRED]
    assert (len(acknowledged) == 2) is old_rule
    assert state.kv["a"] == ("second" if old_rule else "first")


def test_the_master_answers_deferred_writes_after_the_next_publication_with_their_own_versions() -> None:
    node = leader()
    node.hold_own_publications = True
    first = node.submit(KvPut("k", "first"))  # starts a publication at once
    queued = [node.submit(KvPut("k", f"queued-{n}")) for n in range(4)] + [node.submit(KvPut("other", 1))]
    assert not node.results
    for _ in range(6):
        node.release()
        node.advance(1)
        node.hold_own_publications = True
    versions = [node.results[request_id] for request_id in [first, *queued]]
    assert all(isinstance(result, Committed) for result in versions), versions
    numbers = [result.version for result in versions]  # type: ignore[union-attr]
    # One publication for the first; the next batch writes k once and `other` with it; then one each.
    assert numbers[1:4] == sorted(numbers[1:4]) and len(set(numbers[:5])) == 5
    assert numbers[5] == numbers[1]
    state = node.coordinator.last_accepted_state
    assert state.kv["k"] == "queued-3" and state.key_version("k").version == numbers[4]  # type: ignore[union-attr]
