"""The soak's audits: the verdict comes from the report the audit wrote, checked against its exit code, and an
audit that did not complete is run once more, then reported as such (never as "violations").

The audit command is a small Python script that behaves like one outcome of `coordinated audit`: an ok report, a
report with violations, a crash (a traceback exits 1 too, as the Spark "unread block data" and out-of-memory
failures did), or exit 3 ("the audit did not run")."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.suites.soak_audit import REPORT, Verdict, read_verdict, run_audit

OK_REPORT = {"ok": True, "events": 1200, "violations": [], "stats": {"violation_counts": {"single-leader": 0}}}
BAD_REPORT = {
    "ok": False,
    "events": 1200,
    "violations": [{"invariant": "single-leader", "detail": "two masters in term 7"}],
    "stats": {"violation_counts": {"single-leader": 1, "history-gap": 0}},
}

# argv: the report folder, then one behaviour per attempt (the attempt counter is kept in a file beside it).
FAKE_AUDIT = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    folder, behaviours = Path(sys.argv[1]), sys.argv[2:]
    counter = folder.parent.parent / "attempts"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    behaviour = behaviours[min(n, len(behaviours) - 1)]
    ok = {ok}
    bad = {bad}
    if behaviour == "ok":
        (folder / "audit-report.json").write_text(json.dumps(ok)); sys.exit(0)
    if behaviour == "violations":
        print("single-leader 1 VIOLATION(S)")
        (folder / "audit-report.json").write_text(json.dumps(bad)); sys.exit(1)
    if behaviour == "ok-report-then-crash":
        (folder / "audit-report.json").write_text(json.dumps(ok))
        raise RuntimeError("cannot write the checkpoint")
    if behaviour == "exit3":
        print("coordinated audit: the audit did not run: java.lang.OutOfMemoryError", file=sys.stderr); sys.exit(3)
    if behaviour == "hang":
        time.sleep(60)
    raise RuntimeError("py4j.protocol.Py4JJavaError: java.lang.IllegalStateException: unread block data")
    """
).format(ok=OK_REPORT, bad=BAD_REPORT)


FakeAudit = Callable[..., Callable[[Path], list[str]]]


def audit_command(*behaviours: str) -> Callable[[Path], list[str]]:
    return lambda folder: [sys.executable, "-c", FAKE_AUDIT, str(folder), *behaviours]


@pytest.fixture
def fake_audit() -> FakeAudit:
    """An audit command that behaves as told, run as a child process by the code under test (a process fixture)."""
    return audit_command


def test_an_ok_report_with_exit_0_is_ok(fake_audit: FakeAudit, tmp_path: Path) -> None:
    outcome = run_audit(0, fake_audit("ok"), tmp_path, timeout_s=60)
    assert (outcome.verdict, outcome.attempts, outcome.report) == (Verdict.OK, 1, OK_REPORT)
    assert outcome.problems() == []


def test_a_report_of_violations_with_exit_1_is_violations_and_not_retried(
    fake_audit: FakeAudit, tmp_path: Path
) -> None:
    outcome = run_audit(2, fake_audit("violations", "ok"), tmp_path, timeout_s=60)
    assert (outcome.verdict, outcome.attempts) == (Verdict.VIOLATIONS, 1)
    assert outcome.problems() == ["audit 2: single-leader: two masters in term 7"]
    assert "VIOLATION" in (tmp_path / "audit-2" / "attempt-1" / "stdout.log").read_text()


def test_a_crash_exits_1_without_a_report_and_is_retried_once(fake_audit: FakeAudit, tmp_path: Path) -> None:
    outcome = run_audit(1, fake_audit("crash", "ok"), tmp_path, timeout_s=60)
    assert (outcome.verdict, outcome.attempts) == (Verdict.OK, 2)
    # The failed attempt's output is kept beside the one that worked.
    stderr = (tmp_path / "audit-1" / "attempt-1" / "stderr.log").read_text()
    assert "unread block data" in stderr
    assert outcome.folders == [str(tmp_path / "audit-1" / f"attempt-{n}") for n in (1, 2)]


@pytest.mark.parametrize("behaviour", ["crash", "exit3", "ok-report-then-crash"])
def test_two_failures_are_an_audit_that_did_not_complete_not_violations(
    fake_audit: FakeAudit, tmp_path: Path, behaviour: str
) -> None:
    outcome = run_audit(3, fake_audit(behaviour), tmp_path, timeout_s=60)
    assert (outcome.verdict, outcome.attempts, outcome.report) == (Verdict.DID_NOT_RUN, 2, None)
    (problem,) = outcome.problems()
    assert problem.startswith("audit 3 did not complete: exit ")
    last_line = "java.lang.OutOfMemoryError" if behaviour == "exit3" else "RuntimeError: "
    assert last_line in problem


