"""Per-key versions and conditional writes: decided by the master against the state its batch builds."""

from __future__ import annotations

import msgspec
import pytest

from coordinated.coordination.batch import execute_batch
from coordinated.coordination.batch_draft import BatchContext
from coordinated.coordination.client import ClusterError, Committed, ReadValue, TxnResult
from coordinated.coordination.messages import (
    Envelope,
    ForwardedRequest,
    ForwardedResponse,
    decode_envelope,
    encode_envelope,
)
from coordinated.coordination.requests.keys import KvDelete, KvGet, KvPut
from coordinated.coordination.requests.transactions import Txn, TxnCompare, TxnOp, txn_problem
from coordinated.coordination.state import (
    LEGACY_KEY_VERSION,
    ClusterState,
    DiscoveryNode,
    KeyVersion,
    apply_diff,
    compute_diff,
    decode_diff,
    decode_state,
    encode_diff,
    encode_state,
)
from coordinated.coordination.tasks import ClientTask
from coordinated.coordination.validation import metadata_key_problem

from .harness import OneNode, leader

FOLLOWER = "follower:9300"


def committed(node: OneNode, request: KvPut | KvDelete) -> Committed:
    result = node.results[node.submit(request)]
    assert isinstance(result, Committed), result
    return result


def read(node: OneNode, key: str) -> ReadValue:
    request_id = node.submit(KvGet(key))
    node.advance(1_000)  # the leadership round of a one-node cluster completes at once
    result = node.results[request_id]
    assert isinstance(result, ReadValue), result
    return result


def conflict(result: ClusterError | object) -> ClusterError:
    assert isinstance(result, ClusterError) and result.type == "version_conflict_engine_exception", result
    assert result.status == 409
    return result


def test_a_key_carries_the_version_of_its_last_write_and_of_its_creation() -> None:
    node = leader()
    created = committed(node, KvPut("k", 1))
    updated = committed(node, KvPut("k", 2))
    assert updated.version > created.version
    value = read(node, "k")
    assert (value.value, value.key_version, value.create_version) == (2, updated.version, created.version)
    # Writing the same value again is still a write: the key's version moves to it.
    again = committed(node, KvPut("k", 2))
    assert read(node, "k").key_version == again.version > updated.version


def test_a_recreated_key_has_a_new_create_version() -> None:
    node = leader()
    first = committed(node, KvPut("k", "a"))
    committed(node, KvDelete("k"))
    second = committed(node, KvPut("k", "b"))
    assert read(node, "k").create_version == second.version > first.version
    assert not read(node, "gone").found and read(node, "gone").key_version == 0


def test_a_write_with_the_current_version_applies_and_any_other_is_refused_naming_the_current_version() -> None:
    node = leader()
    version = committed(node, KvPut("k", 1)).version
    stale = conflict(node.results[node.submit(KvPut("k", 99, if_version=version - 1))])
    assert f"current version [{version}]" in stale.reason
    assert read(node, "k").value == 1
    applied = committed(node, KvPut("k", 2, if_version=version))
    assert read(node, "k").key_version == applied.version
    conflict(node.results[node.submit(KvDelete("k", if_version=version))])
    committed(node, KvDelete("k", if_version=applied.version))
    assert not read(node, "k").found


def test_create_only_applies_when_the_key_is_absent() -> None:
    node = leader()
    created = committed(node, KvPut("lock", "me", if_version=0))
    refused = conflict(node.results[node.submit(KvPut("lock", "you", if_version=0))])
    assert f"[{created.version}]" in refused.reason and "already exists" in refused.reason
    assert read(node, "lock").value == "me"
    missing = conflict(node.results[node.submit(KvDelete("never", if_version=3))])
    assert "no document was found" in missing.reason


def test_two_conflicting_conditional_writes_in_one_batch_exactly_one_applies() -> None:
    node = leader()
    version = committed(node, KvPut("counter", 0)).version
    node.hold_own_publications = True
    node.submit(KvPut("other", "x"))  # a publication in flight: the next writes wait and go in one batch
    first = node.submit(KvPut("counter", 1, if_version=version))
    second = node.submit(KvPut("counter", 1, if_version=version))
    creates = [node.submit(KvPut("fresh", n, if_version=0)) for n in range(2)]
    node.release()
    node.advance(100)
    results = [node.results[first], node.results[second]]
    assert sum(isinstance(result, Committed) for result in results) == 1, results
    assert [conflict(r) for r in results if not isinstance(r, Committed)]
    create_results = [node.results[request_id] for request_id in creates]
    assert sum(isinstance(result, Committed) for result in create_results) == 1, create_results
    assert read(node, "counter").value == 1 and read(node, "fresh").value == 0


