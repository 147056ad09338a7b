from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slot_format_writer import FilePersistedState as OldFilePersistedState

from coordinated.coordination.state import (
    ENCODE_HOOK,
    LEGACY_KEY_VERSION,
    ClusterState,
    DiscoveryNode,
    KeyVersion,
    VotingConfiguration,
    initial_state,
)
from coordinated.sidecar.events.history import HistoryWriter, read_events_after
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.node import Node
from coordinated.sidecar.node_settings import build_config
from coordinated.sidecar.storage.persistence import (
    HISTORY_DIR,
    HOOKS_FILE,
    NODE_ID_FILE,
    DataDirError,
    DataDirLock,
    FilePersistedState,
    atomic_write,
)
from coordinated.sidecar.storage.slot_files import (
    LEGACY_STATE_FILE,
    SLOT_FILES,
    SLOT_HEADER_SIZE,
    encode_slot_record,
)
from coordinated.sidecar.storage.state_store import DB_FILE


def bootstrapped(name: str = "c") -> ClusterState:
    state = initial_state(name)
    coordination = state.coordination
    return state.replace(
        coordination=msgspec.structs.replace(
            coordination,
            last_committed_config=VotingConfiguration.of(["a"]),
            last_accepted_config=VotingConfiguration.of(["a"]),
        ),
        kv={"k": [1, 2, {"x": None}]},
    )


def published(version: int, term: int = 1, kv: dict[str, object] | None = None) -> ClusterState:
    """A state as a master publishes it: three nodes, a committed configuration, some keys."""
    state = bootstrapped()
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
        kv={"k": version} if kv is None else kv,
    )


def header(path: Path) -> tuple[bytes, int, int]:
    """(magic, generation, payload length) of the record in a slot file."""
    return struct.unpack(">12sQQ", path.read_bytes()[:28])


def newest_slot(data_dir: Path) -> Path:
    return max((data_dir / name for name in SLOT_FILES), key=lambda p: header(p)[1] if p.stat().st_size else -1)


def older_slot(data_dir: Path) -> Path:
    newest = newest_slot(data_dir)
    return next(data_dir / name for name in SLOT_FILES if data_dir / name != newest)


def acknowledge(persisted: FilePersistedState) -> None:
    """Append to the history what the node writes there once its term and accepted state are durable, before
    the Join or ack that relies on them: the history then proves that this record was acknowledged."""
    state = persisted.last_accepted_state
    writer = HistoryWriter(persisted.data_dir / HISTORY_DIR, 1 << 20)
    common = {"node": persisted.node_id, "cluster_uuid": state.cluster_uuid}
    writer.append_fields({**common, "type": "term", "term": persisted.current_term})
    writer.append_fields({**common, "type": "accepted", "term": state.term, "version": state.version})
    writer.close()


def given_node_id(data_dir: Path, node_id: str = "0123abcd") -> str:
    atomic_write(data_dir / NODE_ID_FILE, node_id.encode())
    return node_id


def refusal(data_dir: Path, cluster_name: str = "c") -> str:
    with pytest.raises(DataDirError) as error:
        FilePersistedState(data_dir, cluster_name, read_history=read_history_summary)
    return str(error.value)


def flip(data: bytes, index: int) -> bytes:
    damaged = bytearray(data)
    damaged[index] ^= 0x20
    return bytes(damaged)


def test_round_trip(tmp_path: Path) -> None:
    persisted = OldFilePersistedState(tmp_path, "c")
    assert persisted.current_term == 0
    assert persisted.last_accepted_state == initial_state("c")
    state = bootstrapped()
    persisted.set_last_accepted_state(state)
    persisted.set_current_term(7)
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.current_term == 7
    assert again.last_accepted_state == state
    again.close()
    # Migrated: the slot files are gone once the database holds their record.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([DB_FILE, NODE_ID_FILE])


def test_trailing_bytes_after_a_record_are_ignored(tmp_path: Path) -> None:
    """A crash between pwrite and ftruncate leaves the tail of the older, longer record behind."""
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(5)
    persisted.close()
    newest = newest_slot(tmp_path)
    newest.write_bytes(newest.read_bytes() + b"tail of an older record")
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.current_term == 5
    again.close()