def test_an_earlier_attempts_report_is_never_read(fake_audit: FakeAudit, tmp_path: Path) -> None:
    folder = tmp_path / "audit-0" / "attempt-1"
    folder.mkdir(parents=True)
    (folder / REPORT).write_text(json.dumps(BAD_REPORT))
    outcome = run_audit(0, fake_audit("crash"), tmp_path, timeout_s=60, attempts=1)
    assert outcome.verdict is Verdict.DID_NOT_RUN


def test_a_hung_audit_is_stopped_and_did_not_complete(fake_audit: FakeAudit, tmp_path: Path) -> None:
    outcome = run_audit(0, fake_audit("hang"), tmp_path, timeout_s=1, attempts=1)
    assert outcome.verdict is Verdict.DID_NOT_RUN
    assert "stopped after 1 s" in outcome.error


@pytest.mark.parametrize(
    ("returncode", "report", "verdict"),
    [
        (0, OK_REPORT, Verdict.OK),
        (1, BAD_REPORT, Verdict.VIOLATIONS),
        (1, OK_REPORT, Verdict.DID_NOT_RUN),  # a crash after the report was written
        (0, BAD_REPORT, Verdict.DID_NOT_RUN),  # the exit code and the report disagree
        (3, OK_REPORT, Verdict.DID_NOT_RUN),
        (2, BAD_REPORT, Verdict.DID_NOT_RUN),  # unusable input, with a report left from before
        (1, {"ok": False, "stats": {"violation_counts": {"single-leader": 0}}}, Verdict.DID_NOT_RUN),
        (1, {"events": 3}, Verdict.DID_NOT_RUN),  # not an audit report
    ],
)
def test_the_verdict_needs_the_exit_code_and_the_report_to_agree(
    tmp_path: Path, returncode: int, report: dict[str, object], verdict: Verdict
) -> None:
    (tmp_path / REPORT).write_text(json.dumps(report))
    (tmp_path / "stderr.log").write_text("Traceback (most recent call last):\nMemoryError\n\n")
    found, _, error = read_verdict(returncode, tmp_path)
    assert found is verdict
    assert error.endswith("MemoryError") if verdict is Verdict.DID_NOT_RUN else error == ""


def test_a_missing_or_cut_report_did_not_run(tmp_path: Path) -> None:
    assert read_verdict(1, tmp_path)[0] is Verdict.DID_NOT_RUN
    (tmp_path / REPORT).write_text('{"ok": fal')
    assert read_verdict(1, tmp_path)[0] is Verdict.DID_NOT_RUN


def test_the_end_check_runs_every_step_and_names_each_failure(fake_audit: FakeAudit, tmp_path: Path) -> None:
    """Nothing answers, nothing stops, the audit crashes twice, no checkpoint and no node id: the end check still
    reaches its last step and returns one finding per failure instead of raising at the first."""
    import asyncio

    from bench.suites import soak
    from coordinated.tools.localcluster import LocalCluster, LocalNode
    from coordinated.tools.s3server import S3Server, free_port

    class StuckCluster(LocalCluster):
        def stop(self, node: LocalNode, timeout: float = 10.0) -> int | None:
            raise TimeoutError(f"{node.name} still running after {timeout} s")

    nodes = [LocalNode(f"node-{i}", tmp_path / f"node-{i}", free_port("127.0.0.1"), 0) for i in (1, 2)]
    writer = soak.Writer(nodes, rate=1.0)
    writer.acknowledged["soak/0"] = 7
    audits = soak.Audits(fake_audit("crash"), tmp_path / "out", timeout_s=60)
    server = S3Server(Path("/nonexistent/s3server"), tmp_path / "s3")
    problems, results = asyncio.run(soak.end_check(StuckCluster(tmp_path / "cluster"), nodes, server, writer, audits))
    expected = [
        "the read-back could not run",
        "node-1 did not stop gracefully",
        "node-2 did not stop gracefully",
        "audit 0 did not complete: exit 1, no audit-report.json: RuntimeError:",
        "the audits' checkpoint could not be read",
        "node-1: its events could not be counted",
        "node-2: its events could not be counted",
    ]
    for finding in expected:
        assert any(p.startswith(finding) for p in problems), (finding, problems)
    assert len(problems) == len(expected)
    assert results["audits"][0]["verdict"] == "did not run" and results["audits"][0]["attempts"] == 2


def test_the_chart_drawn_at_every_sample_leaves_no_figure_open(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from bench.suites import soak

    samples = [soak.Sample(m, "node-1", 5.0, 2.0, 100.0, 30, 0.0, 0.0) for m in (0.0, 1.0)]
    for _ in range(3):
        soak.chart(samples, tmp_path / "soak.png")
    assert plt.get_fignums() == []
    assert (tmp_path / "soak.png").stat().st_size > 0
