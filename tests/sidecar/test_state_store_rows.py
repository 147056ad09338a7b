"""What one write of the SQLite store touches: the `state` row only when the state's non-key parts change, no
row read back for a key it replaces, one row per session changed, and the database formats it reads (format
1, before the version and uuids moved into the `coordination` row; format 2, before the sessions had rows)."""

from __future__ import annotations

import re
import sqlite3
import zlib
from pathlib import Path

import msgspec
import pytest
from test_sidecar_storage import state_with

from coordinated.coordination.formats import label
from coordinated.coordination.security import KeyGrant, RoleDescriptor, SecurityMetadata
from coordinated.coordination.state import ClusterState, DiscoveryNode, KeyVersion, Session, encode_state
from coordinated.release import installed_release
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.storage.persistence import DataDirError, FilePersistedState
from coordinated.sidecar.storage.state_store import (
    DB_FILE,
    FORMAT,
    StateStore,
    StoreNewer,
    connect,
    read_record,
)


def meta_rows(data_dir: Path) -> dict[str, bytes]:
    conn = connect(data_dir / DB_FILE, read_only=True)
    try:
        return {name: value for name, value in conn.execute("SELECT name, value FROM meta")}
    finally:
        conn.close()


def put_meta_row(data_dir: Path, name: str, value: bytes) -> None:
    conn = sqlite3.connect(data_dir / DB_FILE, isolation_level=None)
    try:
        crc = zlib.crc32(value, zlib.crc32(name.encode()))
        conn.execute("INSERT OR REPLACE INTO meta (name, value, crc) VALUES (?, ?, ?)", (name, value, crc))
    finally:
        conn.close()


def next_state(state: ClusterState, **kv: object) -> ClusterState:
    version = state.version + 1
    return state.replace(
        version=version,
        state_uuid=f"s{version}",
        parent_uuid=state.state_uuid,
        kv={**state.kv, **kv},
        kv_versions={**state.kv_versions, **{key: KeyVersion(version, 1) for key in kv}},
    )


def write(data_dir: Path, state: ClusterState) -> None:
    persisted = FilePersistedState(data_dir, "c", read_history=read_history_summary)
    persisted.set_last_accepted_state(state)
    persisted.close()


def loaded(data_dir: Path) -> ClusterState:
    persisted = FilePersistedState(data_dir, "c", read_history=read_history_summary)
    try:
        return persisted.last_accepted_state
    finally:
        persisted.close()


def test_the_state_row_is_rewritten_only_when_a_non_key_part_changes(tmp_path: Path) -> None:
    first = state_with(1, {"a": 1, "b": 2})
    write(tmp_path, first)
    row_before = meta_rows(tmp_path)["state"]

    # A write of keys: new version, state uuid and parent uuid, and no change to the `state` row.
    second = next_state(first, a=10, c=3)
    write(tmp_path, second)
    assert meta_rows(tmp_path)["state"] == row_before
    assert loaded(tmp_path) == second

    # A change of the nodes is written to it.
    third = next_state(second).replace(nodes={**second.nodes, "d": DiscoveryNode("d", "node-d", "127.0.0.1:9400")})
    write(tmp_path, third)
    assert meta_rows(tmp_path)["state"] != row_before
    assert loaded(tmp_path) == third


