"""Per-target tracking of one two-phase publication: publish, quorum of acks, commit, apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from coordinated.coordination.client import ClientResult
from coordinated.coordination.master_service import Task
from coordinated.coordination.state import ClusterState, VotingConfiguration


class TargetState(Enum):
    SENT_PUBLISH = "sent_publish"
    ACKED = "acked"  # accepted, waiting for the commit
    SENT_APPLY_COMMIT = "sent_apply_commit"
    APPLIED = "applied"
    FAILED = "failed"


@dataclass
class Publication:
    state: ClusterState
    previous: ClusterState
    tasks: list[Task]
    results: list[ClientResult | None]  # None: the task succeeds when the state is committed
    started_at: int
    targets: dict[str, TargetState] = field(default_factory=dict)
    committed_at: int | None = None
    quorum: tuple[str, ...] = ()
    failed: bool = False

    @property
    def version(self) -> int:
        return self.state.version

    @property
    def committed(self) -> bool:
        return self.committed_at is not None

    def ids_in(self, *states: TargetState) -> set[str]:
        return {node_id for node_id, target in self.targets.items() if target in states}

    def publish_quorum_possible(self, last_committed: VotingConfiguration) -> bool:
        """Could the targets not yet failed still form a publish quorum?"""
        alive = {node_id for node_id, target in self.targets.items() if target is not TargetState.FAILED}
        return last_committed.has_quorum(alive) and self.state.last_accepted_config.has_quorum(alive)

    def applied_by_quorum(self, last_committed: VotingConfiguration) -> bool:
        applied = self.ids_in(TargetState.APPLIED)
        return last_committed.has_quorum(applied) and self.state.last_accepted_config.has_quorum(applied)

    def all_targets_done(self) -> bool:
        return all(target in (TargetState.APPLIED, TargetState.FAILED) for target in self.targets.values())
