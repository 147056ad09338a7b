"""A CoreContext for testing one component alone: effects are collected, time and mode are set by hand."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.effects import Effect, Send
from coordinated.coordination.messages import Message
from coordinated.coordination.node_versions import NodeVersions
from coordinated.coordination.settings import Settings
from coordinated.coordination.state import ClusterState, initial_state
from coordinated.coordination.timers import Timers

from .harness import SETTINGS, discovery_node


@dataclass
class Bench:
    """One component's surroundings: its node, clock, timers, and what it sent."""

    settings: Settings = SETTINGS
    mode: Mode = Mode.CANDIDATE
    term: int = 1
    state: ClusterState = field(default_factory=lambda: initial_state("test"))
    effects: list[Effect] = field(default_factory=list)
    timers: Timers = field(default_factory=Timers)
    next_id: int = 0

    def __post_init__(self) -> None:
        local = discovery_node("local")
        self.ctx = CoreContext(
            local_node=local,
            base_settings=self.settings,
            timers=self.timers,
            rng=random.Random(1),
            emit=self.effects.append,
            loopback=lambda sender, message: self.effects.append(Send(sender, message)),
            new_request_id=self._new_id,
            current_settings=lambda: self.settings,
            accepted_state=lambda: self.state,
            term=lambda: self.term,
            mode=lambda: self.mode,
            versions=NodeVersions(local),
        )

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def sent(self) -> list[tuple[str, Message]]:
        """The messages sent since the last call."""
        sends = [(effect.destination, effect.message) for effect in self.effects if isinstance(effect, Send)]
        self.effects.clear()
        return sends

    def advance_to(self, now: int) -> None:
        while (deadline := self.timers.next_deadline()) is not None and deadline <= now:
            self.ctx.now = deadline
            callback = self.timers.pop_due(deadline)
            assert callback is not None
            callback()
        self.ctx.now = now
