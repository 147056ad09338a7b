"""The SQLite store: writes in proportion to the change, every refusal rule on its files, and crashes between
the steps of a write (a test hook kills the process there, as a power cut would)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from coordinated.coordination.state import ClusterState, DiscoveryNode, KeyVersion, VotingConfiguration, initial_state
from coordinated.sidecar.events.history import HistoryWriter
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.storage.persistence import HISTORY_DIR, NODE_ID_FILE, DataDirError, FilePersistedState
from coordinated.sidecar.storage.slot_files import SLOT_FILES
from coordinated.sidecar.storage.state_store import DB_FILE, StorageWriteError

PAGE = 4096


def state_with(version: int, kv: dict[str, object], term: int = 1) -> ClusterState:
    state = initial_state("c")
    nodes = {n: DiscoveryNode(n, f"node-{n}", f"127.0.0.1:{9300 + i}") for i, n in enumerate("abc")}
    return state.replace(
        cluster_uuid="u" * 22,
        cluster_uuid_committed=True,
        version=version,
        state_uuid=f"s{version}",
        master_node="a",
        nodes=nodes,
        coordination=msgspec.structs.replace(
            state.coordination,
            term=term,
            last_committed_config=VotingConfiguration.of(["a", "b", "c"]),
            last_accepted_config=VotingConfiguration.of(["a", "b", "c"]),
        ),
        kv=kv,
        kv_versions={key: KeyVersion(version, 1) for key in kv},
    )


def acknowledge(persisted: FilePersistedState) -> None:
    """What the node appends once term and state are durable, before the Join or ack relying on them."""
    state = persisted.last_accepted_state
    writer = HistoryWriter(persisted.data_dir / HISTORY_DIR, 1 << 20)
    common = {"node": persisted.node_id, "cluster_uuid": state.cluster_uuid}
    writer.append_fields({**common, "type": "term", "term": persisted.current_term})
    writer.append_fields({**common, "type": "accepted", "term": state.term, "version": state.version})
    writer.close()


def refusal(data_dir: Path) -> str:
    with pytest.raises(DataDirError) as error:
        FilePersistedState(data_dir, "c", read_history=read_history_summary)
    return str(error.value)


def wal(data_dir: Path) -> Path:
    return data_dir / (DB_FILE + "-wal")


def test_round_trip_keeps_every_part_of_the_state(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (persisted.current_term, persisted.last_accepted_state) == (0, initial_state("c"))
    state = state_with(3, {"a": [1, {"b": None}], "b/c": "x", "n": None}).replace(
        persistent_settings={"cluster.publish.timeout": "10s"}
    )
    # A key written before keys carried versions has none: it must stay without one.
    state = state.replace(kv={**state.kv, "legacy": 1})
    persisted.set_last_accepted_state(state)
    persisted.set_current_term(7)
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (7, state)
    assert again.node_id == persisted.node_id
    again.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([DB_FILE, NODE_ID_FILE])


def test_a_one_key_change_writes_bytes_in_proportion_to_the_change(tmp_path: Path) -> None:
    """The point of the store: a one-key change to a 2 MB state adds a few pages to the WAL, not 2 MB."""
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    big = {f"key-{i:05d}": "v" * 200 for i in range(10_000)}
    persisted.set_last_accepted_state(state_with(1, big))
    wal_before, bytes_before = wal(tmp_path).stat().st_size, persisted.bytes_written
    first = persisted.last_accepted_state
    changed = first.replace(
        version=2,
        state_uuid="s2",
        kv={**big, "key-00042": "changed"},
        kv_versions={**first.kv_versions, "key-00042": KeyVersion(2, 1)},
    )
    persisted.set_last_accepted_state(changed)
    persisted.set_current_term(2)
    grown = wal(tmp_path).stat().st_size - wal_before
    assert persisted.bytes_written - bytes_before < 5_000
    assert 0 < grown <= 8 * (PAGE + 24), f"the WAL grew by {grown} bytes for a one-key change"
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (2, changed)
    again.close()


def test_deletes_and_version_only_changes_are_persisted(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    first = state_with(1, {"a": 1, "b": 2, "c": 3})
    persisted.set_last_accepted_state(first)
    # A blind put of an unchanged value only moves the key's version; a delete removes the row.
    second = first.replace(
        version=2, state_uuid="s2", kv={"a": 1, "c": 3}, kv_versions={"a": KeyVersion(2, 1), "c": KeyVersion(1, 1)}
    )
    persisted.set_last_accepted_state(second)
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.last_accepted_state == second
    again.close()


def test_a_write_changing_more_keys_than_one_statement_takes_keeps_every_row(tmp_path: Path) -> None:
    """The changed keys' old rows go in one DELETE per 500 keys: 1,203 upserts and 700 deletes in one write,
    then a reload, whose row checksums and summary must all agree."""
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    first = state_with(1, {f"k{i:04d}": i for i in range(2_000)})
    persisted.set_last_accepted_state(first)
    kv = {key: value for key, value in first.kv.items() if int(key[1:]) >= 700}
    kv.update({f"k{i:04d}": -i for i in range(1_000, 2_203)})
    second = first.replace(version=2, state_uuid="s2", kv=kv, kv_versions={key: KeyVersion(2, 1) for key in kv})
    persisted.set_last_accepted_state(second)
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.last_accepted_state == second
    again.close()


def test_a_failed_commit_keeps_the_old_value_and_the_next_write_rewrites_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    first = state_with(1, {"a": 1, "b": 2})
    persisted.set_last_accepted_state(first)
    store = persisted._open_store()
    real_conn = store.conn

    class FailingCommit:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: object) -> object:
            if sql == "COMMIT":
                raise sqlite3.OperationalError("disk I/O error")
            return self.conn.execute(sql, *args)

        def executemany(self, sql: str, rows: list[tuple[object, ...]]) -> object:
            return self.conn.executemany(sql, rows)

        @property
        def in_transaction(self) -> bool:
            return self.conn.in_transaction

    monkeypatch.setattr(store, "conn", FailingCommit(real_conn))
    with pytest.raises(StorageWriteError, match="disk I/O error"):
        persisted.set_last_accepted_state(state_with(2, {"a": 1, "b": 3}))
    assert isinstance(StorageWriteError("x"), OSError)  # what the core's PersistedState contract expects
    assert persisted.last_accepted_state == first
    monkeypatch.setattr(store, "conn", real_conn)
    third = state_with(3, {"b": 4, "c": 5})
    persisted.set_last_accepted_state(third)
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.last_accepted_state == third
    again.close()


def test_close_is_idempotent_and_later_writes_fail(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    persisted.close()
    persisted.close()
    with pytest.raises(ValueError, match="closed"):
        persisted.set_current_term(1)


# -- damaged or missing files: exit 3 naming the file, never a silent reset -------------------------------------


def used(data_dir: Path, writes: int = 4, keys: int = 200) -> FilePersistedState:
    """A node that voted and acknowledged states (each in its history); closed, so the WAL is checkpointed."""
    persisted = FilePersistedState(data_dir, "c", read_history=read_history_summary)
    for step in range(1, writes + 1):
        persisted.set_current_term(step)
        persisted.set_last_accepted_state(
            state_with(step, {f"k{i}": f"value {i} at {step}" for i in range(keys)}, term=step)
        )
        acknowledge(persisted)
    persisted.close()
    return persisted


def test_a_corrupted_page_refuses_naming_the_file(tmp_path: Path) -> None:
    used(tmp_path)
    db = tmp_path / DB_FILE
    data = bytearray(db.read_bytes())
    page = data.index(b"value 7 at 4") // PAGE  # a leaf page of the key rows
    assert page > 0
    data[page * PAGE : page * PAGE + 64] = os.urandom(64)  # its page header and cell pointers
    db.write_bytes(bytes(data))
    message = refusal(tmp_path)
    assert f"[{db}] is corrupt" in message and "refusing to reset" in message


def test_a_changed_value_byte_is_caught_by_the_row_checksum(tmp_path: Path) -> None:
    """SQLite keeps no checksums of its own: a flipped byte in a value is found by the row's CRC."""
    used(tmp_path)
    conn = sqlite3.connect(tmp_path / DB_FILE)
    (value,) = conn.execute("SELECT value FROM kv WHERE key = 'k7'").fetchone()
    conn.execute("UPDATE kv SET value = ? WHERE key = 'k7'", (value.replace(b"value 7 ", b"value 8 "),))
    conn.commit()
    conn.close()
    message = refusal(tmp_path)
    assert f"[{tmp_path / DB_FILE}] is corrupt: checksum mismatch in the row of key [k7]" in message


