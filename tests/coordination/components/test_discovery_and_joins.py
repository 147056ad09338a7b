"""PeerFinder and JoinHelper on a bench: probing, learning peers and their terms, finding a master."""

from __future__ import annotations

from coordinated.coordination.context import Mode
from coordinated.coordination.effects import ProbeSeeds
from coordinated.coordination.formation import ClusterFormationFailureHelper
from coordinated.coordination.joins import JOIN_TIMEOUT_MS, REJECTION_REPORTED_FOR_MS, JoinHelper
from coordinated.coordination.messages import JoinRequest, JoinResponse, PeersRequest, PeersResponse
from coordinated.coordination.peer_finder import FIND_PEERS_INTERVAL, PeerFinder

from .context import Bench
from .harness import discovery_node

PEER, OTHER, MASTER = discovery_node("peer"), discovery_node("other"), discovery_node("master")


def finder(bench: Bench) -> tuple[PeerFinder, list[str], list[int]]:
    masters: list[str] = []
    terms: list[int] = []
    peer_finder = PeerFinder(
        bench.ctx,
        on_master_discovered=lambda node: masters.append(node.name),
        on_found_peers_updated=lambda: None,
        on_term_seen=terms.append,
    )
    return peer_finder, masters, terms


def test_a_candidate_probes_its_seeds_every_interval_and_stops_when_deactivated() -> None:
    bench = Bench(mode=Mode.CANDIDATE)
    peer_finder, _, _ = finder(bench)
    peer_finder.activate()
    bench.advance_to(3 * bench.settings[FIND_PEERS_INTERVAL])
    assert sum(isinstance(effect, ProbeSeeds) for effect in bench.effects) == 4  # now, and after each interval
    peer_finder.deactivate()
    bench.effects.clear()
    bench.advance_to(10 * bench.settings[FIND_PEERS_INTERVAL])
    assert bench.effects == []


def test_peers_of_peers_are_probed_and_a_named_master_is_reported() -> None:
    bench = Bench(mode=Mode.CANDIDATE)
    peer_finder, masters, terms = finder(bench)
    peer_finder.on_peers_response(PEER.transport_address, PeersResponse(PEER, None, (OTHER,), term=3))
    assert [to for to, message in bench.sent() if isinstance(message, PeersRequest)] == [OTHER.transport_address]
    assert terms == [3] and PEER in peer_finder.discovered_nodes()
    peer_finder.on_peers_response(OTHER.transport_address, PeersResponse(OTHER, MASTER, (), term=4))
    assert masters == ["master"]


def test_a_join_request_is_not_repeated_before_the_join_timeout_unless_answered() -> None:
    bench = Bench(mode=Mode.CANDIDATE)
    joins = JoinHelper(bench.ctx)
    joins.on_master_discovered(MASTER)
    joins.on_master_discovered(MASTER)
    assert len([m for _, m in bench.sent() if isinstance(m, JoinRequest)]) == 1
    bench.ctx.now = JOIN_TIMEOUT_MS
    joins.on_master_discovered(MASTER)
    [(_, retry)] = bench.sent()
    assert isinstance(retry, JoinRequest)
    joins.on_join_response(MASTER.transport_address, JoinResponse(retry.request_id, ok=False, reason="busy"))
    joins.on_master_discovered(MASTER)
    assert len(bench.sent()) == 1, "an answered request may be sent again at once"


def test_a_refused_join_is_named_in_the_formation_problem_until_one_succeeds() -> None:
    bench = Bench(mode=Mode.CANDIDATE)
    joins = JoinHelper(bench.ctx)
    formation = ClusterFormationFailureHelper(bench.ctx, lambda: [bench.ctx.local_node], set, joins.recent_rejection)
    joins.on_master_discovered(MASTER)
    [(_, request)] = bench.sent()
    assert isinstance(request, JoinRequest)
    reason = "join from node rejected: it belongs to cluster [a] but this cluster is [b]"
    joins.on_join_response(MASTER.transport_address, JoinResponse(request.request_id, ok=False, reason=reason))
    problem = formation.problem()
    assert (
        problem is not None
        and f"the master at {MASTER.transport_address} refused this node's join: {reason}" in problem
    )
    bench.ctx.now += REJECTION_REPORTED_FOR_MS + 1  # an old refusal is no longer the reason
    assert "refused this node's join" not in (formation.problem() or "")
    bench.ctx.now -= REJECTION_REPORTED_FOR_MS + 1
    joins.on_join_response(MASTER.transport_address, JoinResponse(request.request_id, ok=True))
    assert "refused this node's join" not in (formation.problem() or "")
