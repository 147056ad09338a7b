"""`coordinated node-tool` on data directories built in-process: the node's own startup check accepts what it
writes, and it refuses what the node would refuse."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from child_processes import ChildProcesses

from coordinated.coordination.offline_recovery import MUST_JOIN_ELECTED_MASTER, UNSAFE_BOOTSTRAP_SETTING
from coordinated.coordination.state import (
    ClusterState,
    CoordinationMetadata,
    DiscoveryNode,
    VotingConfiguration,
    initial_state,
)
from coordinated.sidecar import node_tool
from coordinated.sidecar.events.history import HistoryWriter, read_events_after, summarize_history
from coordinated.sidecar.events.history_read import read_history_summary
from coordinated.sidecar.storage.persistence import HISTORY_DIR, DataDirLock, FilePersistedState


def event(node_id: str, kind: str, state: ClusterState, term: int) -> dict[str, object]:
    return {
        "cluster_uuid": state.cluster_uuid,
        "node": node_id,
        "type": kind,
        "term": term if kind == "term" else state.term,
        "version": state.version,
        "state_uuid": state.state_uuid,
    }


def current_store(data_dir: Path, cluster_name: str) -> FilePersistedState:
    return FilePersistedState(data_dir, cluster_name, read_history=read_history_summary)


def used_data_dir(
    data_dir: Path, term: int = 4, version: int = 12, persistence: Callable[[Path, str], Any] = current_store
) -> str:
    """A stopped node of a 3-node cluster, as the node leaves it: record and history agree."""
    persisted = persistence(data_dir, "c")
    node_id = persisted.node_id
    ids = [node_id, "b" * 16, "c" * 16]
    config = VotingConfiguration.of(ids)
    state = initial_state("c").replace(
        cluster_uuid="old-uuid",
        cluster_uuid_committed=True,
        version=version,
        state_uuid=f"s{version}",
        master_node=ids[1],
        nodes={n: DiscoveryNode(n, f"node-{i}", f"127.0.0.1:{9300 + i}") for i, n in enumerate(ids)},
        coordination=CoordinationMetadata(term, config, config),
        kv={"k1": 1, "k2": "two"},
        persistent_settings={"cluster.no_master_block": "all", "cluster.auto_shrink_voting_configuration": "false"},
    )
    history = HistoryWriter(data_dir / HISTORY_DIR, 1 << 20)
    persisted.set_current_term(term)
    history.append_fields(event(node_id, "term", state, term))
    persisted.set_last_accepted_state(state)
    history.append_fields(event(node_id, "accepted", state, term))
    history.close()
    persisted.close()
    return node_id


def run(data_dir: Path, action: str, *extra: str, stdin: str = "") -> tuple[int, str]:
    out = io.StringIO()
    code = node_tool.main([action, "--data-dir", str(data_dir), *extra], stdin=io.StringIO(stdin), stdout=out)
    return code, out.getvalue()


def events(data_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in read_events_after(data_dir / HISTORY_DIR, 0)]


def test_the_tool_works_on_the_slot_files_of_an_earlier_version_and_migrates_them(tmp_path: Path) -> None:
    """A node stopped by an earlier version (slot files written by that version's own code): the tool applies
    the earlier rules, migrates the record into the database and rewrites it there."""
    sys.path.insert(0, str(Path(__file__).parent))
    from slot_format_writer import FilePersistedState as OldFilePersistedState

    node_id = used_data_dir(tmp_path, persistence=OldFilePersistedState)
    assert (tmp_path / "coordination-state.0").exists()
    code, out = run(tmp_path, "unsafe-bootstrap", "--yes")
    assert code == 0, out
    assert not (tmp_path / "coordination-state.0").exists() and (tmp_path / "coordination-state.db").exists()
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert persisted.node_id == node_id
    assert persisted.last_accepted_state.last_committed_config.node_ids == (node_id,)
    assert dict(persisted.last_accepted_state.kv) == {"k1": 1, "k2": "two"}
    persisted.close()


def test_unsafe_bootstrap_writes_a_record_the_node_loads(tmp_path: Path) -> None:
    node_id = used_data_dir(tmp_path)
    code, out = run(tmp_path, "unsafe-bootstrap", "--yes")
    assert code == 0, out
    assert "(term, version) = (4, 12)" in out
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)  # the node's own startup check
    state = persisted.last_accepted_state
    persisted.close()
    assert state.last_committed_config == state.last_accepted_config == VotingConfiguration.of([node_id])
    assert state.cluster_uuid != "old-uuid" and state.cluster_uuid_committed
    assert dict(state.kv) == {"k1": 1, "k2": "two"} and state.persistent_settings[UNSAFE_BOOTSTRAP_SETTING] == "true"
    last = events(tmp_path)[-1]
    assert last["type"] == "unsafe_bootstrap" and last["cluster_uuid"] == state.cluster_uuid
    assert (last["term"], last["version"], last["seq"]) == (4, 13, 3)


def test_detach_writes_a_record_the_node_loads_despite_the_older_higher_marks(tmp_path: Path) -> None:
    used_data_dir(tmp_path)
    code, out = run(tmp_path, "detach-cluster", "--yes")
    assert code == 0, out
    # Without the reset event the history's term 4 would make the node refuse a record of term 0.
    assert summarize_history(tmp_path / HISTORY_DIR).term == 0
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert persisted.current_term == 0
    state = persisted.last_accepted_state
    persisted.close()
    assert state.term == 0 and not state.cluster_uuid_committed
    assert state.last_committed_config == MUST_JOIN_ELECTED_MASTER
    assert events(tmp_path)[-1]["type"] == "detached"


def test_remove_settings_writes_a_record_the_node_loads(tmp_path: Path) -> None:
    used_data_dir(tmp_path)
    code, out = run(tmp_path, "remove-settings", "--yes", "cluster.no_master_block", "cluster.x*")
    assert code == 0, out
    assert "cluster.no_master_block: all" in out and "every master-eligible node" in out
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)  # the node's own startup check
    state, term = persisted.last_accepted_state, persisted.current_term
    persisted.close()
    assert dict(state.persistent_settings) == {"cluster.auto_shrink_voting_configuration": "false"}
    assert (term, state.term, state.version, state.parent_uuid) == (4, 4, 12, "s12")
    assert state.state_uuid != "s12" and dict(state.kv) == {"k1": 1, "k2": "two"}
    last = events(tmp_path)[-1]
    assert (last["type"], last["state_uuid"], last["settings"]) == (
        "settings_removed",
        state.state_uuid,
        ["cluster.no_master_block"],
    )
    assert summarize_history(tmp_path / HISTORY_DIR).accepted == (4, 12)


def test_remove_settings_refuses_names_that_match_nothing_and_needs_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    used_data_dir(tmp_path)
    assert run(tmp_path, "remove-settings", "--yes", "cluster.publish.*")[0] == node_tool.EXIT_REFUSED
    assert "no persistent setting of node" in capsys.readouterr().err
    assert [e["type"] for e in events(tmp_path)] == ["term", "accepted"]
    with pytest.raises(SystemExit) as usage:
        run(tmp_path, "remove-settings", "--yes")
    assert usage.value.code == node_tool.EXIT_USAGE


def test_a_crash_between_the_event_and_the_record_leaves_the_old_record_loadable(tmp_path: Path) -> None:
    used_data_dir(tmp_path)
    for action in ("remove-settings", "detach-cluster", "unsafe-bootstrap"):
        persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
        plan = node_tool._plan(action, persisted, ("cluster.no_master_block",))
        persisted.close()
        history = HistoryWriter(tmp_path / HISTORY_DIR, 1 << 20)
        history.append_fields(plan.event)  # ... and the crash comes before the record is written
        history.close()
        persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
        assert (persisted.current_term, persisted.last_accepted_state.version) == (4, 12)
        persisted.close()
    assert run(tmp_path, "unsafe-bootstrap", "--yes")[0] == 0  # and the tool can be run again


def test_later_marks_count_after_a_reset(tmp_path: Path) -> None:
    node_id = used_data_dir(tmp_path)
    assert run(tmp_path, "detach-cluster", "--yes")[0] == 0
    history = HistoryWriter(tmp_path / HISTORY_DIR, 1 << 20)
    history.append_fields({"node": node_id, "type": "term", "term": 9})
    history.close()
    summary = summarize_history(tmp_path / HISTORY_DIR)
    assert (summary.term, summary.accepted) == (9, (0, 12))


def test_refuses_while_a_node_runs_on_the_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    used_data_dir(tmp_path)
    lock = DataDirLock(tmp_path)
    before = sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir() if p.is_file())
    try:
        code, _ = run(tmp_path, "unsafe-bootstrap", "--yes")
    finally:
        lock.release()
    assert code == node_tool.EXIT_REFUSED
    assert "is in use by another node" in capsys.readouterr().err
    assert sorted((p.name, p.read_bytes()) for p in tmp_path.iterdir() if p.is_file()) == before


def test_without_a_terminal_and_without_yes_it_changes_nothing(tmp_path: Path) -> None:
    used_data_dir(tmp_path)
    code, out = run(tmp_path, "unsafe-bootstrap", stdin="y\n")  # a pipe, not a terminal: never asks
    assert code == node_tool.EXIT_ABORTED and "pass --yes" in out
    assert [e["type"] for e in events(tmp_path)] == ["term", "accepted"]
    persisted = FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    assert persisted.last_accepted_state.cluster_uuid == "old-uuid"
    persisted.close()


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("answer", "expected"), [("y\n", 0), ("n\n", 1), ("", 1)])
def test_asks_on_a_terminal(tmp_path: Path, answer: str, expected: int) -> None:
    used_data_dir(tmp_path)
    out = io.StringIO()
    code = node_tool.main(["detach-cluster", "--data-dir", str(tmp_path)], stdin=Tty(answer), stdout=out)
    assert code == expected
    assert "Confirm [y/N]" in out.getvalue()
    assert (events(tmp_path)[-1]["type"] == "detached") == (expected == 0)


def test_refuses_what_the_node_would_refuse_with_the_same_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    used_data_dir(tmp_path)
    history = HistoryWriter(tmp_path / HISTORY_DIR, 1 << 20)
    history.append_fields({"node": "f" * 16, "type": "term", "term": 1})  # another node's history copied in
    history.close()
    with pytest.raises(Exception) as refused:
        FilePersistedState(tmp_path, "c", read_history=read_history_summary)
    code, _ = run(tmp_path, "unsafe-bootstrap", "--yes")
    assert code == node_tool.EXIT_REFUSED
    assert str(refused.value) in capsys.readouterr().err


def test_refuses_a_data_dir_without_node_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(tmp_path, "unsafe-bootstrap", "--yes")
    assert code == node_tool.EXIT_REFUSED
    assert "holds no node state" in capsys.readouterr().err
    assert not (tmp_path / "node-id.dat").exists()  # it did not make a new node


def test_refuses_a_node_that_was_never_bootstrapped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FilePersistedState(
        tmp_path, "c", read_history=read_history_summary
    ).close()  # a node that started once and never joined
    code, _ = run(tmp_path, "unsafe-bootstrap", "--yes")
    assert code == node_tool.EXIT_REFUSED
    assert "never part of a bootstrapped cluster" in capsys.readouterr().err


@pytest.mark.parametrize("segment_size", [1, 1 << 20])  # one event per segment, or all in one
def test_a_reset_event_replaces_older_marks_across_segments(tmp_path: Path, segment_size: int) -> None:
    history = HistoryWriter(tmp_path, segment_size)
    history.append_fields({"node": "a", "type": "term", "term": 4})
    history.append_fields({"node": "a", "type": "accepted", "term": 4, "version": 12})
    history.append_fields(
        {"node": "a", "type": "detached", "term": 0, "version": 12, "marks_term": 0, "marks_accepted": [0, 12]}
    )
    history.append_fields({"node": "a", "type": "term", "term": 2})
    history.close()
    summary = summarize_history(tmp_path)
    assert (summary.term, summary.accepted) == (2, (0, 12))


def test_a_closed_stdin_is_no_confirmation(tmp_path: Path) -> None:
    used_data_dir(tmp_path)
    closed = io.StringIO("y\n")
    closed.close()
    out = io.StringIO()
    assert node_tool.main(["unsafe-bootstrap", "--data-dir", str(tmp_path)], stdin=closed, stdout=out) == 1
    assert [e["type"] for e in events(tmp_path)] == ["term", "accepted"]


def test_the_command_line_without_yes_and_without_a_terminal_exits_at_once(
    tmp_path: Path, processes: ChildProcesses
) -> None:
    used_data_dir(tmp_path)
    argv = [sys.executable, "-m", "coordinated.cli", "node-tool", "detach-cluster", "--data-dir", str(tmp_path)]
    result = processes.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert result.returncode == 1, result.stderr
    assert "current term 4; last-accepted state (term, version) = (4, 12)" in result.stdout
    assert "nothing was changed" in result.stdout