def test_a_write_of_existing_keys_reads_no_row_back(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    first = state_with(1, {f"k{i}": i for i in range(50)})
    persisted.set_last_accepted_state(first)
    statements: list[str] = []
    conn = persisted._open_store().conn
    conn.set_trace_callback(statements.append)
    second = next_state(first, k1=-1, k2=-2, k49=None)
    persisted.set_last_accepted_state(second)
    conn.set_trace_callback(None)
    persisted.close()
    assert statements, "the trace saw no statement"
    assert not [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")], statements
    assert loaded(tmp_path) == second


def test_a_store_without_the_rows_crcs_reads_them_back_and_keeps_a_correct_sum(tmp_path: Path) -> None:
    first = state_with(1, {f"k{i}": i for i in range(20)})
    write(tmp_path, first)
    conn = connect(tmp_path / DB_FILE)
    record = read_record(conn)
    store = StateStore(conn, msgspec.structs.replace(record, key_crcs={}))
    second = next_state(record.state, k3=-3, k7=-7, new=1)
    store.write(record.current_term, second)
    store.close()
    conn = connect(tmp_path / DB_FILE, read_only=True)
    try:
        assert read_record(conn).state == second  # raises StoreCorrupt if the CRC sum went wrong
    finally:
        conn.close()


def test_a_format_1_database_is_read_and_its_first_write_makes_it_the_current_format(tmp_path: Path) -> None:
    """Format 1 kept the version and uuids in the `state` row and nothing of them in `coordination`."""
    first = state_with(4, {"a": 1}).replace(parent_uuid="s3")
    write(tmp_path, first)
    coordination = msgspec.json.decode(meta_rows(tmp_path)["coordination"])
    for name in ("version", "state_uuid", "parent_uuid"):
        coordination.pop(name)
    put_meta_row(tmp_path, "coordination", msgspec.json.encode({**coordination, "format": "1"}))
    put_meta_row(tmp_path, "state", encode_state(first.replace(kv={}, kv_versions={})))
    assert loaded(tmp_path) == first

    second = next_state(first, b=2)
    write(tmp_path, second)
    assert msgspec.json.decode(meta_rows(tmp_path)["coordination"])["format"] == FORMAT
    assert loaded(tmp_path) == second


def with_sessions(state: ClusterState, count: int) -> ClusterState:
    """`count` TTL sessions, each with one ephemeral key."""
    version = state.version + 1
    sessions = {f"session-{i:05d}": Session(10_000, None, version) for i in range(count)}
    keys = {f"eph/{i:05d}": {"holder": i} for i in range(count)}
    return state.replace(
        version=version,
        state_uuid=f"s{version}",
        parent_uuid=state.state_uuid,
        kv={**state.kv, **keys},
        kv_versions={**state.kv_versions, **{key: KeyVersion(version, version) for key in keys}},
        sessions=sessions,
        kv_sessions={key: f"session-{i:05d}" for i, key in enumerate(keys)},
    )


def test_a_session_change_writes_its_own_row_whatever_the_number_of_sessions(tmp_path: Path) -> None:
    """Before format 3 the sessions were part of the `state` row: about 1 MB rewritten per session change
    with 10,000 sessions."""
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    many = with_sessions(state_with(1, {"a": 1}), 10_000)
    persisted.set_last_accepted_state(many)
    state_row = meta_rows_of(persisted)["state"]
    version = many.version + 1
    created = many.replace(
        version=version,
        state_uuid=f"s{version}",
        parent_uuid=many.state_uuid,
        kv={**many.kv, "eph/new": 1},
        kv_versions={**many.kv_versions, "eph/new": KeyVersion(version, version)},
        sessions={**many.sessions, "new": Session(10_000, None, version)},
        kv_sessions={**many.kv_sessions, "eph/new": "new"},
    )
    checkpointed = created.replace(
        version=version + 1,
        state_uuid=f"s{version + 1}",
        parent_uuid=created.state_uuid,
        sessions={**created.sessions, "session-00007": Session(10_000, None, many.version, remaining_ms=4_000)},
    )
    ended = checkpointed.replace(
        version=version + 2,
        state_uuid=f"s{version + 2}",
        parent_uuid=checkpointed.state_uuid,
        kv={key: value for key, value in checkpointed.kv.items() if key != "eph/00003"},
        kv_versions={key: value for key, value in checkpointed.kv_versions.items() if key != "eph/00003"},
        sessions={key: value for key, value in checkpointed.sessions.items() if key != "session-00003"},
        kv_sessions={key: value for key, value in checkpointed.kv_sessions.items() if key != "eph/00003"},
    )
    for state in (created, checkpointed, ended):
        before = persisted.bytes_written
        persisted.set_last_accepted_state(state)
        assert persisted.bytes_written - before < 1_000, persisted.bytes_written - before
    assert meta_rows_of(persisted)["state"] == state_row
    persisted.close()
    assert loaded(tmp_path) == ended


def meta_rows_of(persisted: FilePersistedState) -> dict[str, bytes]:
    conn = persisted._open_store().conn
    return {name: value for name, value in conn.execute("SELECT name, value FROM meta")}


def test_a_format_2_database_keeps_its_sessions_and_its_first_write_gives_them_rows(tmp_path: Path) -> None:
    """Format 2 kept the sessions and the ephemeral keys' sessions in the `state` row."""
    first = with_sessions(state_with(4, {"a": 1}), 3)
    write(tmp_path, first)
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    conn.execute("DROP TABLE sessions")
    for key, value in first.kv.items():
        row = msgspec.json.encode([value, first.kv_versions[key]])  # format 2: no session in the key row
        conn.execute(
            "UPDATE kv SET value = ?, crc = ? WHERE key = ?", (row, zlib.crc32(row, zlib.crc32(key.encode())), key)
        )
    crc_sum = sum(crc for (crc,) in conn.execute("SELECT crc FROM kv")) & ((1 << 64) - 1)
    conn.close()
    coordination = msgspec.json.decode(meta_rows(tmp_path)["coordination"])
    coordination = {k: v for k, v in coordination.items() if not k.startswith("sessions_")}
    put_meta_row(tmp_path, "coordination", msgspec.json.encode({**coordination, "format": "2", "kv_crc_sum": crc_sum}))
    put_meta_row(
        tmp_path,
        "state",
        encode_state(first.replace(kv={}, kv_versions={}, version=0, state_uuid="", parent_uuid=None)),
    )
    assert loaded(tmp_path) == first

    second = next_state(first, b=2)
    write(tmp_path, second)
    assert msgspec.json.decode(meta_rows(tmp_path)["coordination"])["format"] == FORMAT
    assert "session-00001" not in meta_rows(tmp_path)["state"].decode()
    assert loaded(tmp_path) == second


@pytest.mark.parametrize(
    ("damage", "refusal"),
    [
        (
            "DELETE FROM sessions WHERE id = 'session-00002'",
            r"the rows of table \[sessions\] do not match their summary",
        ),
        (
            "UPDATE sessions SET value = CAST(REPLACE(CAST(value AS TEXT), '10000', '99999') AS BLOB)",
            r"checksum mismatch in the row of \[session-00000\] in table \[sessions\]",
        ),
    ],
)
def test_a_lost_or_changed_session_row_is_caught(tmp_path: Path, damage: str, refusal: str) -> None:
    write(tmp_path, with_sessions(state_with(1, {"a": 1}), 5))
    conn = sqlite3.connect(tmp_path / DB_FILE, isolation_level=None)
    conn.execute(damage)
    conn.close()
    with pytest.raises(DataDirError, match=refusal):
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)


def database_bytes(data_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(data_dir.iterdir()) if path.name.startswith(DB_FILE)}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (
            label(5, "0.3.0", "0.3.0"),
            "of format 5, written by coordinated 0.3.0; this release \\({release}\\) reads "
            "formats up to 4. Nothing was changed, and the file is not damaged: run coordinated 0.3.0 or later on it",
        ),
        ("9", "of format 9, written by a release newer than {release}"),
    ],
)
def test_a_newer_format_is_refused_naming_it_and_the_release_that_wrote_it_and_nothing_is_changed(
    tmp_path: Path, value: str, named: str
) -> None:
    write(tmp_path, state_with(1, {"a": 1}))
    coordination = msgspec.json.decode(meta_rows(tmp_path)["coordination"])
    # A newer release may add fields this one does not know: the format is read before anything else.
    put_meta_row(tmp_path, "coordination", msgspec.json.encode({**coordination, "format": value, "more": 1}))
    before = database_bytes(tmp_path)
    named = named.format(release=re.escape(installed_release()))
    conn = connect(tmp_path / DB_FILE, read_only=True)
    try:
        with pytest.raises(StoreNewer, match=named):
            read_record(conn)
    finally:
        conn.close()
    with pytest.raises(DataDirError, match=re.escape(f"[{tmp_path / DB_FILE}] is ") + named):
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    after = database_bytes(tmp_path)
    # Every file as it was; reading may add only SQLite's own shared-memory index and an empty log.
    assert {name: after[name] for name in before} == before
    assert set(after) - set(before) <= {DB_FILE + "-shm", DB_FILE + "-wal"}
    assert after.get(DB_FILE + "-wal", b"") == before.get(DB_FILE + "-wal", b"")


