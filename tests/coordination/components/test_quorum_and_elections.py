"""The joint quorum rule, and the election scheduler's and pre-vote collector's rounds."""

from __future__ import annotations

import itertools

from coordinated.coordination.context import Mode
from coordinated.coordination.elections import (
    ELECTION_DURATION,
    ELECTION_MAX_TIMEOUT,
    ElectionScheduler,
    PreVoteCollector,
)
from coordinated.coordination.messages import PreVoteRequest, PreVoteResponse
from coordinated.coordination.quorum import joint_quorum
from coordinated.coordination.state import VotingConfiguration

from .context import Bench
from .harness import discovery_node


def test_a_joint_quorum_needs_a_majority_of_each_configuration() -> None:
    old, new = VotingConfiguration.of("abc"), VotingConfiguration.of("cde")
    assert joint_quorum(old, old, {"a", "b"})
    assert not joint_quorum(old, new, {"a", "b"}), "a majority of the old configuration only"
    assert not joint_quorum(old, new, {"d", "e"}), "a majority of the new configuration only"
    assert joint_quorum(old, new, {"a", "c", "d"})
    assert not joint_quorum(VotingConfiguration(), VotingConfiguration(), {"a"}), "an empty one never has a quorum"


def test_the_election_scheduler_backs_off_and_stops_when_closed() -> None:
    bench = Bench(mode=Mode.CANDIDATE)
    rounds: list[int] = []
    scheduler = ElectionScheduler(bench.ctx, lambda: rounds.append(bench.ctx.now))
    settings = bench.settings
    bench.advance_to(60_000)
    assert len(rounds) >= 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(rounds)]
    assert all(gap > settings[ELECTION_DURATION] for gap in gaps), "every attempt gets its election duration"
    assert all(gap <= settings[ELECTION_MAX_TIMEOUT] + settings[ELECTION_DURATION] for gap in gaps)
    scheduler.close()
    count = len(rounds)
    bench.advance_to(120_000)
    assert len(rounds) == count and not scheduler.scheduled


def test_a_pre_vote_round_starts_one_election_on_a_quorum_and_none_after_close() -> None:
    peers = [discovery_node("a"), discovery_node("b")]
    bench = Bench(mode=Mode.CANDIDATE)
    ids = [bench.ctx.local_node.id, *(peer.id for peer in peers)]
    bench.state = bench.state.replace(
        coordination=bench.state.coordination.__class__(
            last_committed_config=VotingConfiguration.of(ids), last_accepted_config=VotingConfiguration.of(ids)
        )
    )
    elections: list[str] = []
    collector = PreVoteCollector(
        bench.ctx,
        is_election_quorum=lambda votes: joint_quorum(
            bench.state.last_committed_config, bench.state.last_accepted_config, votes
        ),
        start_election=lambda: elections.append("started"),
        on_term_seen=lambda term: None,
    )
    collector.start_round(peers)
    requests = bench.sent()
    assert [to for to, _ in requests] == [peer.transport_address for peer in peers]
    assert all(isinstance(message, PreVoteRequest) for _, message in requests)
    for peer in peers:
        collector.on_response(peer.transport_address, PreVoteResponse(peer, 1, 0, 0))
    assert elections == ["started"], "one election per round, however many votes come"
    collector.close()
    collector.on_response(peers[0].transport_address, PreVoteResponse(peers[0], 1, 0, 0))
    assert elections == ["started"]
