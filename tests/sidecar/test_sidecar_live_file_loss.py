"""Files deleted or replaced under a running node: the store refuses to write on (as a failed disk), and
health, readiness and the metrics say which file, at once; on real processes the cluster goes on without the
node, which is refused at its next start rather than starting from older data."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_sidecar_security import wait_until

from coordinated.coordination.state import ClusterState, DiscoveryNode
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.storage.file_watch import FileWatch
from coordinated.sidecar.storage.persistence import FilePersistedState
from coordinated.sidecar.storage.state_store import DB_FILE, StorageWriteError
from coordinated.tools.localcluster import LocalCluster, LocalNode

WAL = DB_FILE + "-wal"


def state(version: int) -> ClusterState:
    node = DiscoveryNode("n1", "n1", "127.0.0.1:9300")
    return ClusterState("test", version=version, nodes={"n1": node}, kv={"k": version})


def replace_with_copy(path: Path) -> None:
    """Another file at the path, with the same bytes: what a copy put back, or a rename over it, leaves."""
    copy = path.with_name(path.name + ".copy")
    shutil.copyfile(path, copy)
    os.replace(copy, path)


# -- the watch and the store ---------------------------------------------------------------------------------


def test_file_watch_tells_deleted_replaced_and_unlinked(tmp_path: Path) -> None:
    kept, deleted, replaced, held = (tmp_path / name for name in ("kept", "deleted", "replaced", "held"))
    for path in (kept, deleted, replaced, held):
        path.write_text("x")
    fd = os.open(held, os.O_RDONLY)
    try:
        watch = FileWatch()
        for path in (kept, deleted, replaced):
            watch.watch(path, f"the {path.name} file")
        watch.watch(held, "the held file", fd=fd)
        assert watch.problems() == []
        deleted.unlink()
        replace_with_copy(replaced)
        held.unlink()
        held.write_text("a new file at the old path")  # its own open file still has no name
        found = {problem.path: problem.reason for problem in watch.problems()}
        assert found == {str(deleted): "deleted", str(replaced): "replaced by another file", str(held): "deleted"}
        watch.forget(deleted)
        assert str(deleted) not in {problem.path for problem in watch.problems()}
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("target", "change"), [(WAL, "delete"), (WAL, "replace"), (DB_FILE, "delete"), (DB_FILE, "replace")]
)
@pytest.mark.parametrize("sync", ["inline", "background"])
def test_a_store_whose_file_is_lost_refuses_every_write(tmp_path: Path, target: str, change: str, sync: str) -> None:
    persisted = FilePersistedState(
        tmp_path, "test", deferred_sync=sync == "background", read_history=read_history_summary
    )
    try:
        persisted.set_last_accepted_state(state(1))
        persisted.sync()
        path = tmp_path / target
        if change == "delete":
            path.unlink()
        else:
            replace_with_copy(path)
        (problem,) = persisted.files.problems()
        assert problem.path == str(path) and problem.reason in ("deleted", "replaced by another file")
        for write in (lambda: persisted.set_current_term(5), lambda: persisted.set_last_accepted_state(state(2))):
            with pytest.raises(StorageWriteError, match=re.escape(str(path))):
                write()
        assert (persisted.current_term, persisted.last_accepted_state.version) == (0, 1)  # nothing taken
    finally:
        persisted.close()


# -- on real processes ---------------------------------------------------------------------------------------


def health(node: LocalNode) -> dict[str, object]:
    _, body = node.get("/_cluster/health")
    assert isinstance(body, dict)
    return body


def data_file_problems(node: LocalNode) -> list[str]:
    problems = health(node)["problems"]
    assert isinstance(problems, list)
    return [problem["reason"] for problem in problems if problem["kind"] == "data_file"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("role", "target", "change"),
    [("follower", WAL, "delete"), ("follower", DB_FILE, "replace"), ("master", WAL, "delete")],
)
def test_a_running_node_notices_its_lost_files_and_the_cluster_goes_on(
    make_cluster: Callable[..., LocalCluster], role: str, target: str, change: str
) -> None:
    cluster = make_cluster()
    nodes = cluster.bootstrap(3)
    master = cluster.wait_master(nodes=3)
    assert master.put("/_cluster/metadata/before", {"v": 1})[0] == 200
    victim = master if role == "master" else next(node for node in nodes if node is not master)
    path = victim.data_dir / target
    if change == "delete":
        path.unlink()
    else:
        replace_with_copy(path)

    # Health names the file at once, without a write; status red, not ready, and the metric counts it.
    reasons = data_file_problems(victim)
    assert len(reasons) == 1 and str(path) in reasons[0], reasons
    assert health(victim)["status"] == "red"
    status, ready = victim.get("/readyz")
    assert status == 503 and str(path) in ready["reason"]
    _, metrics = victim.get("/metrics")
    assert re.search(r'coordinated_node_problems\{kind="data_file"\} 1\.0', metrics), metrics

    # The node persists nothing more; the others go on (a master that cannot write its own state steps down).
    others = [node for node in nodes if node is not victim]
    deadline = time.monotonic() + 60
    while True:
        current = cluster.master(others) or victim
        status, _ = current.put("/_cluster/metadata/after", {"v": 2}, timeout=15)
        if status == 200 and current is not victim:
            break
        assert time.monotonic() < deadline, "the other nodes never committed a write"
        time.sleep(0.5)
    wait_until(lambda: bool(health(victim)["persistence_problem"]), 30, "the node refuses to persist")

    # At its next start the node judges what is on disk: a lost WAL lost commits that its history says were
    # acknowledged, so it refuses rather than start from older data. A database replaced by a copy of itself
    # may still hold every commit together with the WAL: then it starts and rejoins with what it had.
    cluster.kill(victim)
    restarted = cluster.start(victim.name)
    assert restarted.process is not None and restarted.log_path is not None
    deadline = time.monotonic() + 60
    while restarted.process.poll() is None and time.monotonic() < deadline:
        try:
            if health(restarted)["number_of_nodes"] == 3:
                break
        except OSError:
            pass
        time.sleep(0.2)
    if target == WAL:
        assert restarted.process.wait(timeout=30) == 3
        assert "refusing to start" in restarted.log_path.read_text()
    elif restarted.process.poll() is None:
        status, key = restarted.get("/_cluster/metadata/before?local=true")
        assert status == 200 and key["value"] == {"v": 1}
        assert data_file_problems(restarted) == []
    else:
        assert restarted.process.returncode == 3