def test_a_forwarded_conditional_write_keeps_its_condition() -> None:
    node = leader()
    version = committed(node, KvPut("k", "v")).version
    for request_id, if_version in ((1, version + 5), (2, version)):
        # Through the wire encoding, as a follower sends it.
        wire = encode_envelope(
            Envelope(FOLLOWER, ForwardedRequest("f", request_id, KvPut("k", request_id, if_version)))
        )
        message = decode_envelope(wire).message
        assert isinstance(message, ForwardedRequest)
        node.receive(FOLLOWER, message)
    responses = [message for _, message in node.take_sent(ForwardedResponse)]
    results = [getattr(response, "result", None) for response in responses]
    assert isinstance(results[0], ClusterError) and results[0].status == 409, results
    assert isinstance(results[1], Committed), results
    assert read(node, "k").value == 2


def test_the_key_versions_travel_in_diffs_and_in_the_persisted_encoding() -> None:
    before = ClusterState(
        cluster_name="t", version=4, state_uuid="s4", kv={"a": 1}, kv_versions={"a": KeyVersion(3, 2)}
    )
    after = before.replace(
        version=5,
        state_uuid="s5",
        parent_uuid="s4",
        kv={"a": 2, "b": 1},
        kv_versions={"a": KeyVersion(5, 2), "b": KeyVersion(5, 5)},
    )
    diff = decode_diff(encode_diff(compute_diff(before, after)))
    assert diff.kv_versions.upserts == {"a": KeyVersion(5, 2), "b": KeyVersion(5, 5)}
    assert apply_diff(before, diff) == after
    deleted = after.replace(
        version=6, state_uuid="s6", parent_uuid="s5", kv={"b": 1}, kv_versions={"b": KeyVersion(5, 5)}
    )
    assert apply_diff(after, decode_diff(encode_diff(compute_diff(after, deleted)))) == deleted
    assert decode_state(encode_state(after)) == after


def test_a_state_persisted_before_keys_had_versions_still_loads_with_the_legacy_version() -> None:
    """A state encoded by the previous release: plain values, no `kv_versions`."""
    old = msgspec.json.encode({"cluster_name": "t", "version": 9, "state_uuid": "s9", "kv": {"k": [1, 2]}})
    state = decode_state(old)
    assert dict(state.kv) == {"k": [1, 2]} and state.key_version("k") == LEGACY_KEY_VERSION
    assert state.key_version("missing") is None


def test_a_legacy_key_is_written_conditionally_with_the_legacy_version_and_keeps_its_creation() -> None:
    master = DiscoveryNode("m", "m", "m:9300")
    legacy = ClusterState(
        cluster_name="t",
        cluster_uuid="c",
        version=9,
        state_uuid="s9",
        master_node="m",
        nodes={"m": master},
        kv={"k": 1},
    )
    context = BatchContext(master, 1, {"m"}, 10, True, iter(f"u{n}" for n in range(10)).__next__)
    stale, results = execute_batch(legacy, [ClientTask(KvPut("k", 2, if_version=9))], context)
    assert conflict(results[0]).reason.endswith("current version [1]")
    assert stale is None or dict(stale.kv) == {"k": 1}
    new_state, results = execute_batch(
        legacy, [ClientTask(KvPut("k", 2, if_version=LEGACY_KEY_VERSION.version))], context
    )
    assert new_state is not None and results == [None]
    assert new_state.key_version("k") == KeyVersion(10, LEGACY_KEY_VERSION.create_version)


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("locks/app-1", True),
        ("a", True),
        ("x" * 256, True),
        ("", False),
        ("x" * 257, False),
        ("bad\nkey", False),
        ("trailing\n", False),
        ("_txn", False),
        ("_watch", False),
        ("_anything", False),
    ],
)
def test_key_names(key: str, valid: bool) -> None:
    assert (metadata_key_problem(key) is None) is valid


