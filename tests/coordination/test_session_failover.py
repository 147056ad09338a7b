"""Sessions across master changes in the simulator: a holder that keeps its session alive through any node
never loses it to a failover (a new master restarts every TTL in full), and once it stops, its ephemeral key
goes within the TTL of the last election, or of its last keepalive."""

from __future__ import annotations

import random

from coordinated.coordination.client import KvGet, ReadValue
from coordinated.simulation.cluster import SimulatedCluster
from coordinated.simulation.session_clients import SESSION_TTL_MS, SessionHolder, check_sessions


def test_a_kept_alive_session_survives_repeated_master_crashes_and_ends_once_abandoned() -> None:
    cluster = SimulatedCluster(42, 3)
    cluster.run_for(3_000)
    holder = SessionHolder(cluster, 1, random.Random(1), SESSION_TTL_MS)
    holder.abandon_chance = 0.0
    holder.start()
    cluster.run_for(3_000)
    assert holder.current is not None
    session = holder.current.id
    crashes = 0
    for _ in range(4):
        leader = cluster.leader()
        assert leader is not None
        cluster.crash(leader.index)
        crashes += 1
        cluster.run_for(20_000)  # longer than the TTL: a new master must take over and keep the session
        cluster.start_node(leader.index)
        cluster.run_for(5_000)
    assert crashes == 4 and session not in cluster.session_ended_at
    assert holder.sessions == [holder.current] and len(holder.current.acked_keepalives) > 10
    reads: list[object] = []
    cluster.submit(0, KvGet("eph/1/1"), on_done=reads.append)
    cluster.run_for(2_000)
    assert isinstance(reads[0], ReadValue) and reads[0].found and reads[0].session == session, reads
    elected = [event for node in cluster.nodes for event in node.history if event["type"] == "elected"]
    assert len(elected) > crashes  # the session really lived through master changes

    holder.stop()
    cluster.run_for(SESSION_TTL_MS + 10_000)
    holder.abandon_now()
    assert session in cluster.session_ended_at
    assert check_sessions(cluster, [holder], slack_ms=2_000) == 1
    expired = [e for node in cluster.nodes for e in node.history if e["type"] == "session_expired"]
    assert [e["session"] for e in expired] == [session]
