"""What is wrong with this node now, typed, in one list that health, readiness and the metrics read.

Each kind has one source: a write of the term or state that failed (`persist_monitor`), a data file deleted or
replaced under the running node (`file_watch`), a tokens file that is not usable (`access.Tokens`), and
transport connections refused either way (`refusals`). Health lists them all (`problems`); readiness fails for
the kinds that stop the node from doing its job (`BLOCKING`), and status is red for those that stop it from
persisting (`RED`); the metric `coordinated_node_problems{kind}` counts them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class ProblemKind(enum.StrEnum):
    PERSISTENCE = "persistence"  # the last write of the term or the accepted state failed
    DATA_FILE = "data_file"  # a data file was deleted or replaced while the node ran
    TOKENS_FILE = "tokens_file"  # the tokens file is missing, unreadable or does not parse: every token refused
    TRANSPORT = "transport"  # a transport connection refused, by a peer or by this node


RED = frozenset({ProblemKind.PERSISTENCE, ProblemKind.DATA_FILE})
BLOCKING = RED | {ProblemKind.TOKENS_FILE}


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
