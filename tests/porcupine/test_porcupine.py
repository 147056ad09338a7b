"""An independent checker over a real fault run: porcupine (github.com/anishathalye/porcupine, the linearizability
checker of MIT 6.5840 and etcd's robustness tests), through tools/porcupine, whose key-value model has a version
name one write. A short run of three real node processes, whose master is killed (-9) twice while seven clients
write four keys and compare-and-set on their own versions (fault_history.py), must be linearizable to porcupine
and to the project's checker alike; an injected stale read, and the lost update of issue 50, must be reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fault_history import Record, operations, record_fault_run

from coordinated.simulation.linearizability import check_history
from coordinated.tools.localcluster import LocalCluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
RUN_S = 10.0


@pytest.fixture(scope="session")
def porcupine() -> Path:
    """porcupine-check, which `make test` builds (scripts/install-tools.sh, a no-op once cached)."""
    result = subprocess.run(
        [str(REPO / "scripts" / "install-tools.sh"), "PORCUPINE"], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/install-tools.sh PORCUPINE failed (run make test-deps): {result.stderr[-2000:]}")
    return Path(result.stdout.strip().partition("=")[2])


@pytest.fixture(scope="module")
def fault_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[Record], list[str]]]:
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("porcupine")))
    try:
        cluster.bootstrap(3)
        yield record_fault_run(cluster, RUN_S, seed=50)
    finally:
        cluster.stop_all(graceful=False)


def check(porcupine: Path, history: list[Record], path: Path) -> subprocess.CompletedProcess[str]:
    path.write_text(json.dumps({"operations": history}))
    return subprocess.run([str(porcupine), "-timeout", "120s", str(path)], capture_output=True, text=True, timeout=180)


def test_the_fault_run_is_linearizable_to_porcupine_and_to_our_checker(
    porcupine: Path, fault_history: tuple[list[Record], list[str]], tmp_path: Path
) -> None:
    history, faults = fault_history
    acknowledged = [r for r in history if r["op"] == "put" and r.get("return") and not r.get("refused")]
    own_cas = [r for r in acknowledged if r["if_version"] is not None]
    assert len(faults) >= 2 and len(acknowledged) >= 100 and own_cas, (faults, len(acknowledged), len(own_cas))
    assert any(r.get("refused") for r in history)
    result = check(porcupine, history, tmp_path / "history.json")
    assert result.returncode == 0, (result.stdout, result.stderr, faults)
    assert result.stdout.startswith("linearizable:")
    verdict = check_history(operations(history))
    assert verdict.ok, verdict.detail
    # And, directly: no two acknowledged puts of a key share a version.
    versions: dict[str, list[int]] = defaultdict(list)
    for record in acknowledged:
        versions[record["key"]].append(record["version"])
    assert all(len(set(given)) == len(given) for given in versions.values()), versions


def stale_read(history: list[Record]) -> Record:
    """A read of a key's value that an acknowledged put had overwritten before the read began: the first one the
    history allows (early, so that the search to refute it is short)."""
    acknowledged = sorted(
        (r for r in history if r["op"] == "put" and r.get("return") and not r.get("refused")), key=lambda r: r["return"]
    )
    for later in acknowledged:
        early = next((r for r in acknowledged if r["key"] == later["key"] and r["return"] < later["call"]), None)
        if early is not None:
            return {
                "client": 99,
                "key": early["key"],
                "op": "get",
                "value": early["value"],
                "version": early["version"],
                "call": later["return"] + 1,
                "return": later["return"] + 2,
            }
    raise AssertionError("no key was written twice one after the other")


def test_an_injected_stale_read_is_reported(
    porcupine: Path, fault_history: tuple[list[Record], list[str]], tmp_path: Path
) -> None:
    history, _ = fault_history
    stale = [*history, stale_read(history)]
    result = check(porcupine, stale, tmp_path / "stale.json")
    assert result.returncode == 1 and result.stdout.startswith("not linearizable"), (result.stdout, result.stderr)
    assert not check_history(operations(stale)).ok


def put(client: int, call: int, ret: int, value: str, version: int, **fields: Any) -> Record:
    return {
        "client": client,
        "key": "k",
        "op": "put",
        "value": value,
        "call": call,
        "return": ret,
        "version": version,
    } | fields


def test_the_lost_update_of_issue_50_is_reported(porcupine: Path, tmp_path: Path) -> None:
    """Two puts of one key told the same version, a read of the second, then the first writer's compare-and-set
    on that version succeeded: the second acknowledged write was lost. With a version each, the compare-and-set
    is refused and the history is linearizable."""
    read = {"client": 3, "key": "k", "op": "get", "value": "b", "call": 11, "return": 12}
    lost = [
        put(1, 0, 10, "a", 6074),
        put(2, 1, 10, "b", 6074),
        read | {"version": 6074},
        put(1, 13, 14, "c", 6075, if_version=6074),
    ]
    result = check(porcupine, lost, tmp_path / "lost.json")
    assert result.returncode == 1, (result.stdout, result.stderr)
    kept = [
        put(1, 0, 10, "a", 6074),
        put(2, 1, 10, "b", 6075),
        read | {"version": 6075},
        put(1, 13, 14, "c", 6075, if_version=6074, refused=True),
    ]
    result = check(porcupine, kept, tmp_path / "kept.json")
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert not check_history(operations(lost)).ok and check_history(operations(kept)).ok


def test_a_bad_history_is_refused_with_a_message(porcupine: Path, tmp_path: Path) -> None:
    result = check(porcupine, [{"client": 1, "key": "k", "op": "swap", "call": 0, "return": 1}], tmp_path / "bad.json")
    assert result.returncode == 2 and 'unknown op "swap"' in result.stderr