def test_a_lost_row_is_caught_by_the_summary(tmp_path: Path) -> None:
    used(tmp_path)
    conn = sqlite3.connect(tmp_path / DB_FILE)
    conn.execute("DELETE FROM kv WHERE key = 'k3'")
    conn.commit()
    conn.close()
    assert "rows were lost or replaced" in refusal(tmp_path)


@pytest.mark.parametrize("how", ["deleted", "emptied", "truncated"])
def test_a_missing_or_cut_database_with_history_refuses(tmp_path: Path, how: str) -> None:
    node = used(tmp_path)
    db = tmp_path / DB_FILE
    if how == "deleted":
        db.unlink()
    elif how == "emptied":
        db.write_bytes(b"")
    else:
        db.write_bytes(db.read_bytes()[: 2 * PAGE])
    message = refusal(tmp_path)
    assert str(db) in message and f"node id [{node.node_id}]" in message and "refusing to reset" in message
    assert not (tmp_path / SLOT_FILES[0]).exists(), "never a silent reset"


def killed_with_wal(data_dir: Path, writes: int) -> Path:
    """A node killed after `writes` acknowledged writes: its last commits are only in the WAL."""
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_sidecar_storage import acknowledge, state_with
        from coordinated.sidecar.events.history_read import read_history_summary
        from coordinated.sidecar.storage.persistence import FilePersistedState
        persisted = FilePersistedState(Path({str(data_dir)!r}), "c", read_history=read_history_summary)
        for step in range(1, {writes} + 1):
            persisted.set_current_term(step)
            persisted.set_last_accepted_state(state_with(step, {{"k": step}}, term=step))
            acknowledge(persisted)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert process.returncode == -9, process.stderr
    assert wal(data_dir).stat().st_size > 0
    return wal(data_dir)


