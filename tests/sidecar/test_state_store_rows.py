"""What one write of the SQLite store touches: the `state` row only when the state's non-key parts change, no
row read back for a key it replaces, and the database formats it reads (format 1, before the version and uuids
moved into the `coordination` row)."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import msgspec
import pytest
from test_sidecar_storage import state_with

from coordinated.coordination.state import ClusterState, DiscoveryNode, KeyVersion, encode_state
from coordinated.sidecar.persistence import DataDirError, FilePersistedState
from coordinated.sidecar.state_store import DB_FILE, StateStore, StoreCorrupt, connect, read_record


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
    persisted = FilePersistedState(data_dir, "c")
    persisted.set_last_accepted_state(state)
    persisted.close()


def loaded(data_dir: Path) -> ClusterState:
    persisted = FilePersistedState(data_dir, "c")
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
    persisted = FilePersistedState(tmp_path, "c")
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


def test_a_format_1_database_is_read_and_its_first_write_makes_it_format_2(tmp_path: Path) -> None:
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
    assert msgspec.json.decode(meta_rows(tmp_path)["coordination"])["format"] == "2"
    assert loaded(tmp_path) == second


def test_an_unknown_format_refuses_naming_it(tmp_path: Path) -> None:
    write(tmp_path, state_with(1, {"a": 1}))
    coordination = msgspec.json.decode(meta_rows(tmp_path)["coordination"])
    put_meta_row(tmp_path, "coordination", msgspec.json.encode({**coordination, "format": "3"}))
    conn = connect(tmp_path / DB_FILE, read_only=True)
    try:
        with pytest.raises(StoreCorrupt, match=r"unknown format \[3\]"):
            read_record(conn)
    finally:
        conn.close()
    with pytest.raises(DataDirError, match=r"unknown format \[3\]"):
        FilePersistedState(tmp_path, "c")