def test_the_master_refuses_a_reserved_key_even_when_a_peer_skipped_the_api() -> None:
    node = leader()
    node.receive(FOLLOWER, ForwardedRequest("f", 1, KvPut("_txn", 1), timeout_ms=1_000))
    [(_, response)] = node.take_sent()
    result = getattr(response, "result", None)
    assert isinstance(result, ClusterError) and result.status == 400 and "reserved" in result.reason
    assert "_txn" not in node.coordinator.applied_state.kv


def txn(node: OneNode, request: Txn) -> TxnResult:
    request_id = node.submit(request)
    node.advance(1_000)  # a transaction that wrote nothing waits for the master's leadership round
    result = node.results[request_id]
    assert isinstance(result, TxnResult), result
    return result


def test_a_transaction_runs_its_success_ops_when_every_compare_holds_in_one_state() -> None:
    node = leader()
    version = committed(node, KvPut("a", 1)).version
    result = txn(
        node,
        Txn(
            compare=(TxnCompare("a", version), TxnCompare("b", 0)),
            success=(TxnOp("put", "b", 2), TxnOp("delete", "a"), TxnOp("get", "b"), TxnOp("get", "a")),
            failure=(TxnOp("put", "failed", True),),
        ),
    )
    assert result.succeeded and result.version > version
    put_b, delete_a, get_b, get_a = result.results
    assert (put_b.version, put_b.create_version) == (result.version, result.version)
    assert delete_a.found and not get_a.found
    assert (get_b.value, get_b.version) == (2, result.version)  # the get sees the ops before it
    assert node.coordinator.applied_state.version == result.version
    assert dict(node.coordinator.applied_state.kv) == {"b": 2}


def test_a_transaction_whose_compare_fails_runs_its_failure_ops_only() -> None:
    node = leader()
    version = committed(node, KvPut("a", 1)).version
    result = txn(
        node,
        Txn(
            compare=(TxnCompare("a", version + 1),),
            success=(TxnOp("put", "a", 99),),
            failure=(TxnOp("get", "a"),),
        ),
    )
    assert not result.succeeded and result.version == version  # wrote nothing: the state it read
    [get_a] = result.results
    assert (get_a.found, get_a.value, get_a.version) == (True, 1, version)
    assert dict(node.coordinator.applied_state.kv) == {"a": 1}


def test_two_conflicting_transactions_in_one_batch_exactly_one_succeeds() -> None:
    node = leader()
    version = committed(node, KvPut("n", 0)).version
    node.hold_own_publications = True
    node.submit(KvPut("other", "x"))
    ids = [node.submit(Txn(compare=(TxnCompare("n", version),), success=(TxnOp("put", "n", i),))) for i in (1, 2)]
    node.release()
    node.advance(1_000)
    results = [node.results[request_id] for request_id in ids]
    assert all(isinstance(result, TxnResult) for result in results), results
    assert sorted(result.succeeded for result in results if isinstance(result, TxnResult)) == [False, True]
    assert node.coordinator.applied_state.kv["n"] == 1


@pytest.mark.parametrize(
    ("request_", "problem"),
    [
        (Txn(success=tuple(TxnOp("get", f"k{i}") for i in range(65))), "at most"),
        (Txn(success=(TxnOp("put", "k", 1), TxnOp("delete", "k"))), "more than once"),
        (Txn(success=(TxnOp("put", "k"),)), "no [value]"),
        (Txn(success=(TxnOp("get", "_k"),)), "reserved"),
        (Txn(compare=(TxnCompare("", 1),)), "1 to 256"),
    ],
)
def test_the_master_refuses_a_malformed_transaction_with_its_reason(request_: Txn, problem: str) -> None:
    node = leader()
    node.receive(FOLLOWER, ForwardedRequest("f", 1, request_, timeout_ms=1_000))
    [(_, response)] = node.take_sent(ForwardedResponse)
    result = getattr(response, "result", None)
    assert isinstance(result, ClusterError) and result.status == 400 and problem in result.reason, result
    # The same key in the success and in the failure branch is fine: only one of them runs.
    assert txn_problem(Txn(success=(TxnOp("put", "k", 1),), failure=(TxnOp("put", "k", 2),))) is None
