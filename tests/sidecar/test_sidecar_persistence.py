from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from coordinated.coordination.state import ClusterState, VotingConfiguration, initial_state
from coordinated.sidecar.persistence import (
    STATE_FILE,
    DataDirError,
    DataDirLock,
    FilePersistedState,
    load_or_create_node_id,
)


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


def test_round_trip(tmp_path: Path) -> None:
    persisted = FilePersistedState(tmp_path, "c")
    assert persisted.current_term == 0
    state = bootstrapped()
    persisted.set_last_accepted_state(state)
    persisted.set_current_term(7)
    again = FilePersistedState(tmp_path, "c")
    assert again.current_term == 7
    assert again.last_accepted_state == state
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: data[:-5], "truncated"),
        (lambda data: data.replace(b'"current_term":3', b'"current_term":9'), "checksum mismatch"),
        (lambda data: b"garbage" + data, "malformed header"),
        (lambda data: b"", "malformed header"),
    ],
)
def test_corrupt_state_file_refuses_to_load(tmp_path: Path, damage: object, expected: str) -> None:
    persisted = FilePersistedState(tmp_path, "c")
    persisted.set_current_term(3)
    path = tmp_path / STATE_FILE
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    with pytest.raises(DataDirError) as error:
        FilePersistedState(tmp_path, "c")
    assert str(path) in str(error.value)
    assert expected in str(error.value)


def test_valid_checksum_but_bad_content_is_reported(tmp_path: Path) -> None:
    from coordinated.sidecar.persistence import atomic_write

    atomic_write(tmp_path / STATE_FILE, b'{"current_term":"x"}')
    with pytest.raises(DataDirError, match="corrupt"):
        FilePersistedState(tmp_path, "c")


def test_other_cluster_name_refused(tmp_path: Path) -> None:
    FilePersistedState(tmp_path, "one").set_current_term(1)
    with pytest.raises(DataDirError, match=r"cluster\.name"):
        FilePersistedState(tmp_path, "two")


def test_failed_write_keeps_old_value(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    persisted = FilePersistedState(tmp_path, "c")
    persisted.set_current_term(2)

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("os.fsync", fail)
    with pytest.raises(OSError):
        persisted.set_current_term(3)
    assert persisted.current_term == 2
    monkeypatch.undo()
    assert FilePersistedState(tmp_path, "c").current_term == 2


def test_node_id_is_stable_and_new_after_wipe(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    first = load_or_create_node_id(tmp_path / "a")
    assert first == load_or_create_node_id(tmp_path / "a")
    (tmp_path / "b").mkdir()
    assert load_or_create_node_id(tmp_path / "b") != first


def test_missing_node_id_with_state_refuses(tmp_path: Path) -> None:
    load_or_create_node_id(tmp_path)
    FilePersistedState(tmp_path, "c").set_current_term(1)
    (tmp_path / "node-id.dat").unlink()
    with pytest.raises(DataDirError, match="missing"):
        load_or_create_node_id(tmp_path)


def test_data_dir_lock_is_exclusive(tmp_path: Path) -> None:
    lock = DataDirLock(tmp_path)
    with pytest.raises(DataDirError, match="in use"):
        DataDirLock(tmp_path)
    lock.release()
    DataDirLock(tmp_path).release()
