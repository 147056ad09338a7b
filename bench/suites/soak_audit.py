"""The soak's audits: run one audit command, keep its output, and read its verdict from the report it wrote.

An audit that crashes (a JVM out of memory, a lost block, any unexpected error: exit 3, "the audit did not
complete") must not read as "violations", and its output must survive whatever the soak does next. So each attempt writes its
stdout, stderr and report into its own folder under the soak's output as it runs, and the verdict comes from the
report (`ok` and `stats.violation_counts`), checked against the exit code. A failed audit is run once more.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

REPORT = "audit-report.json"
KILL_GRACE_S = 10.0


class Verdict(Enum):
    OK = "ok"
    VIOLATIONS = "violations"
    DID_NOT_RUN = "did not run"


@dataclass
class AuditOutcome:
    """One audit, after its last attempt."""

    index: int
    verdict: Verdict
    attempts: int
    seconds: float  # the last attempt's
    report: dict[str, Any] | None  # the last attempt's report, when the verdict came from one
    error: str = ""  # why it did not run: the last line of its stderr, or what went wrong reading its report
    folders: list[str] = field(default_factory=list)  # each attempt's stdout, stderr and report

    def problems(self) -> list[str]:
        """What the soak reports as failures for this audit."""
        if self.verdict is Verdict.DID_NOT_RUN:
            return [f"audit {self.index} did not complete: {self.error}"]
        if self.verdict is Verdict.VIOLATIONS and self.report is not None:
            listed = [f"audit {self.index}: {v['invariant']}: {v['detail']}" for v in self.report.get("violations", [])]
            return listed or [f"audit {self.index}: violations {violation_counts(self.report)}"]
        return []

    def summary(self) -> dict[str, Any]:
        report = self.report or {}
        return {
            "index": self.index,
            "verdict": self.verdict.value,
            "attempts": self.attempts,
            "seconds": round(self.seconds, 1),
            "events": report.get("events"),
            "violation_counts": violation_counts(report) if report else None,
            "error": self.error,
            "folders": self.folders,
        }


def violation_counts(report: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = report.get("stats", {}).get("violation_counts", {})
    return counts


def last_line(path: Path) -> str:
    """The last non-empty line of a log file (a traceback's last line names the error)."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:500] if lines else ""


def read_verdict(returncode: int, folder: Path) -> tuple[Verdict, dict[str, Any] | None, str]:
    """The verdict of one attempt: its exit code must agree with the report it wrote into `folder`."""
    try:
        report: dict[str, Any] = json.loads((folder / REPORT).read_text())
        ok, counts = report["ok"], violation_counts(report)
    except FileNotFoundError:
        return Verdict.DID_NOT_RUN, None, f"exit {returncode}, no {REPORT}: {last_line(folder / 'stderr.log')}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return (
            Verdict.DID_NOT_RUN,
            None,
            f"exit {returncode}, unreadable {REPORT} ({e}): {last_line(folder / 'stderr.log')}",
        )
    violated = any(count > 0 for count in counts.values())
    if returncode == 0 and ok is True and not violated:
        return Verdict.OK, report, ""
    if returncode == 1 and ok is False and violated:
        return Verdict.VIOLATIONS, report, ""
    return (
        Verdict.DID_NOT_RUN,
        None,
        f"exit {returncode} with a report that says ok={ok}, violations {counts}: {last_line(folder / 'stderr.log')}",
    )


def run_once(command: list[str], folder: Path, timeout_s: float) -> tuple[int, float]:
    """Run the command with its output going straight to files in `folder`; stop its whole group on a timeout."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / REPORT).unlink(missing_ok=True)  # never read an earlier attempt's report
    started = time.monotonic()
    with (folder / "stdout.log").open("wb") as out, (folder / "stderr.log").open("wb") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(process)
            err.write(f"\nsoak: the audit was stopped after {timeout_s:.0f} s\n".encode())
            returncode = -signal.SIGTERM
    return returncode, time.monotonic() - started


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """The audit and the JVM it started share its process group."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_audit(
    index: int, command_for: Callable[[Path], list[str]], out: Path, timeout_s: float, attempts: int = 2
) -> AuditOutcome:
    """Audit `index`: its attempts go to out/audit-INDEX/attempt-N/; a failed one is run again, up to `attempts`."""
    outcome = AuditOutcome(index=index, verdict=Verdict.DID_NOT_RUN, attempts=0, seconds=0.0, report=None)
    for attempt in range(1, attempts + 1):
        folder = out / f"audit-{index}" / f"attempt-{attempt}"
        returncode, seconds = run_once(command_for(folder), folder, timeout_s)
        verdict, report, error = read_verdict(returncode, folder)
        outcome.verdict, outcome.report, outcome.error = verdict, report, error
        outcome.attempts, outcome.seconds = attempt, seconds
        outcome.folders.append(str(folder))
        if verdict is not Verdict.DID_NOT_RUN:
            break
    return outcome
