"""Carries out what a simulated node's coordinator returns, as the sidecar does for a real one: messages go to
the message bus, history events into the node's history (numbered and stamped with the virtual time), finished
requests to their clients, and logs and finished publications into lists that tests read."""

from __future__ import annotations

from collections.abc import Callable
from typing import assert_never

from coordinated.coordination.client import ClientResult
from coordinated.coordination.effects import (
    Effect,
    Log,
    ProbeSeeds,
    PublicationFinished,
    RecordHistory,
    RequestCompleted,
    Send,
    StateApplied,
    WatchPeers,
)
from coordinated.coordination.history import HistoryEvent
from coordinated.coordination.messages import Message
from coordinated.coordination.state import ClusterState
from coordinated.simulation.sim_node import SimNode


class EffectInterpreter:
    """The callbacks say where each kind of effect goes; `clock` gives the virtual time."""

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        send: Callable[[SimNode, str, Message], None],
        probe_seeds: Callable[[SimNode], None],
        recorded: Callable[[HistoryEvent], None],
        request_completed: Callable[[tuple[int, int], ClientResult], None],
        state_applied: Callable[[SimNode, ClusterState], None],
        logs: list[tuple[int, str, str, str]],
        publications: list[PublicationFinished],
    ) -> None:
        self._clock = clock
        self._send = send
        self._probe_seeds = probe_seeds
        self._recorded = recorded
        self._request_completed = request_completed
        self._state_applied = state_applied
        self._logs = logs
        self._publications = publications

    def run(self, sim_node: SimNode, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._send(sim_node, effect.destination, effect.message)
            elif isinstance(effect, RecordHistory):
                sim_node.seq += 1
                event = effect.event.to_dict()
                event["seq"] = sim_node.seq
                event["ts"] = self._clock() / 1000
                sim_node.history.append(event)
                self._recorded(effect.event)
            elif isinstance(effect, ProbeSeeds):
                self._probe_seeds(sim_node)
            elif isinstance(effect, RequestCompleted):
                self._request_completed((sim_node.index, effect.request_id), effect.result)
            elif isinstance(effect, PublicationFinished):
                self._publications.append(effect)
            elif isinstance(effect, Log):
                self._logs.append((self._clock(), sim_node.name, effect.level, effect.message))
            elif isinstance(effect, StateApplied):
                self._state_applied(sim_node, effect.state)
            elif isinstance(effect, WatchPeers):
                # Kept for the stability check; the simulated network reports no closed connection on its own
                # (a schedule does, with `close_connection`).
                sim_node.watched = effect.addresses
            else:
                assert_never(effect)