def test_a_format_that_is_not_one_is_corrupt(tmp_path: Path) -> None:
    write(tmp_path, state_with(1, {"a": 1}))
    coordination = msgspec.json.decode(meta_rows(tmp_path)["coordination"])
    put_meta_row(tmp_path, "coordination", msgspec.json.encode({**coordination, "format": "x"}))
    with pytest.raises(DataDirError, match=r"is of format \[x\], which this release"):
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)


def test_access_control_is_stored_whole_in_the_gated_format_and_a_state_without_it_as_before(tmp_path: Path) -> None:
    """Each key's writer is a fourth element of its row, and a session's owner and prefix are fields of its row,
    only with access control on (`security` set): such a state is written in the gated format, which release
    0.1.0 refuses to load rather than dropping them. A state without access control keeps format 3's rows."""
    before = state_with(1, {"a": 1})
    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    write(tmp_path / "off", before)
    conn = connect(tmp_path / "off" / DB_FILE, read_only=True)
    rows = [msgspec.json.decode(value) for (value,) in conn.execute("SELECT value FROM kv")]
    conn.close()
    assert rows == [[1, [1, 1], None]] and b'"format":"3"' in meta_rows(tmp_path / "off")["coordination"]
    security = SecurityMetadata(roles={"r": RoleDescriptor((KeyGrant(("app/",), ("read",)),))})
    on = next_state(before, **{"app/x": 2}).replace(
        security=security,
        kv_writers={"app/x": "app-a"},
        sessions={"s1": Session(10_000, None, 2, owner="app-a", prefix="app/")},
    )
    write(tmp_path / "on", on)
    back = loaded(tmp_path / "on")
    assert back.security == security and dict(back.kv_writers) == {"app/x": "app-a"}
    assert back.sessions["s1"].owner == "app-a" and back.sessions["s1"].prefix == "app/"
    assert b'"format":"3"' not in meta_rows(tmp_path / "on")["coordination"]  # the gated format's label