TORN: list[tuple[str, Callable[[bytes], bytes]]] = [
    ("truncated payload", lambda data: data[:-5]),
    ("truncated header", lambda data: data[: SLOT_HEADER_SIZE - 10]),
    ("flip in payload", lambda data: flip(data, len(data) - 3)),
    ("flip in magic", lambda data: flip(data, 0)),
    ("flip in generation", lambda data: flip(data, 19)),
    ("flip in length", lambda data: flip(data, 27)),
    ("flip in checksum", lambda data: flip(data, 40)),
    ("zeroed", lambda data: bytes(len(data))),
    ("empty", lambda data: b""),
]


@pytest.mark.parametrize("damage", [d for _, d in TORN], ids=[name for name, _ in TORN])
def test_torn_newest_slot_falls_back_to_older_record(tmp_path: Path, damage: Callable[[bytes], bytes]) -> None:
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_last_accepted_state(published(1))
    persisted.set_current_term(3)
    acknowledge(persisted)
    persisted.set_last_accepted_state(published(2, term=3))  # this write is "torn", so it was never acknowledged
    persisted.close()
    newest = newest_slot(tmp_path)
    newest.write_bytes(damage(newest.read_bytes()))
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (3, published(1))
    again.set_current_term(4)
    again.close()
    third = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (third.current_term, third.last_accepted_state) == (4, published(1))
    third.close()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: data[:-5], "truncated, "),
        (lambda data: data[:20], "truncated header"),
        (lambda data: flip(data, len(data) - 3), "checksum mismatch"),
        (lambda data: flip(data, 19), "checksum mismatch"),
        (lambda data: flip(data, 0), "malformed header"),
        (lambda data: bytes(len(data)), "malformed header"),
    ],
)
def test_both_slots_corrupt_refuses_to_load(tmp_path: Path, damage: Callable[[bytes], bytes], expected: str) -> None:
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(3)
    persisted.set_current_term(4)
    persisted.close()
    for name in SLOT_FILES:
        path = tmp_path / name
        path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DataDirError) as error:
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    message = str(error.value)
    for name in SLOT_FILES:
        assert f"[{tmp_path / name}] is corrupt:" in message
    assert expected in message
    assert "refusing to reset" in message


def test_only_record_damaged_refuses_to_load(tmp_path: Path) -> None:
    OldFilePersistedState(tmp_path, "c").close()  # slot 0 holds the initial record, slot 1 is empty
    slot0, slot1 = (tmp_path / name for name in SLOT_FILES)
    slot0.write_bytes(flip(slot0.read_bytes(), 70))
    with pytest.raises(DataDirError) as error:
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert f"[{slot0}] is corrupt: checksum mismatch" in str(error.value)
    assert f"[{slot1}] holds no record" in str(error.value)


def test_empty_slot_files_alone_refuse(tmp_path: Path) -> None:
    """Slot files are never emptied by the node: zero-length slots were truncated by someone."""
    for name in SLOT_FILES:
        (tmp_path / name).write_bytes(b"")
    message = refusal(tmp_path)
    for name in SLOT_FILES:
        assert f"[{tmp_path / name}] holds no record" in message
    assert "refusing to reset" in message
    assert not (tmp_path / NODE_ID_FILE).exists()


def test_same_generation_with_different_records_refused(tmp_path: Path) -> None:
    given_node_id(tmp_path)
    for name, term in zip(SLOT_FILES, (1, 2), strict=True):
        payload = b'{"current_term":%d,"last_accepted_state":{"cluster_name":"c"}}' % term
        (tmp_path / name).write_bytes(encode_slot_record(5, payload))
    with pytest.raises(DataDirError, match="same generation"):
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)


def test_valid_checksum_but_bad_content_is_reported(tmp_path: Path) -> None:
    OldFilePersistedState(tmp_path, "c").close()
    (tmp_path / SLOT_FILES[1]).write_bytes(encode_slot_record(2, b'{"current_term":"x"}'))
    with pytest.raises(DataDirError, match="corrupt") as error:
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert str(tmp_path / SLOT_FILES[1]) in str(error.value)


def test_other_cluster_name_refused(tmp_path: Path) -> None:
    persisted = OldFilePersistedState(tmp_path, "one")
    persisted.set_current_term(1)
    persisted.close()
    with pytest.raises(DataDirError, match=r"cluster\.name") as error:
        FilePersistedState(tmp_path, "two", read_history=read_history_summary)
    assert "coordination-state." in str(error.value)