@pytest.mark.usefixtures("processes")
def test_a_kill_leaves_the_last_commit_in_the_wal_and_it_loads(tmp_path: Path) -> None:
    killed_with_wal(tmp_path, 5)
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state.version) == (5, 5)
    again.close()


@pytest.mark.usefixtures("processes")
@pytest.mark.parametrize("cut", ["to its header", "by one frame", "deleted"])
def test_a_lost_wal_tail_that_was_acknowledged_refuses(tmp_path: Path, cut: str) -> None:
    """A torn tail is dropped by SQLite; if the history shows the lost commit was acknowledged, the node refuses
    rather than forget it."""
    log = killed_with_wal(tmp_path, 5)
    frame = PAGE + 24
    if cut == "to its header":
        os.truncate(log, 32)
    elif cut == "by one frame":
        os.truncate(log, log.stat().st_size - frame)
    else:
        log.unlink()
    # (the -shm file is SQLite's shared-memory index, rebuilt from the WAL on every open)
    files = {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.is_file() and path.suffix != ".db-shm"}
    message = refusal(tmp_path)
    assert "acknowledged write was lost" in message and str(tmp_path / DB_FILE) in message
    after = {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.is_file()}
    assert {name: after.get(name) for name in files} == files, "a refusal changes no file (no checkpoint either)"


