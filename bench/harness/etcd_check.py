"""Is etcd as fast in this run as it is known to be on this kind of machine? If not, the run is flagged.

Ratios against an etcd that the machine slowed down flatter us (an earlier run measured etcd at 3.3 ms and
1,845 writes/s and reported parity), so a flagged run's ratios are printed under a warning, and
docs/performance.md carries the warning above them.
"""

from __future__ import annotations

import statistics
from typing import Any

# etcd 3.4, 3 members on loopback, data dirs on ext4, 2 vCPU: two independent quiet runs measured a
# sequential p50 of 1.2-1.4 ms and 3,770-3,840 writes/s with 64 clients.
KNOWN_SEQ_P50_MS = 1.4
KNOWN_TPUT_64 = 3770.0
SEQ_TOLERANCE = 1.5  # flag when etcd's p50 exceeds 1.5x the known figure (2.1 ms)
TPUT_TOLERANCE = 0.67  # flag when etcd's 64-client throughput is below 0.67x the known figure (~2,526/s)
ETCD = "etcd 3n"


def etcd_check(results: dict[str, Any]) -> dict[str, Any]:
    """{"flagged": bool, "reasons": [...], "seq_p50", "tput_64"} from etcd 3n's quiet medians."""
    etcd = results.get(ETCD, {})
    if not etcd.get("seq_p50") or not etcd.get("tput_64"):
        return {"flagged": True, "reasons": [f"{ETCD} was not measured: the run cannot be checked"]}
    seq, tput = statistics.median(etcd["seq_p50"]), statistics.median(etcd["tput_64"])
    reasons = []
    if seq > SEQ_TOLERANCE * KNOWN_SEQ_P50_MS:
        reasons.append(
            f"{ETCD} sequential p50 {seq:.2f} ms > {SEQ_TOLERANCE}x its known {KNOWN_SEQ_P50_MS} ms here "
            f"({seq / KNOWN_SEQ_P50_MS:.1f}x)"
        )
    if tput < TPUT_TOLERANCE * KNOWN_TPUT_64:
        reasons.append(
            f"{ETCD} 64-client throughput {tput:.0f}/s < {TPUT_TOLERANCE}x its known {KNOWN_TPUT_64:.0f}/s here "
            f"({tput / KNOWN_TPUT_64:.2f}x)"
        )
    return {"flagged": bool(reasons), "reasons": reasons, "seq_p50": seq, "tput_64": tput}


def banner(check: dict[str, Any]) -> list[str]:
    if not check["flagged"]:
        return []
    return [
        "**FLAGGED RUN: etcd was far slower than its known figures on this machine "
        f"({KNOWN_SEQ_P50_MS} ms p50, {KNOWN_TPUT_64:.0f} writes/s at 64 clients); ratios against it would "
        "flatter us.** " + "; ".join(check["reasons"]) + ".",
    ]
