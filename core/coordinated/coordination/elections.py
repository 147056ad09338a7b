"""Elections, as Elasticsearch's ElectionSchedulerFactory and PreVoteCollector.

An `ElectionScheduler` runs while a candidate sees an election quorum: it fires after a random delay that
grows with each attempt, and each firing starts a `PreVoteRound`. A pre-vote round asks the master-eligible
peers whether they would vote for this node; only with a quorum of yes does the node start a real election
(a new term), so a node that cannot win does not disturb the cluster. Both are rounds: closing one ends it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.messages import PreVoteRequest, PreVoteResponse
from coordinated.coordination.node_versions import reported
from coordinated.coordination.settings import Settings, SettingsRule, format_time_ms, time_setting
from coordinated.coordination.state import DiscoveryNode

# Bounds as in Elasticsearch's ElectionSchedulerFactory.
ELECTION_INITIAL_TIMEOUT = time_setting(
    "cluster.election.initial_timeout",
    "100ms",
    minimum="1ms",
    maximum="10s",
    doc="upper bound of the first random election delay",
)
ELECTION_BACK_OFF_TIME = time_setting(
    "cluster.election.back_off_time",
    "100ms",
    minimum="1ms",
    maximum="60s",
    doc="added to the delay bound after each failed election",
)
ELECTION_MAX_TIMEOUT = time_setting(
    "cluster.election.max_timeout", "10s", minimum="200ms", maximum="300s", doc="largest election delay bound"
)
ELECTION_DURATION = time_setting(
    "cluster.election.duration",
    "500ms",
    minimum="1ms",
    maximum="300s",
    doc="how long an election may take before the next one is scheduled",
)


def _max_timeout_covers_initial_timeout(settings: Settings) -> str | None:
    initial, maximum = settings[ELECTION_INITIAL_TIMEOUT], settings[ELECTION_MAX_TIMEOUT]
    if maximum >= initial:
        return None
    return (
        f"setting [cluster.election.max_timeout] is [{format_time_ms(maximum)}], but must be at least "
        f"[cluster.election.initial_timeout] which is [{format_time_ms(initial)}]"
    )


MAX_TIMEOUT_COVERS_INITIAL_TIMEOUT = SettingsRule(
    "`cluster.election.max_timeout` must be at least `cluster.election.initial_timeout`",
    _max_timeout_covers_initial_timeout,
)


class ElectionScheduler:
    def __init__(self, ctx: CoreContext, start_round: Callable[[], None]) -> None:
        self.ctx = ctx
        self.start_round = start_round
        self.attempt = 0
        self._schedule(grace=0)

    @property
    def scheduled(self) -> bool:
        return self.ctx.timers.is_scheduled(self)

    def close(self) -> None:
        self.ctx.timers.cancel(self)

    def _schedule(self, grace: int) -> None:
        settings = self.ctx.settings
        self.attempt += 1
        max_delay = min(
            settings[ELECTION_MAX_TIMEOUT],
            settings[ELECTION_INITIAL_TIMEOUT] + (self.attempt - 1) * settings[ELECTION_BACK_OFF_TIME],
        )
        delay = self.ctx.rng.randint(1, max(1, max_delay)) + grace
        self.ctx.timers.schedule(self, self.ctx.now + delay, self._fire)

    def _fire(self) -> None:
        if self.ctx.mode() is not Mode.CANDIDATE:
            return
        self.start_round()
        self._schedule(grace=self.ctx.settings[ELECTION_DURATION])


class PreVoteRound:
    """The pre-votes collected for one attempt; an election starts at most once per round."""

    def __init__(self, ctx: CoreContext) -> None:
        self.votes: set[str] = {ctx.local_node.id}
        self.election_started = False


class PreVoteCollector:
    def __init__(
        self,
        ctx: CoreContext,
        *,
        is_election_quorum: Callable[[set[str]], bool],
        start_election: Callable[[], None],
        on_term_seen: Callable[[int], None],
    ) -> None:
        self.ctx = ctx
        self.is_election_quorum = is_election_quorum
        self.start_election = start_election
        self.on_term_seen = on_term_seen
        self.round: PreVoteRound | None = None

    def start_round(self, peers: Collection[DiscoveryNode]) -> None:
        ctx = self.ctx
        self.round = PreVoteRound(ctx)
        own = ctx.versions.version
        request = PreVoteRequest(ctx.local_node, ctx.current_term, ctx.committed_uuid(), own.release, own.wire)
        for node in peers:
            ctx.send(node.transport_address, request)
        self._check(self.round)

    def close(self) -> None:
        self.round = None

    def on_request(self, sender: str, request: PreVoteRequest, leader: DiscoveryNode | None) -> None:
        ctx = self.ctx
        if ctx.foreign(request.cluster_uuid, sender):
            return
        self.on_term_seen(request.current_term)
        if leader is not None and leader.id != request.source.id:
            return  # a node that knows a live leader does not help anyone disrupt it
        state = ctx.accepted
        version = reported(request.release, request.wire_version)
        if ctx.versions.candidate_problem(request.source, version, state) is not None:
            return  # a candidate of an older release than every node of the cluster gets no vote (node_versions)
        ctx.send(
            request.source.transport_address,
            PreVoteResponse(ctx.local_node, ctx.current_term, state.term, state.version, ctx.committed_uuid()),
        )

    def on_response(self, sender: str, response: PreVoteResponse) -> None:
        ctx = self.ctx
        if ctx.foreign(response.cluster_uuid, sender):
            return
        self.on_term_seen(response.current_term)
        pre_vote_round = self.round
        if ctx.mode() is not Mode.CANDIDATE or pre_vote_round is None:
            return
        state = ctx.accepted
        if (response.last_accepted_term, response.last_accepted_version) > (state.term, state.version):
            return  # it has newer state, so it would not vote for us
        pre_vote_round.votes.add(response.source.id)
        self._check(pre_vote_round)

    def _check(self, pre_vote_round: PreVoteRound) -> None:
        if pre_vote_round.election_started or not self.is_election_quorum(pre_vote_round.votes):
            return
        pre_vote_round.election_started = True
        self.start_election()
