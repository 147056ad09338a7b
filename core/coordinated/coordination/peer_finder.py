"""Discovery, as Elasticsearch's PeerFinder: while a candidate, probe the seeds and every node heard of."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.effects import ProbeSeeds
from coordinated.coordination.messages import PeersRequest, PeersResponse
from coordinated.coordination.settings import CLUSTER_NAME, Parsed, Setting, parse_list, time_setting
from coordinated.coordination.state import DiscoveryNode


def parse_seed_hosts(value: str) -> tuple[str, ...]:
    hosts = parse_list(value)
    for host in hosts:
        _, sep, port = host.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"seed host [{host}] must be host:port with a transport port")
    return hosts


SEED_HOSTS = Setting(
    "discovery.seed_hosts", Parsed(parse_seed_hosts), "", "`host:port` transport addresses to discover peers from"
)
FIND_PEERS_INTERVAL = time_setting(
    "discovery.find_peers_interval", "1s", minimum="1ms", maximum="1m", doc="pause between discovery rounds"
)


class PeerFinder:
    def __init__(
        self,
        ctx: CoreContext,
        *,
        on_master_discovered: Callable[[DiscoveryNode], None],
        on_found_peers_updated: Callable[[], None],
        on_term_seen: Callable[[int], None],
    ) -> None:
        self.ctx = ctx
        self.on_master_discovered = on_master_discovered
        self.on_found_peers_updated = on_found_peers_updated
        self.on_term_seen = on_term_seen
        self.peers: dict[str, DiscoveryNode] = {}  # transport address -> node, for peers that answered
        self.unreachable: set[str] = set()  # addresses whose last probe failed
        self.peers_seen_terms: dict[str, int] = {}  # node id -> the term it last reported

    def activate(self) -> None:
        """Start probing rounds now (the node became a candidate)."""
        self.ctx.timers.schedule(self, self.ctx.now, self._round)

    def deactivate(self) -> None:
        self.ctx.timers.cancel(self)

    def _active(self) -> bool:
        return self.ctx.mode() is Mode.CANDIDATE

    def _round(self) -> None:
        if not self._active():
            return
        ctx = self.ctx
        ctx.emit(ProbeSeeds())
        known = {node.transport_address for node in ctx.accepted.nodes.values()}
        known.update(self.peers)
        self.probe(sorted(known))
        self.on_found_peers_updated()  # a lone node may have all it needs to bootstrap or win
        if self._active():
            ctx.timers.schedule(self, ctx.now + ctx.settings[FIND_PEERS_INTERVAL], self._round)

    def probe(self, addresses: Sequence[str]) -> None:
        if not self._active():
            return
        ctx = self.ctx
        request = PeersRequest(
            source=ctx.local_node, known_peers=tuple(self.peers.values()), cluster_name=ctx.base_settings[CLUSTER_NAME]
        )
        for address in addresses:
            if address != ctx.local_node.transport_address:
                ctx.send(address, request)

    def discovered_nodes(self) -> list[DiscoveryNode]:
        return [self.ctx.local_node, *self.peers.values()]

    def master_eligible_peers(self) -> list[DiscoveryNode]:
        return [node for node in self.peers.values() if node.master_eligible]

    def on_peers_request(self, sender: str, request: PeersRequest, leader: DiscoveryNode | None) -> None:
        ctx = self.ctx
        if request.cluster_name != ctx.base_settings[CLUSTER_NAME]:
            ctx.log("warning", f"ignoring discovery from {sender}: cluster name [{request.cluster_name}] differs")
            return
        if self._active():
            self._add_peer(request.source)
            known = tuple(self.peers.values())
        else:
            known = tuple(ctx.accepted.nodes.values())
        master = leader if not self._active() else None
        ctx.send(
            request.source.transport_address,
            PeersResponse(ctx.local_node, master, known, ctx.current_term, ctx.committed_uuid()),
        )

    def on_peers_response(self, sender: str, response: PeersResponse) -> None:
        ctx = self.ctx
        if ctx.foreign(response.cluster_uuid, sender):
            return
        self.unreachable.discard(sender)
        self.peers_seen_terms[response.source.id] = response.term
        if not self._active():
            return
        self._add_peer(response.source)
        if response.master is not None:
            self.on_master_discovered(response.master)
            return
        for peer in response.known_peers:
            if peer.transport_address not in self.peers and peer.id != ctx.local_node.id:
                ctx.send(
                    peer.transport_address,
                    PeersRequest(ctx.local_node, tuple(self.peers.values()), ctx.base_settings[CLUSTER_NAME]),
                )
        self.on_term_seen(response.term)
        self.on_found_peers_updated()

    def on_probe_failed(self, destination: str) -> None:
        self.unreachable.add(destination)
        self.peers.pop(destination, None)
        self.on_found_peers_updated()

    def _add_peer(self, node: DiscoveryNode) -> None:
        if node.id == self.ctx.local_node.id:
            return
        for address, known in list(self.peers.items()):
            if known.id == node.id and address != node.transport_address:
                del self.peers[address]  # the node moved
        self.peers[node.transport_address] = node
