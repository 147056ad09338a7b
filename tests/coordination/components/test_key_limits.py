"""cluster.metadata.max_value_size and max_state_size: decided by the master against the state its batch builds,
so that writes in one batch cannot jointly exceed the ceiling."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinated.coordination.batch import MAX_STATE_SIZE, MAX_VALUE_SIZE, execute_batch
from coordinated.coordination.batch_draft import BatchContext, StateSizes
from coordinated.coordination.batch_keys import entry_size
from coordinated.coordination.client import ClusterError, TxnResult
from coordinated.coordination.registry import coordination_registry, default_settings
from coordinated.coordination.requests.keys import KvDelete, KvPut
from coordinated.coordination.requests.snapshots import RestoreSnapshot
from coordinated.coordination.requests.transactions import Txn, TxnOp
from coordinated.coordination.settings import SettingsError
from coordinated.coordination.state import (
    ClusterState,
    CoordinationMetadata,
    DiscoveryNode,
    KeyVersion,
    VotingConfiguration,
)
from coordinated.coordination.tasks import ClientTask

MASTER = DiscoveryNode("m", "m", "m:9300")


def base(kv: dict[str, object]) -> ClusterState:
    config = VotingConfiguration.of(["m"])
    return ClusterState(
        cluster_name="t",
        cluster_uuid="c",
        version=1,
        state_uuid="s1",
        master_node="m",
        nodes={"m": MASTER},
        coordination=CoordinationMetadata(term=1, last_committed_config=config, last_accepted_config=config),
        kv=kv,
    )


def uuids() -> Iterator[str]:
    return iter(f"u{n}" for n in range(100))


def context(max_value: int = 1 << 40, max_state: int = 1 << 40, sizes: StateSizes | None = None) -> BatchContext:
    return BatchContext(
        MASTER,
        1,
        {"m"},
        10,
        True,
        uuids().__next__,
        max_value_size=max_value,
        max_state_size=max_state,
        sizes=sizes or StateSizes(),
    )


def error(result: object) -> ClusterError:
    assert isinstance(result, ClusterError), result
    assert result.status == 400 and result.type == "illegal_argument_exception"
    return result


def test_a_value_over_the_limit_is_refused_naming_the_limit_and_the_size() -> None:
    new_state, results = execute_batch(base({}), [ClientTask(KvPut("big", "x" * 100))], context(max_value=50))
    assert new_state is None
    reason = error(results[0]).reason
    assert "[big]" in reason and "[102] bytes" in reason and "[50] bytes" in reason
    assert "cluster.metadata.max_value_size" in reason
    # At the limit it is accepted.
    new_state, results = execute_batch(base({}), [ClientTask(KvPut("big", "x" * 48))], context(max_value=50))
    assert new_state is not None and results == [None]


def test_a_transaction_with_a_value_over_the_limit_changes_nothing() -> None:
    txn = Txn(success=(TxnOp("put", "a", 1), TxnOp("put", "b", "x" * 100)))
    new_state, results = execute_batch(base({}), [ClientTask(txn)], context(max_value=50))
    assert new_state is None and "[b]" in error(results[0]).reason


def test_concurrent_writes_in_one_batch_cannot_jointly_exceed_the_state_ceiling() -> None:
    state = base({"k": "x" * 10})
    used = entry_size("k", "x" * 10)
    limit = used + 2 * entry_size("a", "y" * 20) - 1  # room for one of the two writes, not both
    tasks = [ClientTask(KvPut("a", "y" * 20)), ClientTask(KvPut("b", "y" * 20))]
    new_state, results = execute_batch(state, tasks, context(max_state=limit))
    assert new_state is not None and results[0] is None
    reason = error(results[1]).reason
    assert "cluster.metadata.max_state_size" in reason and f"[{limit}] bytes" in reason
    assert f"they are [{used + entry_size('a', 'y' * 20)}] bytes now" in reason
    assert set(new_state.kv) == {"k", "a"}


def test_a_refused_transaction_is_taken_back_whole_and_later_tasks_still_run() -> None:
    state = base({"k": "x" * 10, "old": "z" * 30})
    limit = entry_size("k", "x" * 10) + entry_size("old", "z" * 30) + 10
    txn = Txn(success=(TxnOp("delete", "old"), TxnOp("put", "new", "n" * 80)))
    tasks = [ClientTask(txn), ClientTask(KvDelete("k"))]
    new_state, results = execute_batch(state, tasks, context(max_state=limit))
    error(results[0])
    assert not isinstance(results[0], TxnResult)
    assert new_state is not None and dict(new_state.kv) == {"old": "z" * 30}, "the delete of [old] was taken back"
    assert not new_state.kv_versions.get("new")


def test_a_write_that_shrinks_a_state_over_the_ceiling_is_let_through() -> None:
    """Lowering the setting below the current size must not block the writes that bring the state back down."""
    state = base({"a": "x" * 100, "b": "x" * 100})
    new_state, results = execute_batch(state, [ClientTask(KvPut("a", "small"))], context(max_state=50))
    assert new_state is not None and results == [None]
    new_state, results = execute_batch(state, [ClientTask(KvPut("a", "x" * 101))], context(max_state=50))
    assert new_state is None
    error(results[0])


def test_the_size_of_the_next_state_is_carried_over_not_recounted() -> None:
    sizes = StateSizes()
    state = base({f"k{i}": i for i in range(100)})
    expected = sum(entry_size(f"k{i}", i) for i in range(100))
    assert sizes.of(state) == expected
    new_state, _ = execute_batch(state, [ClientTask(KvPut("k1", "longer"))], context(sizes=sizes))
    assert new_state is not None
    recount = sum(entry_size(key, value) for key, value in new_state.kv.items())
    assert sizes._known[new_state.state_uuid] == recount


def test_the_limits_are_dynamic_settings_with_byte_sizes() -> None:
    registry = coordination_registry()
    parsed = registry.validate_dynamic({"cluster.metadata.max_value_size": "64kb"})
    assert parsed == {"cluster.metadata.max_value_size": 65536}
    settings = default_settings().with_dynamic({"cluster.metadata.max_state_size": "2mb"})
    assert (settings[MAX_STATE_SIZE], settings[MAX_VALUE_SIZE]) == (2 * 1024 * 1024, 1024 * 1024)
    with pytest.raises(SettingsError, match=r"cluster\.metadata\.max_state_size"):
        registry.validate_dynamic({"cluster.metadata.max_state_size": "lots"})


def test_a_restore_over_the_ceiling_is_refused_and_replaces_nothing() -> None:
    state = base({"k": "x" * 10})
    restored = {"a": "y" * 50, "b": "y" * 50}
    limit = entry_size("a", "y" * 50) + 10  # room for one restored key, not both
    versions = {key: KeyVersion(3, 3) for key in restored}
    restore = RestoreSnapshot("repo:snap", 3, restored, versions, {})
    new_state, results = execute_batch(state, [ClientTask(restore)], context(max_state=limit))
    assert "cluster.metadata.max_state_size" in error(results[0]).reason
    assert new_state is None or dict(new_state.kv) == {"k": "x" * 10}
    # Within the ceiling the restore replaces every key.
    new_state, results = execute_batch(state, [ClientTask(restore)], context())
    assert results == [None] and new_state is not None and dict(new_state.kv) == restored
