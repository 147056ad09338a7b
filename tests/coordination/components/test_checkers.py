"""LeaderChecker and FollowersChecker alone, on a bench: checks, retries, failures, and closing."""

from __future__ import annotations

from coordinated.coordination.context import Mode
from coordinated.coordination.followers_checker import (
    FOLLOWER_CHECK_INTERVAL,
    FOLLOWER_CHECK_TIMEOUT,
    FOLLOWER_LAG_TIMEOUT,
    FollowersChecker,
    LagDetector,
)
from coordinated.coordination.leader_checker import (
    LEADER_CHECK_INTERVAL,
    LEADER_CHECK_RETRY_COUNT,
    LEADER_CHECK_TIMEOUT,
    LeaderChecker,
)
from coordinated.coordination.messages import FollowerCheck, FollowerCheckResponse, LeaderCheck, LeaderCheckResponse

from .context import Bench
from .harness import discovery_node

MASTER = discovery_node("master")


def test_the_leader_checker_gives_up_after_retry_count_unanswered_checks() -> None:
    bench = Bench(mode=Mode.FOLLOWER)
    failures: list[str] = []
    LeaderChecker(bench.ctx, MASTER, failures.append)
    settings = bench.settings
    # The first check after an interval; a timed-out check is retried at once.
    gives_up_at = settings[LEADER_CHECK_INTERVAL] + settings[LEADER_CHECK_TIMEOUT] * settings[LEADER_CHECK_RETRY_COUNT]
    bench.advance_to(gives_up_at - 1)
    assert failures == []
    bench.advance_to(gives_up_at)
    assert len(failures) == 1 and "3 consecutive checks" in failures[0]
    checks = [message for to, message in bench.sent() if to == MASTER.transport_address]
    assert len(checks) == settings[LEADER_CHECK_RETRY_COUNT] and all(isinstance(m, LeaderCheck) for m in checks)


def test_an_answered_leader_check_resets_the_failures_and_a_rejection_fails_at_once() -> None:
    bench = Bench(mode=Mode.FOLLOWER)
    failures: list[str] = []
    checker = LeaderChecker(bench.ctx, MASTER, failures.append)
    bench.advance_to(bench.settings[LEADER_CHECK_INTERVAL])
    [(_, check)] = bench.sent()
    assert isinstance(check, LeaderCheck)
    checker.on_response(LeaderCheckResponse(check.request_id, ok=True))
    assert checker.failures == 0 and failures == []
    bench.advance_to(2 * bench.settings[LEADER_CHECK_INTERVAL])
    [(_, second)] = bench.sent()
    assert isinstance(second, LeaderCheck)
    checker.on_response(LeaderCheckResponse(second.request_id, ok=False, reason="no longer master"))
    assert failures == ["leader rejected the check: no longer master"]


def test_a_closed_leader_checker_sends_nothing_and_ignores_late_answers() -> None:
    bench = Bench(mode=Mode.FOLLOWER)
    failures: list[str] = []
    checker = LeaderChecker(bench.ctx, MASTER, failures.append)
    bench.advance_to(bench.settings[LEADER_CHECK_INTERVAL])
    [(_, check)] = bench.sent()
    assert isinstance(check, LeaderCheck)
    checker.close()
    checker.on_response(LeaderCheckResponse(check.request_id, ok=False, reason="late"))
    bench.advance_to(10 * bench.settings[LEADER_CHECK_TIMEOUT])
    assert failures == [] and bench.sent() == [] and bench.timers.next_deadline() is None


def test_the_followers_checker_removes_a_follower_that_stops_answering() -> None:
    follower = discovery_node("follower")
    bench = Bench(mode=Mode.LEADER)
    bench.state = bench.state.replace(nodes={follower.id: follower, bench.ctx.local_node.id: bench.ctx.local_node})
    failed: list[tuple[str, str]] = []
    checker = FollowersChecker(
        bench.ctx,
        on_node_failed=lambda node_id, reason: failed.append((node_id, reason)),
        on_healthy=lambda node_id, response: None,
        on_term_seen=lambda term: None,
    )
    checker.sync(bench.state)
    settings = bench.settings
    bench.advance_to((settings[FOLLOWER_CHECK_INTERVAL] + settings[FOLLOWER_CHECK_TIMEOUT]) * 3)
    assert failed == [(follower.id, "failed 3 consecutive follower checks")]
    assert all(isinstance(message, FollowerCheck) for _, message in bench.sent())


def test_an_answering_follower_stays_and_a_closed_connection_removes_it_at_once() -> None:
    follower = discovery_node("follower")
    bench = Bench(mode=Mode.LEADER)
    bench.state = bench.state.replace(nodes={follower.id: follower})
    failed: list[tuple[str, str]] = []
    checker = FollowersChecker(
        bench.ctx,
        on_node_failed=lambda node_id, reason: failed.append((node_id, reason)),
        on_healthy=lambda node_id, response: None,
        on_term_seen=lambda term: None,
    )
    checker.sync(bench.state)
    for _ in range(5):
        bench.advance_to(bench.ctx.now + bench.settings[FOLLOWER_CHECK_INTERVAL])
        [(_, check)] = bench.sent()
        assert isinstance(check, FollowerCheck)
        checker.on_response(FollowerCheckResponse(follower.id, check.request_id, True, 1, 1, 1, 1))
    assert failed == []
    bench.advance_to(bench.ctx.now + bench.settings[FOLLOWER_CHECK_INTERVAL])
    [(address, check)] = bench.sent()
    assert isinstance(check, FollowerCheck)
    checker.on_send_failure(address, check)
    assert failed == [(follower.id, "disconnected")]


def test_the_lag_detector_reports_a_node_that_does_not_apply_in_time() -> None:
    follower, quick = discovery_node("slow"), discovery_node("quick")
    bench = Bench(mode=Mode.LEADER)
    bench.state = bench.state.replace(version=5, nodes={follower.id: follower, quick.id: quick})
    lagging: list[str] = []
    detector = LagDetector(bench.ctx, lambda node_id, reason: lagging.append(node_id))
    detector.start(bench.state)
    detector.record_applied(quick.id, 5)
    bench.advance_to(bench.settings[FOLLOWER_LAG_TIMEOUT])
    assert lagging == [follower.id] and detector.lagging_nodes_removed == 1
