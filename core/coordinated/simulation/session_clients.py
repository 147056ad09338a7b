"""Simulated applications that hold sessions with ephemeral keys, and the checks of what sessions promise.

A `SessionHolder` creates a TTL session through any node, writes an ephemeral key in it, and keeps it alive
through any node, retrying at once on another node when a keepalive fails; now and then it "dies": it stops
keeping the session alive, and later starts a new one. The checks, over the master's history events:

- a session is never ended early: no node applies a state without it sooner than a TTL after the sending
  of any keepalive that was acknowledged (so a failover, which restarts every TTL, never ends a kept-alive
  session; holders never end their sessions themselves, so every end is an expiry);
- an abandoned session, and with it its ephemeral key, ends within its TTL (plus the publication slack)
  after the later of the holder's last keepalive and the last master election: the key never outlives
  its session by more than the TTL plus the failover time;
- once the run heals, every abandoned session has ended and no ephemeral key is left;
- with `check_failover_extensions` (runs whose masters are killed, `run_master_kills`): between its
  abandonment and its end, an abandoned session was counted down by masters for no more than its TTL plus
  one failover allowance (`sessions.failover_allowance_ms`) per election in between, plus the slack of its
  expiry's publication. The time without a master is not counted: no master counts it.

The cluster itself checks, on every applied state, that every ephemeral key's session is in that state.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from coordinated.coordination.client import ClientResult, ClusterError, SessionInfo
from coordinated.coordination.publication import PUBLISH_TIMEOUT
from coordinated.coordination.requests.keys import KvPut
from coordinated.coordination.requests.sessions import SessionCreate, SessionKeepAlive
from coordinated.coordination.sessions import failover_allowance_ms
from coordinated.simulation.cluster import SimulatedCluster

SESSION_TTL_MS = 8_000


@dataclass
class HeldSession:
    id: str
    created_sent: int  # when the create request that made it was sent
    acked_keepalives: list[int] = field(default_factory=list)  # send times of acknowledged keepalives
    abandoned_at: int | None = None  # the holder stopped keeping it alive (no keepalive in flight then)
    seen_ended_at: int | None = None  # a keepalive answered 404


class SessionHolder:
    def __init__(self, cluster: SimulatedCluster, client_id: int, rng: random.Random, ttl_ms: int) -> None:
        self.cluster = cluster
        self.client_id = client_id
        self.rng = rng
        self.ttl_ms = ttl_ms
        self.active = True
        self.sessions: list[HeldSession] = []
        self.current: HeldSession | None = None
        self.in_flight = False
        self.abandon_chance = 0.1

    def _node(self) -> int:
        return self.rng.randrange(len(self.cluster.nodes))

    def _later(self, delay: int, action: Callable[[], None]) -> None:
        self.cluster.schedule(self.cluster.now + delay, action)

    def start(self) -> None:
        self._later(self.rng.randint(0, 500), self._create)

    def _create(self) -> None:
        if not self.active:
            return
        sent = self.cluster.now

        def done(result: ClientResult) -> None:
            if isinstance(result, SessionInfo):
                held = HeldSession(result.id, sent)
                self.sessions.append(held)
                self.current = held
                self._write_key(held, f"eph/{self.client_id}/{len(self.sessions)}")
                self._later(self.rng.randint(100, self.ttl_ms // 4), self._keepalive)
            else:
                self._later(self.rng.randint(100, 500), self._create)

        self.cluster.submit(self._node(), SessionCreate(ttl_ms=self.ttl_ms), client=self.client_id, on_done=done)

    def _write_key(self, held: HeldSession, key: str) -> None:
        """A blind put, retried through another node while the session is held and the answer is a 503."""

        def done(result: ClientResult) -> None:
            if isinstance(result, ClusterError) and result.status == 503 and self.current is held:
                self._later(self.rng.randint(50, 300), lambda: self._write_key(held, key))

        request = KvPut(key, self.client_id, session=held.id)
        self.cluster.submit(self._node(), request, client=self.client_id, on_done=done)

    def _keepalive(self) -> None:
        held = self.current
        if held is None or self.in_flight:
            return
        if not self.active or self.rng.random() < self.abandon_chance:
            held.abandoned_at = self.cluster.now  # the holder "dies": no keepalive is in flight
            self.current = None
            if self.active:
                self._later(self.rng.randint(500, 3_000), self._create)
            return
        sent = self.cluster.now
        self.in_flight = True

        def done(result: ClientResult) -> None:
            self.in_flight = False
            if isinstance(result, SessionInfo):
                held.acked_keepalives.append(sent)
                self._later(self.rng.randint(self.ttl_ms // 8, self.ttl_ms // 4), self._keepalive)
            elif isinstance(result, ClusterError) and result.status == 404:
                held.seen_ended_at = self.cluster.now
                self.current = None
                self._later(self.rng.randint(100, 500), self._create)
            else:
                self._later(self.rng.randint(20, 200), self._keepalive)  # through another node, soon

        keepalive = SessionKeepAlive(held.id)
        self.cluster.submit(self._node(), keepalive, client=self.client_id, on_done=done, timeout=self.ttl_ms // 4)

    def stop(self) -> None:
        """The holder dies: its current session is abandoned now, or when the keepalive in flight ends."""
        self.active = False
        if self.current is not None and not self.in_flight:
            self.current.abandoned_at = self.cluster.now
            self.current = None

    def abandon_now(self) -> None:
        """For the final check: a session still held (its keepalive never answered) is abandoned now."""
        if self.current is not None:
            self.current.abandoned_at = self.cluster.now
            self.current = None


def expiry_slack_ms(cluster: SimulatedCluster) -> int:
    """How long past its TTL a stopped holder's session may live: its expiry may wait behind a publication, then
    publish."""
    return 2 * cluster.nodes[0].settings[PUBLISH_TIMEOUT] + 5_000


def check_sessions(cluster: SimulatedCluster, holders: list[SessionHolder], slack_ms: int) -> int:
    """The session properties of the module docstring; returns how many sessions were checked."""
    elected = elections(cluster)
    final = cluster.leader()
    assert final is not None
    state = final.running().applied_state
    checked = 0
    for holder in holders:
        for held in holder.sessions:
            checked += 1
            ended_at = cluster.session_ended_at.get(held.id)
            renewed = max([held.created_sent, *held.acked_keepalives])
            if ended_at is not None and ended_at < renewed + holder.ttl_ms:
                cluster.violation(
                    f"session {held.id} ended at {ended_at}ms, within its TTL of {holder.ttl_ms}ms after a "
                    f"keepalive sent at {renewed}ms and acknowledged"
                )
            if held.abandoned_at is None:
                continue
            if ended_at is None or held.id in state.sessions:
                cluster.violation(f"session {held.id}, abandoned at {held.abandoned_at}ms, never ended")
            last_election = max((at for at in elected if at <= ended_at), default=0)
            bound = max(held.abandoned_at, last_election) + holder.ttl_ms + slack_ms
            if ended_at > bound:
                cluster.violation(
                    f"session {held.id} (and its key) outlived its holder: abandoned at {held.abandoned_at}ms, "
                    f"last election at {last_election}ms, ended at {ended_at}ms, beyond {bound}ms"
                )
    if state.kv_sessions:
        cluster.violation(f"ephemeral keys left after every holder stopped: {sorted(state.kv_sessions)}")
    return checked


def elections(cluster: SimulatedCluster) -> list[int]:
    """When each master was elected (ms), in order."""
    return sorted(
        round(event["ts"] * 1000) for node in cluster.nodes for event in node.history if event["type"] == "elected"
    )


def check_failover_extensions(cluster: SimulatedCluster, holders: list[SessionHolder], slack_ms: int) -> int:
    """No master change extended an abandoned session by more than its allowance (module docstring); returns
    how many abandoned sessions were checked."""
    elected = elections(cluster)
    checked = 0
    for holder in holders:
        for held in holder.sessions:
            ended_at = cluster.session_ended_at.get(held.id)
            if held.abandoned_at is None or ended_at is None:
                continue
            checked += 1
            counted = cluster.master_time(held.abandoned_at, ended_at)
            failovers = sum(1 for at in elected if held.abandoned_at < at <= ended_at)
            bound = holder.ttl_ms + failovers * failover_allowance_ms(holder.ttl_ms) + slack_ms
            if counted > bound:
                cluster.violation(
                    f"session {held.id}, abandoned at {held.abandoned_at}ms and ended at {ended_at}ms, was counted "
                    f"down by masters for {counted}ms, beyond its TTL plus {failovers} failover allowances ({bound}ms)"
                )
    return checked


def run_master_kills(
    seed: int, node_count: int = 3, holder_count: int = 4, kills: int = 8
) -> tuple[SimulatedCluster, int]:
    """Session holders through a run that kills the master again and again (kill -9: it stops at once) and
    restarts it a little later; then every holder stops. Checks `check_sessions` and
    `check_failover_extensions`; raises SafetyViolation naming the seed. Returns the cluster and how many
    abandoned sessions the failover check judged."""
    rng = random.Random(seed)
    cluster = SimulatedCluster(seed, node_count)
    cluster.run_for(3_000)
    holders = [
        SessionHolder(cluster, index, random.Random(rng.getrandbits(64)), SESSION_TTL_MS)
        for index in range(holder_count)
    ]
    for holder in holders:
        holder.abandon_chance = 0.3
        holder.start()
    for _ in range(kills):
        cluster.run_for(rng.randint(500, SESSION_TTL_MS // 2))
        leader = cluster.leader()
        if leader is not None:
            cluster.crash(leader.index)
            index = leader.index
            cluster.schedule(cluster.now + rng.randint(200, 4_000), partial(cluster.start_node, index))
    for holder in holders:
        holder.stop()
    for node in cluster.nodes:
        if not node.alive:
            cluster.start_node(node.index)
    cluster.stabilise()
    slack = expiry_slack_ms(cluster)
    cluster.run_for(SESSION_TTL_MS + slack)
    cluster.stabilise()
    for holder in holders:
        holder.abandon_now()
    check_sessions(cluster, holders, slack)
    return cluster, check_failover_extensions(cluster, holders, FAILOVER_SLACK_MS)


# What an expiry takes beyond its deadline in the simulator: its batch, publication and commit (1-20 ms a hop).
FAILOVER_SLACK_MS = 300