def write_legacy(data_dir: Path, term: int, state: ClusterState) -> Path:
    path = data_dir / LEGACY_STATE_FILE
    atomic_write(path, msgspec.json.encode({"current_term": term, "last_accepted_state": state}, enc_hook=ENCODE_HOOK))
    return path


def test_migrates_legacy_state_file(tmp_path: Path) -> None:
    node_id = given_node_id(tmp_path)
    legacy = write_legacy(tmp_path, 9, published(4, term=9))
    persisted = OldFilePersistedState(tmp_path, "c")
    assert (persisted.current_term, persisted.last_accepted_state) == (9, published(4, term=9))
    assert persisted.node_id == node_id
    assert not legacy.exists()
    persisted.set_current_term(10)
    persisted.close()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (10, published(4, term=9))
    again.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([DB_FILE, NODE_ID_FILE])


def test_migration_into_empty_slot_files(tmp_path: Path) -> None:
    given_node_id(tmp_path)
    legacy = write_legacy(tmp_path, 9, published(4, term=9))
    for name in SLOT_FILES:
        (tmp_path / name).write_bytes(b"")
    persisted = OldFilePersistedState(tmp_path, "c")
    assert persisted.current_term == 9
    assert not legacy.exists()
    persisted.close()


def test_interrupted_migration_slots_win(tmp_path: Path) -> None:
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_last_accepted_state(published(5, term=11))
    persisted.set_current_term(11)
    persisted.close()
    legacy = write_legacy(tmp_path, 9, published(4, term=9))  # as if its removal had not reached the disk
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (11, published(5, term=11))
    assert not legacy.exists()
    again.close()


def test_legacy_beside_damaged_slots_refuses(tmp_path: Path) -> None:
    OldFilePersistedState(tmp_path, "c").close()
    slot0 = tmp_path / SLOT_FILES[0]
    slot0.write_bytes(slot0.read_bytes()[:-1])
    legacy = write_legacy(tmp_path, 9, published(4, term=9))
    with pytest.raises(DataDirError) as error:
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert str(slot0) in str(error.value) and str(legacy) in str(error.value)
    assert legacy.exists()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: data[:-5], "truncated"),
        (lambda data: data.replace(b'"current_term":3', b'"current_term":9'), "checksum mismatch"),
        (lambda data: b"garbage" + data, "malformed header"),
        (lambda data: b"", "malformed header"),
    ],
)
def test_corrupt_legacy_file_refuses_to_load(tmp_path: Path, damage: Callable[[bytes], bytes], expected: str) -> None:
    path = write_legacy(tmp_path, 3, bootstrapped())
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DataDirError) as error:
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert str(path) in str(error.value)
    assert expected in str(error.value)
    assert path.exists()


def test_legacy_file_of_other_cluster_refused(tmp_path: Path) -> None:
    given_node_id(tmp_path)
    legacy = write_legacy(tmp_path, 3, bootstrapped("one"))
    with pytest.raises(DataDirError, match=r"cluster\.name") as error:
        FilePersistedState(tmp_path, "two", read_history=read_history_summary)
    assert str(legacy) in str(error.value)
    assert legacy.exists()


