"""The master's side of snapshots: repositories as cluster-state metadata, and a restore as one batch task."""

from __future__ import annotations

import itertools

import msgspec

from coordinated.coordination.batch import execute_batch
from coordinated.coordination.batch_draft import BatchContext
from coordinated.coordination.batch_writes import DEFERRED
from coordinated.coordination.client import ClusterError, Committed
from coordinated.coordination.registry import default_settings
from coordinated.coordination.requests import request_problem
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.requests.snapshots import DeleteRepository, PutRepository, RestoreSnapshot
from coordinated.coordination.state import (
    ClusterState,
    CoordinationMetadata,
    DiscoveryNode,
    KeyVersion,
    Repository,
    VotingConfiguration,
    apply_diff,
    compute_diff,
)
from coordinated.coordination.tasks import ClientTask

MASTER = DiscoveryNode("m", "node-1", "127.0.0.1:9300")
_uuids = itertools.count()


def context() -> BatchContext:
    return BatchContext(MASTER, 3, {"m"}, 10, True, lambda: f"uuid-{next(_uuids)}")


def base(version: int = 7) -> ClusterState:
    config = VotingConfiguration.of(["m"])
    return ClusterState(
        cluster_name="c",
        cluster_uuid="new-cluster",
        version=version,
        state_uuid="s",
        master_node="m",
        nodes={"m": MASTER},
        coordination=CoordinationMetadata(3, config, config),
        kv={"stale": 1, "kept": "old"},
        kv_versions={"stale": KeyVersion(2, 2), "kept": KeyVersion(5, 3)},
        persistent_settings={"cluster.no_master_block": "all"},
    )


def restore(**changes: object) -> RestoreSnapshot:
    fields: dict[str, object] = {
        "snapshot": "r:s",
        "snapshot_version": 40,
        "kv": {"kept": "from-snapshot", "a/b": [1]},
        "kv_versions": {"kept": KeyVersion(30, 12), "a/b": KeyVersion(40, 40)},
        "persistent_settings": {"cluster.publish.timeout": "10s"},
    }
    fields.update(changes)
    return RestoreSnapshot(**fields)  # type: ignore[arg-type]


def test_a_restore_replaces_keys_and_settings_with_their_versions_above_the_snapshot() -> None:
    state, results = execute_batch(base(), [ClientTask(restore())], context())
    assert state is not None and results == [None]
    assert dict(state.kv) == {"kept": "from-snapshot", "a/b": [1]}
    assert state.key_version("kept") == KeyVersion(30, 12) and state.key_version("a/b") == KeyVersion(40, 40)
    assert dict(state.persistent_settings) == {"cluster.publish.timeout": "10s"}
    assert state.version == 41  # above the snapshot: a key's version never goes back
    assert state.cluster_uuid == "new-cluster" and state.parent_uuid == "s"


def test_a_restore_waits_for_the_writes_batched_before_it_and_the_writes_after_it_wait_for_it() -> None:
    """A restore writes every key: it never shares a batch with another write, so every acknowledged write is in
    the state of its version (before, a write batched ahead of a restore was acknowledged and then replaced)."""
    tasks = [ClientTask(KvPut("x", 1)), ClientTask(restore()), ClientTask(KvPut("kept", "later"))]
    first, results = execute_batch(base(version=100), tasks, context())
    assert first is not None and results == [None, DEFERRED, DEFERRED]
    assert first.kv["x"] == 1 and first.key_version("x") == KeyVersion(first.version, first.version)
    second, results = execute_batch(first, tasks[1:], context())
    assert second is not None and results == [None, DEFERRED]
    assert "x" not in second.kv and second.kv["kept"] == "from-snapshot"
    third, results = execute_batch(second, tasks[2:], context())
    assert third is not None and results == [None]
    assert third.kv["kept"] == "later" and third.key_version("kept") == KeyVersion(third.version, 12)


def test_an_identical_restore_still_commits_a_state() -> None:
    restored, _ = execute_batch(base(), [ClientTask(restore())], context())
    assert restored is not None
    again, _ = execute_batch(restored, [ClientTask(restore())], context())
    assert again is not None and again.version == restored.version + 1


def test_repositories_are_cluster_metadata_and_travel_in_diffs() -> None:
    put = PutRepository("backups", "fs", "/snapshots/demo")
    state, results = execute_batch(base(), [ClientTask(put)], context())
    assert state is not None and state.repositories == {"backups": Repository("fs", "/snapshots/demo")}
    s3 = PutRepository("offsite", "s3", bucket="snapshots", base_path="prod", client="backups")
    with_s3, _ = execute_batch(state, [ClientTask(s3)], context())
    assert with_s3 is not None
    assert with_s3.repositories["offsite"] == Repository("s3", bucket="snapshots", base_path="prod", client="backups")
    # An fs repository encodes as it did before s3 repositories existed (persisted states stay readable alike).
    assert msgspec.json.encode(state.repositories["backups"]) == b'{"type":"fs","location":"/snapshots/demo"}'

    assert apply_diff(base(), compute_diff(base(), state)) == state
    deleted, results = execute_batch(state, [ClientTask(DeleteRepository("backups"))], context())
    assert deleted is not None and deleted.repositories == {}
    unchanged, results = execute_batch(deleted, [ClientTask(DeleteRepository("backups"))], context())
    assert unchanged is None and isinstance(results[0], ClusterError) and results[0].status == 404
    assert not isinstance(results[0], Committed)


def test_the_master_refuses_a_bad_restore_or_repository() -> None:
    def problem(request: object) -> str | None:
        return request_problem(request, base(), default_settings())  # type: ignore[arg-type]

    assert problem(restore()) is None
    assert "exactly its keys" in str(problem(restore(kv_versions={"kept": KeyVersion(30, 12)})))
    assert "reserved" in str(problem(restore(kv={"_txn": 1}, kv_versions={"_txn": KeyVersion(1, 1)})))
    assert "inconsistent versions" in str(
        problem(restore(kv_versions={"kept": KeyVersion(3, 12), "a/b": KeyVersion(40, 40)}))
    )
    assert "inconsistent versions" in str(problem(restore(snapshot_version=10)))
    assert "cluster.no_master_block" in str(problem(restore(persistent_settings={"cluster.no_master_block": "x"})))
    # A node setting that an older version persisted is kept, and ignored, as in a running cluster.
    assert problem(restore(persistent_settings={"cluster.publish.timeout": "1ms"})) is None
    assert "unknown setting [made.up]" in str(problem(restore(persistent_settings={"made.up": "1"})))
    assert problem(PutRepository("backups", "fs", "/x")) is None
    assert "does not exist" in str(problem(PutRepository("backups", "url", "/x")))
    assert problem(PutRepository("backups", "s3", bucket="snapshots", base_path="prod/a", client="default")) is None
    assert "not [location]" in str(problem(PutRepository("backups", "s3", "/x", bucket="snapshots", client="c")))
    assert "invalid [bucket]" in str(problem(PutRepository("backups", "s3", bucket="Snap_shots", client="c")))
    assert "invalid [base_path]" in str(problem(PutRepository("backups", "s3", bucket="snaps", base_path="a/../b")))
    assert "invalid [client]" in str(problem(PutRepository("backups", "s3", bucket="snaps", client="")))
    assert "location] only" in str(problem(PutRepository("backups", "fs", "/x", bucket="snaps")))
    assert "absolute" in str(problem(PutRepository("backups", "fs", "x")))
    assert "Invalid repository name" in str(problem(PutRepository("Backups", "fs", "/x")))
