"""What is wrong with this node now, typed, in one list that health, readiness and the metrics read.

Each kind has one source: a write of the term or state that failed (`persist_monitor`), a data file deleted or
replaced under the running node (`file_watch`), a tokens file that is not usable (`auth.tokens_file`), another
token realm that cannot verify its tokens (Kubernetes' signing keys: `auth.service_accounts`), transport
connections refused either way (`refusals`), the data volume's fill and the history's losses
(`history_maintenance`), and the history archive's failing uploads or segments it will never have (`archive`).
Health lists them all (`problems`); readiness fails for the kinds that stop the node from doing its job
(`BLOCKING`), status is red for those that stop it from persisting (`RED`) and yellow for those that warn
(`YELLOW`); the metric `coordinated_node_problems{kind}` counts them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ProblemKind(enum.StrEnum):
    PERSISTENCE = "persistence"  # the last write of the term or the accepted state failed
    DATA_FILE = "data_file"  # a data file was deleted or replaced while the node ran
    TOKENS_FILE = "tokens_file"  # the tokens file is missing, unreadable or does not parse: every token refused
    AUTH_REALM = "auth_realm"  # another token realm cannot verify (all of) its tokens: Kubernetes' signing keys
    TRANSPORT = "transport"  # a transport connection refused, by a peer or by this node
    DISK = "disk"  # the data volume is past `history.disk.watermark.high`
    HISTORY = "history"  # history lost while the node ran, a history write failing, or a damaged segment
    ARCHIVE = "archive"  # closed history segments are not reaching the archive (object storage)


RED = frozenset({ProblemKind.PERSISTENCE, ProblemKind.DATA_FILE})
BLOCKING = RED | {ProblemKind.TOKENS_FILE}
YELLOW = frozenset({ProblemKind.DISK, ProblemKind.HISTORY, ProblemKind.ARCHIVE, ProblemKind.AUTH_REALM})


@dataclass(frozen=True)
class NodeProblem:
    kind: ProblemKind
    reason: str

    def to_api(self) -> dict[str, str]:
        return {"kind": self.kind.value, "reason": self.reason}


def count_by_kind(problems: list[NodeProblem]) -> dict[str, int]:
    """Every kind, with how many problems of it there are (0 included, so that the metric's series stay)."""
    counts = {kind.value: 0 for kind in ProblemKind}
    for problem in problems:
        counts[problem.kind.value] += 1
    return counts
