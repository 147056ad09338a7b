"""Messages between the simulated nodes, over the faulty Network and on the Scheduler's clock: a refused or
broken connection is reported back to the sender, a blackhole swallows everything, and a message to a node
that restarted meanwhile is lost with its connection."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from coordinated.coordination.effects import Effect
from coordinated.coordination.messages import Message, decode_envelope
from coordinated.simulation.network import Link, Network
from coordinated.simulation.scheduler import Scheduler
from coordinated.simulation.sim_node import SimNode
from coordinated.simulation.versions import GatedFieldWatch, as_decoded_by, as_sent_by

RunEffects = Callable[[SimNode, list[Effect]], None]


class MessageBus:
    """`nodes` is the cluster's own list (nodes join and are replaced in it); `run_effects` carries out what a
    node returns when handed a message."""

    def __init__(
        self,
        scheduler: Scheduler,
        network: Network,
        nodes: list[SimNode],
        run_effects: RunEffects,
        gated_fields: GatedFieldWatch | None = None,
    ) -> None:
        self.gated_fields = gated_fields  # checks that no node is published a gated field it would drop
        self.scheduler = scheduler
        self.network = network
        self.nodes = nodes
        self._run_effects = run_effects
        # Tests can watch every message sent: tap(sender name, destination address, message).
        self.tap: Callable[[str, str, Message], None] | None = None

    def send(self, sender: SimNode, destination: str, message: Message) -> None:
        now = self.scheduler.now
        if self.tap is not None:
            self.tap(sender.name, destination, message)
        if destination == sender.address:  # a node's message to itself does not cross the network
            boots = sender.boots
            self.scheduler.schedule(now, lambda: self._deliver(sender, sender, boots, message))
            return
        target = next((node for node in self.nodes if node.address == destination), None)
        link = self.network.link(sender.address, destination)
        if link is Link.BLACKHOLE:  # nothing comes back, not even a refusal (an unused IP, a dropping firewall)
            return
        if target is None or link is Link.DISCONNECTED or not target.alive:
            self.scheduler.schedule(now + 1, lambda: self._fail_send(sender.index, sender.boots, destination, message))
            return
        if self.network.dropped():
            return
        if self.gated_fields is not None and sender.coordinator is not None:
            # The node the sender means at that address (a replaced node's successor may answer there).
            state = sender.coordinator.last_accepted_state
            meant = next((n.id for n in state.nodes.values() if n.transport_address == destination), target.node.id)
            known = sender.coordinator.ctx.versions.version_of(meant, state)
            self.gated_fields.published(sender.name, target.name, target.version, known, message)
        at = now + self.network.delay(sender.address, destination)
        target_boots = target.boots
        self.scheduler.schedule(at, lambda: self._deliver(sender, target, target_boots, message))

    def _deliver(self, sender: SimNode, target: SimNode, target_boots: int, message: Message) -> None:
        now = self.scheduler.now
        link = self.network.link(sender.address, target.address)
        if target.coordinator is None or target.boots != target_boots or link is Link.DISCONNECTED:
            # The connection it travelled on is gone: the sender notices.
            self.scheduler.schedule(
                now + 1, lambda: self._fail_send(sender.index, sender.boots, target.address, message)
            )
            return
        if link is Link.BLACKHOLE:
            return
        # A node of an older release sends and decodes only what it knows (simulation/versions.py).
        message = as_decoded_by(as_sent_by(message, sender.version), target.version)
        self._run_effects(target, target.coordinator.handle_message(sender.address, message, now))

    def deliver_late(self, sender: SimNode, target: SimNode, message: Message) -> None:
        """Deliver `message` now, whatever the links say: an answer that sat in the buffers of a paused process
        (SIGSTOP) or of a slow link, and arrives after the receiver has moved on."""
        if target.coordinator is not None:
            self._run_effects(target, target.coordinator.handle_message(sender.address, message, self.scheduler.now))

    def deliver_from_wire(self, target: SimNode, sender_address: str, data: bytes) -> str | None:
        """Hand `target` an encoded envelope as the sidecar's transport would: decoded first, and refused (with
        the reason returned) if it does not decode; None once delivered. For tests that forge peer messages."""
        try:
            envelope = decode_envelope(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as error:
            return str(error)
        if target.coordinator is not None:
            now = self.scheduler.now
            self._run_effects(target, target.coordinator.handle_message(sender_address, envelope.message, now))
        return None

    def deliver_seeds(self, index: int) -> None:
        """The seed addresses a node asked for (ProbeSeeds): every node's address."""
        sim_node = self.nodes[index]
        if sim_node.coordinator is not None:
            addresses = [node.address for node in self.nodes]
            self._run_effects(sim_node, sim_node.coordinator.handle_seed_addresses(addresses, self.scheduler.now))

    def _fail_send(self, index: int, boots: int, destination: str, message: Message) -> None:
        sim_node = self.nodes[index]
        if sim_node.coordinator is not None and sim_node.boots == boots:
            failure = sim_node.coordinator.handle_send_failure(destination, message, self.scheduler.now)
            self._run_effects(sim_node, failure)