def test_node_id_is_stable_and_new_after_wipe(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first = OldFilePersistedState(tmp_path / "a", "c")
    first.close()
    again = FilePersistedState(tmp_path / "a", "c", read_history=read_history_summary)
    again.close()
    assert again.node_id == first.node_id
    (tmp_path / "b").mkdir()
    other = FilePersistedState(tmp_path / "b", "c", read_history=read_history_summary)
    other.close()
    assert other.node_id != first.node_id


@pytest.mark.parametrize("leftover", ["slots", "only slot 1", "legacy"])
def test_missing_node_id_with_state_refuses(tmp_path: Path, leftover: str) -> None:
    if leftover == "legacy":
        write_legacy(tmp_path, 1, bootstrapped())
        expected = tmp_path / LEGACY_STATE_FILE
    else:
        persisted = OldFilePersistedState(tmp_path, "c")
        persisted.set_current_term(1)
        persisted.close()
        (tmp_path / NODE_ID_FILE).unlink()
        expected = tmp_path / SLOT_FILES[1]
        if leftover == "only slot 1":
            (tmp_path / SLOT_FILES[0]).write_bytes(b"")
    message = refusal(tmp_path)
    assert f"[{tmp_path / NODE_ID_FILE}] is missing" in message and "new identity" in message
    assert str(expected) in message
    assert not (tmp_path / NODE_ID_FILE).exists()


def test_data_dir_lock_is_exclusive(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    with pytest.raises(DataDirError, match="in use"):
        DataDirLock(tmp_path)
    lock.release()
    DataDirLock(tmp_path).release()


# A write is a new term or a new accepted state (with a key of some size, so that records grow and shrink).
WRITES = st.lists(
    st.one_of(
        st.tuples(st.just("term"), st.integers(1, 1000)),
        st.tuples(st.just("state"), st.integers(0, 3000)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=WRITES, tear_at=st.floats(0, 1), crash=st.booleans(), data=st.data())
def test_a_torn_last_write_yields_the_last_or_previous_durable_value(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[str, int]],
    tear_at: float,
    crash: bool,
    data: st.DataObject,
) -> None:
    """Every write but the last completes; the last one may be torn anywhere (a prefix of the new record over
    whatever the slot held) or have a byte flipped. Reopening yields the last value if its record survived
    complete, the previous one otherwise, and never anything else."""
    data_dir = tmp_path_factory.mktemp("slots")
    persisted = OldFilePersistedState(data_dir, "c")
    durable = [(persisted.current_term, persisted.last_accepted_state)]
    version = 0
    before: dict[Path, bytes] = {}
    for index, (kind, value) in enumerate(writes):
        if index == len(writes) - 1:
            acknowledge(persisted)  # every write but the last was acknowledged, so the history shows it
        before = {p: p.read_bytes() for p in persisted.paths}
        if kind == "term":
            persisted.set_current_term(persisted.current_term + value)
        else:
            version += 1
            persisted.set_last_accepted_state(published(version, kv={"k": "x" * value}))
        durable.append((persisted.current_term, persisted.last_accepted_state))
    persisted.close()
    target = newest_slot(data_dir)
    record = target.read_bytes()
    if crash:
        if data.draw(st.booleans(), label="flip instead of tear"):
            torn = flip(record, data.draw(st.integers(0, len(record) - 1), label="flipped byte"))
        else:
            cut = int(tear_at * len(record))
            torn = record[:cut] + before[target][cut:]
        target.write_bytes(torn)
        survived = torn.startswith(record)
    else:
        survived = True
    again = FilePersistedState(data_dir, "c", read_history=read_history_summary)
    try:
        assert (again.current_term, again.last_accepted_state) == durable[-1 if survived else -2]
    finally:
        again.close()


# -- Every disk state a crash, a full disk, an operator's mistake or a restore can leave (docs/sidecar.md) -------


def used_node(data_dir: Path, writes: int = 3) -> FilePersistedState:
    """A node that voted and acknowledged states, each write acknowledged (so in its history); closed."""
    persisted = OldFilePersistedState(data_dir, "c")
    for step in range(writes):
        if step % 2:
            persisted.set_current_term(step + 1)
        else:
            persisted.set_last_accepted_state(published(step + 1, term=persisted.current_term))
        acknowledge(persisted)
    persisted.close()
    return persisted


def test_a_crash_before_the_first_node_id_starts_fresh(tmp_path: Path) -> None:
    """The first start writes slot 0, then the node id: a crash between them leaves only the initial record,
    which holds no vote and no ack, so starting afresh is safe."""
    first = OldFilePersistedState(tmp_path, "c")
    first.close()
    (tmp_path / NODE_ID_FILE).unlink()
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (0, initial_state("c"))
    assert (tmp_path / NODE_ID_FILE).exists()
    again.close()


@pytest.mark.parametrize("how", ["deleted", "emptied"])
@pytest.mark.parametrize("left", ["node id and history", "node id only", "history only", "hooks only"])
def test_both_slots_gone_with_signs_of_use_refuses(tmp_path: Path, how: str, left: str) -> None:
    """Issue: both slots deleted or zero bytes while the node id and history remained started a new node."""
    node = used_node(tmp_path)
    for name in SLOT_FILES:
        if how == "deleted":
            (tmp_path / name).unlink()
        else:
            (tmp_path / name).write_bytes(b"")
    if left in ("node id only", "hooks only"):
        for segment in (tmp_path / HISTORY_DIR).iterdir():
            segment.unlink()
    if left in ("history only", "hooks only"):
        (tmp_path / NODE_ID_FILE).unlink()
    if left == "hooks only":
        atomic_write(tmp_path / HOOKS_FILE, b"{}")
    before = sorted(p.name for p in tmp_path.iterdir())
    message = refusal(tmp_path)
    assert "refusing" in message
    if "node id" in left:
        assert f"[{tmp_path / NODE_ID_FILE}] holds node id [{node.node_id}]" in message
    if "history" in left:
        assert f"[{tmp_path / HISTORY_DIR}] holds 6 events (newest term 2" in message
    if left == "hooks only":
        assert f"[{tmp_path / HOOKS_FILE}] holds registered hooks" in message
    if how == "emptied":
        assert all(f"[{tmp_path / name}] holds no record" in message for name in SLOT_FILES)
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a refusal must not write anything"


@pytest.mark.parametrize("damage", ["deleted", "emptied", "flipped"])
def test_newest_slot_lost_after_an_acknowledged_write_refuses(tmp_path: Path, damage: str) -> None:
    """Issue: a missing or empty newest slot loaded the older slot silently and lost an acknowledged write."""
    used_node(tmp_path)
    newest = newest_slot(tmp_path)
    if damage == "deleted":
        newest.unlink()
    elif damage == "emptied":
        newest.write_bytes(b"")
    else:
        newest.write_bytes(flip(newest.read_bytes(), 70))
    message = refusal(tmp_path)
    assert "acknowledged write was lost" in message
    assert str(newest) in message and "newest term 2, newest accepted state term 2 version 3" in message


@pytest.mark.parametrize("damage", ["deleted", "emptied", "flipped"])
def test_newest_slot_lost_before_its_ack_loads_the_older_record(tmp_path: Path, damage: str) -> None:
    """A crash between the durable write and the history event (so before the Join or ack): nothing the node
    acknowledged is lost, so the older record is the right one."""
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(2)
    acknowledge(persisted)
    persisted.set_last_accepted_state(published(1, term=2))  # durable, never acknowledged
    persisted.close()
    newest = newest_slot(tmp_path)
    if damage == "deleted":
        newest.unlink()
    elif damage == "emptied":
        newest.write_bytes(b"")
    else:
        newest.write_bytes(flip(newest.read_bytes(), 70))
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (2, initial_state("c"))
    again.close()


@pytest.mark.parametrize("damage", ["deleted", "emptied"])
def test_one_slot_lost_and_no_history_refuses(tmp_path: Path, damage: str) -> None:
    """The node never deletes or empties a slot; without a history nothing shows which slot was the newer, so
    nothing proves that no ack was lost."""
    used_node(tmp_path)
    shutil.rmtree(tmp_path / HISTORY_DIR)
    slot = older_slot(tmp_path)
    if damage == "deleted":
        slot.unlink()
    else:
        slot.write_bytes(b"")
    message = refusal(tmp_path)
    assert str(slot) in message and f"[{tmp_path / HISTORY_DIR}] is empty" in message


def test_a_torn_write_right_after_bootstrap_loads_without_any_history(tmp_path: Path) -> None:
    """Bootstrapping writes a record but no history event; a crash tearing the next write must not stop the
    node: a damaged slot beside a valid one is what a crash leaves."""
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_last_accepted_state(bootstrapped())
    persisted.set_current_term(1)  # torn by a crash
    persisted.close()
    torn = newest_slot(tmp_path)
    torn.write_bytes(torn.read_bytes()[:-7])
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (0, bootstrapped())
    assert any(str(torn) in warning for warning in again.warnings)
    again.close()


def test_history_deleted_but_both_slots_intact_loads_the_newest(tmp_path: Path) -> None:
    """Writes alternate and never touch the newest record, so two valid slots one generation apart hold the
    last durable write: the history is not needed."""
    node = used_node(tmp_path)
    shutil.rmtree(tmp_path / HISTORY_DIR)
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert (again.current_term, again.last_accepted_state) == (node.current_term, node.last_accepted_state)
    again.close()


def test_damaged_history_is_a_warning_when_both_slots_agree_and_a_refusal_otherwise(tmp_path: Path) -> None:
    node = used_node(tmp_path)
    segment = next((tmp_path / HISTORY_DIR).iterdir())
    lines = segment.read_bytes().split(b"\n")
    segment.write_bytes(b"\n".join([lines[0], b"#garbage#", *lines[1:]]))
    again = OldFilePersistedState(tmp_path, "c")
    assert again.current_term == node.current_term
    again.close()
    older_slot(tmp_path).write_bytes(b"")
    message = refusal(tmp_path)
    assert f"[{tmp_path / HISTORY_DIR}] is damaged (unreadable [{segment}] line 2)" in message


def test_one_slot_replaced_by_an_older_copy_refuses(tmp_path: Path) -> None:
    """Generations of the two slots always differ by one; an older copy put back breaks that."""
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(1)
    backup = {p: p.read_bytes() for p in persisted.paths}
    for term in range(2, 6):
        persisted.set_current_term(term)
    persisted.close()
    older = older_slot(tmp_path)
    older.write_bytes(backup[older] if backup[older] else backup[newest_slot(tmp_path)])
    message = refusal(tmp_path)
    assert "replaced by an older copy" in message


def test_both_slots_restored_from_an_older_copy_refuses_when_the_history_is_newer(tmp_path: Path) -> None:
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(1)
    acknowledge(persisted)
    persisted.set_last_accepted_state(published(1, term=1))
    acknowledge(persisted)
    backup = {p: p.read_bytes() for p in persisted.paths}
    persisted.set_current_term(2)
    acknowledge(persisted)
    persisted.set_last_accepted_state(published(2, term=2))
    acknowledge(persisted)
    persisted.close()
    for path, data in backup.items():
        path.write_bytes(data)
    message = refusal(tmp_path)
    assert "acknowledged write was lost" in message and "newest term 2" in message


@pytest.mark.parametrize("copied", ["one slot", "both slots"])
def test_a_slot_copied_from_another_node_refuses(tmp_path: Path, copied: str) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    mine = used_node(ours, writes=2)
    other = used_node(theirs, writes=2)
    names = SLOT_FILES if copied == "both slots" else [newest_slot(theirs).name]
    for name in names:
        (ours / name).write_bytes((theirs / name).read_bytes())
    message = refusal(ours)
    assert f"holds the state of node [{other.node_id}]" in message and f"node [{mine.node_id}]" in message


def test_a_history_copied_from_another_node_refuses(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    used_node(ours)
    other = used_node(theirs)
    shutil.rmtree(ours / HISTORY_DIR)
    shutil.copytree(theirs / HISTORY_DIR, ours / HISTORY_DIR)
    message = refusal(ours)
    assert f"holds events of node ['{other.node_id}']" in message


def test_node_id_file_replaced_by_another_nodes_refuses(tmp_path: Path) -> None:
    used_node(tmp_path)
    atomic_write(tmp_path / NODE_ID_FILE, b"ffff0000")
    message = refusal(tmp_path)
    assert "says this is node [ffff0000]" in message


def test_records_of_earlier_versions_without_a_node_id_still_load(tmp_path: Path) -> None:
    given_node_id(tmp_path)
    payload = msgspec.json.encode(
        {"current_term": 4, "last_accepted_state": published(2, term=4)}, enc_hook=ENCODE_HOOK
    )
    (tmp_path / SLOT_FILES[0]).write_bytes(encode_slot_record(1, payload))
    persisted = OldFilePersistedState(tmp_path, "c")
    assert (persisted.current_term, persisted.last_accepted_state) == (4, published(2, term=4))
    persisted.set_current_term(5)  # from now on, the record names its node
    persisted.close()
    assert b'"node_id":"0123abcd"' in newest_slot(tmp_path).read_bytes()


# -- exit code 3 from a real process ---------------------------------------------------------------------------


def start_node(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """Start a node on this data directory; it must refuse before it binds any port."""
    return subprocess.run(
        [
            *(sys.executable, "-m", "coordinated.cli", "node", "--name", "n1", "--data-dir", str(data_dir)),
            *("--http-port", "1", "--transport-port", "2", "-E", "cluster.name=c"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.usefixtures("processes")
@pytest.mark.parametrize("fault", ["both slots emptied", "newest slot deleted", "slot of another node"])
def test_the_node_process_refuses_with_exit_3(tmp_path: Path, fault: str) -> None:
    data_dir = tmp_path / "n"
    data_dir.mkdir()
    node = used_node(data_dir)
    if fault == "both slots emptied":
        for name in SLOT_FILES:
            (data_dir / name).write_bytes(b"")
        expected = [str(data_dir / name) for name in SLOT_FILES] + [str(data_dir / NODE_ID_FILE), "holds 6 events"]
    elif fault == "newest slot deleted":
        newest = newest_slot(data_dir)
        newest.unlink()
        expected = [str(newest) + "] is missing", "acknowledged write was lost"]
    else:
        (tmp_path / "m").mkdir()
        other = used_node(tmp_path / "m")
        for name in SLOT_FILES:
            (data_dir / name).write_bytes((tmp_path / "m" / name).read_bytes())
        expected = [f"node [{other.node_id}]", f"node [{node.node_id}]"]
    process = start_node(data_dir)
    assert process.returncode == 3, process.stderr
    assert "refusing to start" in process.stderr and "Traceback" not in process.stderr
    for text in expected:
        assert text in process.stderr


def test_a_state_that_a_failed_write_left_on_disk_is_recorded_before_the_node_uses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync error after the data reached the disk: the node never acknowledged that state, but loads it
    after a restart. It records it first, so that a state built on it names a parent some history holds."""
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(1)
    persisted.set_last_accepted_state(published(1))
    acknowledge(persisted)

    def fail(*args: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr("os.fdatasync", fail)
    with pytest.raises(OSError):
        persisted.set_last_accepted_state(published(2))
    monkeypatch.undo()
    persisted.close()
    config = build_config(
        name="n1",
        data_dir=str(tmp_path),
        host="127.0.0.1",
        http_port=1,
        transport_port=2,
        overrides={"cluster.name": "c"},
    )
    node = Node(config)
    try:
        assert node.store.persisted.last_accepted_state == published(2)
        events = [json.loads(line) for line in read_events_after(tmp_path / HISTORY_DIR, 0)]
        assert [(e["type"], e["version"], e["state_uuid"], e["parent_uuid"]) for e in events[-1:]] == [
            ("accepted", 2, "s2", published(2).parent_uuid)
        ]
        assert events[-1]["node"] == node.node_id and events[-1]["reason"] == "loaded at startup"
    finally:
        node.close_unstarted()
    again = Node(config)  # the history now agrees with the record: nothing more is recorded
    try:
        assert len(list(read_events_after(tmp_path / HISTORY_DIR, 0))) == len(events)
    finally:
        again.close_unstarted()


def test_a_lost_commit_write_loads_the_same_state_without_its_commit(tmp_path: Path) -> None:
    """Marking the accepted state committed writes a record but no history event: losing that record is the
    same as a crash just before the commit, so the node loads the accepted state and does not refuse."""
    persisted = OldFilePersistedState(tmp_path, "c")
    persisted.set_current_term(1)
    accepted = published(1).replace(cluster_uuid_committed=False)
    persisted.set_last_accepted_state(accepted)
    acknowledge(persisted)
    persisted.set_last_accepted_state(published(1))  # the commit
    persisted.close()
    newest_slot(tmp_path).write_bytes(b"")
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert again.last_accepted_state == accepted
    again.close()


def test_a_data_dir_written_before_keys_had_versions_loads_and_upgrades(tmp_path: Path) -> None:
    """The previous release encoded the state without `kv_versions`: its records load, the keys read with
    the legacy version on every node alike, and the next write persists the new encoding."""
    persisted = OldFilePersistedState(tmp_path, "c")
    state = published(3, kv={"k": "v", "locks/a": 1})
    persisted.set_last_accepted_state(state)
    persisted.close()
    for slot in SLOT_FILES:
        data = (tmp_path / slot).read_bytes()
        if not data:
            continue
        generation = header(tmp_path / slot)[1]
        payload = data[SLOT_HEADER_SIZE:]
        old_payload = payload.replace(b',"kv_versions":{}', b"")
        assert old_payload != payload and b"kv_versions" not in old_payload
        (tmp_path / slot).write_bytes(encode_slot_record(generation, old_payload))
    again = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    loaded = again.last_accepted_state
    assert loaded == state and loaded.key_version("locks/a") == LEGACY_KEY_VERSION
    newer = loaded.replace(version=4, state_uuid="s4", parent_uuid="s3", kv_versions={"k": KeyVersion(4, 4)})
    again.set_last_accepted_state(newer)
    again.close()
    final = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert final.last_accepted_state == newer and final.last_accepted_state.key_version("k") == KeyVersion(4, 4)
    final.close()
