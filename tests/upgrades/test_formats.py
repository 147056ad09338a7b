"""Files written by a newer release: this release refuses each of them (the node with exit 3), naming the format
and the release that wrote it, and changes nothing; the forms it writes itself say which release wrote them."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import zlib
from pathlib import Path

import msgspec
import pytest

from coordinated.coordination.formats import label, newer_format_problem, parse
from coordinated.coordination.history_format import newer_segment_problem
from coordinated.coordination.security import Quota, SecurityMetadata
from coordinated.coordination.state import initial_state
from coordinated.release import installed_release
from coordinated.sidecar.cli import main as node_main
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.features.snapshots import (
    FORMAT,
    SnapshotNewer,
    decode_snapshot,
    encode_snapshot,
    snapshot_of,
)
from coordinated.sidecar.storage.persistence import LOCK_FILE, FilePersistedState
from coordinated.sidecar.storage.state_store import DB_FILE, format_of
from coordinated.tools.localcluster import free_ports

RELEASE = installed_release()
NEWER = "0.3.0"


def used_data_dir(path: Path) -> Path:
    """A data directory as a stopped node leaves it: its store, node id, lock file and history."""
    path.mkdir(parents=True)
    FilePersistedState(path, "c", read_history=read_history_summary).close()
    (path / LOCK_FILE).touch()
    (path / "history").mkdir(exist_ok=True)
    return path


def contents(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def unchanged(before: dict[str, bytes], after: dict[str, bytes]) -> bool:
    """Every file as it was; reading the store may add SQLite's own index and an empty log, nothing else."""
    added = set(after) - set(before)
    return (
        {name: after.get(name) for name in before} == before
        and added <= {DB_FILE + "-shm", DB_FILE + "-wal"}
        and after.get(DB_FILE + "-wal", b"") == b""
    )