def test_a_database_copied_from_another_node_refuses(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    used(tmp_path / "a")
    other = used(tmp_path / "b")
    (tmp_path / "a" / DB_FILE).write_bytes((tmp_path / "b" / DB_FILE).read_bytes())
    message = refusal(tmp_path / "a")
    assert f"node [{other.node_id}]" in message and "copied from another node" in message


def test_a_database_restored_from_an_older_copy_refuses_when_the_history_is_newer(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    persisted.set_current_term(1)
    persisted.set_last_accepted_state(state_with(1, {"k": 1}))
    acknowledge(persisted)
    persisted.close()
    backup = (tmp_path / DB_FILE).read_bytes()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    again.set_last_accepted_state(state_with(2, {"k": 2}))
    acknowledge(again)
    again.close()
    (tmp_path / DB_FILE).write_bytes(backup)
    assert "acknowledged write was lost" in refusal(tmp_path)


def test_the_history_deleted_but_the_database_intact_loads(tmp_path: Path) -> None:
    used(tmp_path, writes=4)
    for segment in (tmp_path / HISTORY_DIR).iterdir():
        segment.unlink()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.current_term == 4
    again.close()


def test_other_cluster_name_refused(tmp_path: Path) -> None:
    used(tmp_path)
    with pytest.raises(DataDirError, match=r"cluster\.name"):
        FilePersistedState(tmp_path, "other", read_history=read_history_summary)


# -- a crash between the steps of a write: the test hook kills the process there ----------------------------


def run_writer(data_dir: Path, crash_point: str, writes: int) -> subprocess.CompletedProcess[str]:
    """A process that writes `writes` states, acknowledging each; prints the version of each acknowledged one."""
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_sidecar_storage import acknowledge, state_with
        from coordinated.sidecar.events.history_read import read_history_summary
        from coordinated.sidecar.storage.persistence import FilePersistedState
        persisted = FilePersistedState(Path({str(data_dir)!r}), "c", read_history=read_history_summary)
        start = persisted.last_accepted_state.version
        for version in range(start + 1, start + {writes} + 1):
            persisted.set_last_accepted_state(
                state_with(version, {{f"k{{i}}": version for i in range(version % 7)}}, term=1)
            )
            acknowledge(persisted)
            print(version, flush=True)
        persisted.close()
        """
    )
    env = {**os.environ, "COORDINATED_TEST_CRASH_POINT": crash_point}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.usefixtures("processes")
@pytest.mark.parametrize("nth", [1, 2, 5, 9])
@pytest.mark.parametrize(("point", "lands"), [("write:rows", False), ("write:committed", True)])
def test_a_crash_inside_a_write_keeps_every_acknowledged_state(
    tmp_path: Path, point: str, lands: bool, nth: int
) -> None:
    """Killed after the rows of the nth write are written but before its commit, the node restarts with the
    previous (acknowledged) state; killed after the commit but before the ack, with the new one. Both are safe:
    the history's newest `accepted` is never newer than what loads."""
    process = run_writer(tmp_path, f"{point}@{nth}", 12)
    assert process.returncode == -9, process.stderr
    acked = [int(line) for line in process.stdout.split()]
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    loaded = again.last_accepted_state.version
    again.close()
    # A fresh start writes the initial record first (through the same write), so the nth write has version n-1.
    expected = nth - 1 if lands else nth - 2
    assert acked == list(range(1, expected + (0 if lands else 1))) if expected >= 0 else acked == []
    assert loaded == max(expected, 0)
    assert loaded >= (acked[-1] if acked else 0)
    # And the node keeps going from there.
    process = run_writer(tmp_path, "", 3)
    assert process.returncode == 0, process.stderr


@pytest.mark.usefixtures("processes")
@pytest.mark.parametrize("point", ["create:synced", "create:renamed"])
def test_a_crash_during_the_first_start_starts_fresh(tmp_path: Path, point: str) -> None:
    process = run_writer(tmp_path, point, 3)
    assert process.returncode == -9 and not process.stdout
    assert not (tmp_path / NODE_ID_FILE).exists()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (0, initial_state("c"))
    again.close()
    assert not (tmp_path / (DB_FILE + ".tmp")).exists()
