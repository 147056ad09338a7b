"""A one-node harness: one real `Coordinator`, driven by hand, with every other node played by the test.

The node's messages to itself are delivered back at once (as a shell does); everything else it sends is
kept in `sent` for the test to read and answer. Time moves only when the test says so.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from coordinated.coordination.client import ClientRequest, ClientResult
from coordinated.coordination.coordinator import Coordinator
from coordinated.coordination.effects import Effect, RecordHistory, RequestCompleted, Send
from coordinated.coordination.formation import INITIAL_MASTER_NODES
from coordinated.coordination.messages import Message, PublishRequest
from coordinated.coordination.registry import default_settings
from coordinated.coordination.safety import InMemoryPersistedState
from coordinated.coordination.settings import CLUSTER_NAME, NODE_NAME
from coordinated.coordination.state import DiscoveryNode, initial_state

SETTINGS = default_settings().with_values({CLUSTER_NAME: "test"})


def discovery_node(name: str, master_eligible: bool = True) -> DiscoveryNode:
    return DiscoveryNode(
        id=f"{name}-id", name=name, transport_address=f"{name}:9300", roles=("master",) if master_eligible else ()
    )


@dataclass
class OneNode:
    node: DiscoveryNode
    coordinator: Coordinator
    now: int = 0
    sent: list[tuple[str, Message]] = field(default_factory=list)  # (destination, message), not yet read
    results: dict[int, ClientResult] = field(default_factory=dict)
    history: list[dict[str, object]] = field(default_factory=list)
    # While set, the master's own copy of a publication waits in `held`: the publication stays in flight.
    hold_own_publications: bool = False
    held: list[Message] = field(default_factory=list)
    _next_request: int = 0

    @classmethod
    def start(cls, name: str = "solo", bootstrap: bool = True) -> OneNode:
        node = discovery_node(name)
        initial = (name,) if bootstrap else ()
        node_settings = SETTINGS.with_values({NODE_NAME: name, INITIAL_MASTER_NODES: initial})
        coordinator = Coordinator(
            local_node=node,
            settings=node_settings,
            persisted=InMemoryPersistedState(0, initial_state("test")),
            rng=random.Random(1),
            now=0,
        )
        harness = cls(node, coordinator)
        harness._run(coordinator.start(0))
        return harness

    def _run(self, effects: list[Effect]) -> None:
        for effect in effects:
            if (
                isinstance(effect, Send)
                and effect.destination == self.node.transport_address
                and self.hold_own_publications
                and isinstance(effect.message, PublishRequest)
            ):
                self.held.append(effect.message)
            elif isinstance(effect, Send) and effect.destination == self.node.transport_address:
                self._run(self.coordinator.handle_message(effect.destination, effect.message, self.now))
            elif isinstance(effect, Send):
                self.sent.append((effect.destination, effect.message))
            elif isinstance(effect, RequestCompleted):
                self.results[effect.request_id] = effect.result
            elif isinstance(effect, RecordHistory):
                self.history.append(effect.event.to_dict())

    def release(self) -> None:
        """Deliver the held publications to the node itself, and stop holding them."""
        self.hold_own_publications = False
        held, self.held = self.held, []
        for message in held:
            self.receive(self.node.transport_address, message)

    def advance(self, ms: int) -> None:
        """Let `ms` pass, firing every timer due on the way."""
        end = self.now + ms
        while (deadline := self.coordinator.next_deadline()) is not None and deadline <= end:
            self.now = max(self.now, deadline)
            self._run(self.coordinator.tick(self.now))
        self.now = end

    def receive(self, sender: str, message: Message) -> None:
        self._run(self.coordinator.handle_message(sender, message, self.now))

    def submit(self, request: ClientRequest, timeout_ms: int | None = None) -> int:
        self._next_request += 1
        self._run(self.coordinator.submit(self._next_request, request, self.now, timeout_ms))
        return self._next_request

    def take_sent(self, kind: type[Message] | None = None) -> list[tuple[str, Message]]:
        """The messages sent so far (of one kind), removed from `sent`."""
        taken = [(to, message) for to, message in self.sent if kind is None or isinstance(message, kind)]
        self.sent = [(to, message) for to, message in self.sent if (to, message) not in taken]
        return taken


def leader() -> OneNode:
    """A one-node cluster whose node has elected itself master."""
    node = OneNode.start()
    node.advance(5_000)
    assert node.coordinator.leader == node.node
    return node


def result_of(node: OneNode, request: ClientRequest) -> ClientResult:
    """The result of `request`, once the millisecond a one-node leadership round takes has passed."""
    request_id = node.submit(request)
    node.advance(1)
    return node.results[request_id]