def run_node(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`coordinated node` in this process: it refuses before it listens (the test's timeout ends it if not)."""
    http_port, transport_port = free_ports(2)
    argv = ["--name", "n1", "--data-dir", str(data_dir), "--http-port", str(http_port)]
    code = node_main([*argv, "--transport-port", str(transport_port)])
    return code, capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_history_segment_of_a_newer_format_stops_the_node_with_exit_3_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = used_data_dir(tmp_path / "data")
    segment = data_dir / "history" / "segment-000000000001.jsonl"
    segment.write_bytes(b'{"format":3,"release":"0.3.0","seq":1,"ts":1.0,"node":"n","type":"term","term":1}\n')
    before = contents(data_dir)
    code, err = run_node(data_dir, capsys)
    assert code == 3
    assert (
        f"[{data_dir / 'history'}] is of format 3, written by coordinated {NEWER}; this release ({RELEASE}) reads "
        f"formats up to 2. Nothing was changed, and the file is not damaged: run coordinated {NEWER} or later on it"
    ).replace(f"[{data_dir / 'history'}]", f"[{segment}]") in err
    assert unchanged(before, contents(data_dir))


@pytest.mark.timeout(60)
def test_a_store_of_a_newer_format_stops_the_node_with_exit_3_naming_the_release_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = used_data_dir(tmp_path / "data")
    conn = sqlite3.connect(data_dir / DB_FILE, isolation_level=None)
    (value,) = conn.execute("SELECT value FROM meta WHERE name = 'coordination'").fetchone()
    row = {**json.loads(value), "format": label(5, NEWER, NEWER), "a_field_of_format_5": []}
    raw = msgspec.json.encode(row)
    conn.execute(
        "UPDATE meta SET value = ?, crc = ? WHERE name = 'coordination'",
        (raw, zlib.crc32(raw, zlib.crc32(b"coordination"))),
    )
    conn.close()
    before = contents(data_dir)
    code, err = run_node(data_dir, capsys)
    assert code == 3
    assert f"[{data_dir / DB_FILE}] is of format 5, written by coordinated {NEWER}; this release ({RELEASE})" in err
    assert f"run coordinated {NEWER} or later on it" in err and "corrupt" not in err
    assert unchanged(before, contents(data_dir))


def test_the_store_is_written_in_the_previous_releases_format_until_the_state_carries_a_gated_field() -> None:
    state = initial_state("c")
    assert format_of(state) == "3"
    moved = format_of(state.replace(node_versions={}))
    assert parse(moved) == (4, RELEASE, "0.2.0")
    # What release 0.1.0 prints of it when it refuses the store: the release to run instead.
    assert moved.startswith(f"4 (written by coordinated {RELEASE}; release 0.2.0 or later reads it: ")


def test_a_snapshot_of_a_newer_format_is_refused_naming_the_release_that_wrote_it() -> None:
    snapshot = snapshot_of(initial_state("c").replace(version=3), "s1", 1, 2)
    assert snapshot.release == RELEASE and snapshot.format == 1
    assert decode_snapshot(encode_snapshot(snapshot), "repo/snap-s1.dat") == snapshot
    newer = msgspec.structs.replace(snapshot, format=FORMAT + 1, release=NEWER)
    blob = encode_snapshot(newer)
    # A newer format may add what this release cannot decode: the format is read first.
    _, _, payload = blob.partition(b"\n")
    doc = {**json.loads(payload), "roles": {"admin": ["*"]}, "kv": "of another shape"}
    payload = json.dumps(doc).encode()
    blob = b"COORDINATED-SNAPSHOT1 %s %d\n%s" % (hashlib.sha256(payload).hexdigest().encode(), len(payload), payload)
    with pytest.raises(
        SnapshotNewer,
        match=re.escape(
            f"snapshot file [repo/snap-s1.dat] is of format {FORMAT + 1}, written by coordinated {NEWER}; this release "
            f"({RELEASE}) reads formats up to {FORMAT}. Nothing was changed, and the file is not damaged: run "
            f"coordinated {NEWER} or later"
        ),
    ):
        decode_snapshot(blob, "repo/snap-s1.dat")


def test_format_values_and_their_refusals() -> None:
    assert parse(3) == (3, None, None) and parse("3") == (3, None, None) and parse(True) == (None, None, None)
    assert newer_format_problem("f", 2, 2, RELEASE) is None
    assert newer_format_problem("f", "x", 2, RELEASE) == (
        f"f is of format [x], which this release ({RELEASE}) does not know (written by a release newer than "
        f"{RELEASE}?); nothing was changed"
    )
    line = b'{"format":3,"release":"0.3.0","seq":1}\n'
    assert newer_segment_problem(line, "seg", RELEASE) is not None
    assert newer_segment_problem(b'{"format":2,"seq":1}\n', "seg", RELEASE) is None
    # A newer number with no writer named is damage (format_problem names it; the node skips it as such).
    assert newer_segment_problem(b'{"format":3,"seq":1}\n', "seg", RELEASE) is None
    assert newer_segment_problem(b'{"cluster_uuid":"u","format":9}\n', "seg", RELEASE) is None  # format 1: no head


def test_a_snapshot_holds_roles_mappings_and_quotas_in_format_2_once_access_control_is_on() -> None:
    """Release 0.1.0 reads format 1 and would drop a snapshot's roles: a snapshot holds them in format 2 (which it
    refuses), and only once access control is on; before, a snapshot is written in format 1 as before."""
    off = snapshot_of(initial_state("c").replace(version=3), "s1", 1, 2)
    assert off.format == 1 and b"security" not in encode_snapshot(off)
    security = SecurityMetadata(quotas={"q": Quota("app/", max_keys=1)})
    on = snapshot_of(initial_state("c").replace(version=3, security=security), "s2", 1, 2)
    assert on.format == FORMAT == 2 and decode_snapshot(encode_snapshot(on), "repo/snap-s2.dat").security == security
