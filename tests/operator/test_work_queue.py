"""The operator's work queue, driven with stand-in passes: one pass at a time per cluster, coalesced requests,
follow-ups that back off, one periodic loop however many clusters come and go, and nothing shared between two
queues."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

import kopf
import pytest

from coordinated.operator import handlers
from coordinated.operator.config import OperatorConfig
from coordinated.operator.planner import PAUSED_REASON, Action, ActionKind
from coordinated.operator.reconcile import driver
from coordinated.operator.work_queue import WorkQueue, follow_up_delay

LOG = logging.getLogger("test")


def cluster(name: str) -> kopf.Body:
    return kopf.Body({"metadata": {"namespace": "ns", "name": name}})


def queue_of(run_pass: Any, interval: float = 3600.0) -> WorkQueue:
    return WorkQueue(run_pass, lambda: interval, LOG)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def test_follow_up_passes_come_at_once_after_a_change_and_back_off_while_waiting() -> None:
    exclude = Action(ActionKind.EXCLUDE, "excluding demo-4", 5, nodes=("demo-4",))
    wait = Action(ActionKind.WAIT, "waiting for removed node(s) demo-4 to leave", 4)
    assert follow_up_delay(exclude, 0, 15) == 0.0
    assert [follow_up_delay(wait, n, 15) for n in range(7)] == [0.5, 1, 2, 4, 8, 15, 15]
    # The same change again and again (one that does not take) backs off too: never a tight loop.
    assert [follow_up_delay(exclude, n, 15) for n in range(1, 4)] == [1, 2, 4]
    for idle in (
        Action(ActionKind.NONE, "3 node(s), as requested", 3),
        Action(ActionKind.REFUSE, "not removing demo-2: no master", 3),
        Action(ActionKind.WAIT, PAUSED_REASON, 3),
    ):
        assert follow_up_delay(idle, 0, 15) is None


def test_requests_during_a_pass_are_coalesced_into_one_more() -> None:
    passes: list[str] = []

    async def scenario() -> None:
        release = asyncio.Event()

        async def slow_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
            passes.append(body["metadata"]["name"])
            await release.wait()

        work = queue_of(slow_pass)
        memo = kopf.Memo()
        work.watch(cluster("demo"))
        work.request_pass("ns/demo", memo)
        await settle()
        assert passes == ["demo"]  # at once, not after the reconcile interval
        for _ in range(3):
            work.request_pass("ns/demo", memo)
        work.request_pass("ns/other", memo)  # not a cluster the queue watches
        release.set()
        await settle()
        assert passes == ["demo", "demo"]
        work.forget("ns/demo")

    asyncio.run(scenario())


def test_passes_of_one_cluster_never_overlap() -> None:
    running: list[str] = []
    overlaps: list[str] = []

    async def scenario() -> None:
        async def one_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
            name = body["metadata"]["name"]
            if name in running:
                overlaps.append(name)
            running.append(name)
            await asyncio.sleep(0.01)
            running.remove(name)

        work = queue_of(one_pass)
        bodies = [cluster("a"), cluster("a"), cluster("b"), cluster("a")]
        await asyncio.gather(*(work.run(body, kopf.Memo(), LOG) for body in bodies))

    asyncio.run(scenario())
    assert overlaps == []


def test_a_change_is_followed_at_once_until_the_cluster_is_forgotten() -> None:
    decisions = [Action(ActionKind.EXCLUDE, "excluding demo-4", 5, nodes=("demo-4",)), Action(ActionKind.NONE, "", 3)]
    passes: list[str] = []

    async def scenario() -> None:
        async def deciding_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> Action:
            passes.append(body["metadata"]["name"])
            return decisions[min(len(passes), len(decisions)) - 1]

        work = queue_of(deciding_pass)
        work.watch(cluster("demo"))
        await work.run(cluster("demo"), kopf.Memo(), LOG)
        await settle()
        assert passes == ["demo", "demo"]  # the change, then its follow-up at once; NONE needs none
        work.forget("ns/demo")
        await work.run(cluster("demo"), kopf.Memo(), LOG)  # a pass outside the watch is not followed up
        await settle()
        assert passes == ["demo"] * 3

    asyncio.run(scenario())


def test_one_periodic_loop_however_many_clusters_come_and_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kopf hands each object a copy of the operator's memo: they share its queue, whose loop starts once."""

    async def fake_reconcile(*args: object) -> None:
        return None

    monkeypatch.setattr(driver, "reconcile", fake_reconcile)

    def loops() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if t.get_coro().__name__ == "reconcile_periodically"]  # type: ignore[union-attr]

    async def scenario() -> int:
        operator_memo = kopf.Memo(kube=None, http=None)
        operator_memo.work = handlers.make_work_queue(OperatorConfig(reconcile_interval_seconds=3600.0))
        operator_memo.work.start_periodic(operator_memo)  # what the startup handler does
        for index in range(5):
            body = cluster(f"c{index}")
            per_object = copy.copy(operator_memo)
            await handlers.track(event={"type": "ADDED"}, body=body, memo=per_object)
            per_object.work.start_periodic(per_object)  # again, from a copy: still the one loop
            if index < 4:
                await handlers.track(event={"type": "DELETED"}, body=body, memo=per_object)
        await asyncio.sleep(0)
        count = len(loops())
        operator_memo.work.stop()
        return count

    assert asyncio.run(scenario()) == 1


def test_the_periodic_loop_passes_over_every_watched_cluster() -> None:
    passes: list[str] = []

    async def scenario() -> None:
        async def one_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
            passes.append(body["metadata"]["name"])

        work = queue_of(one_pass, interval=0.001)
        for name in ("a", "b", "c"):
            work.watch(cluster(name))
        work.forget("ns/b")
        work.start_periodic(kopf.Memo())
        while len(passes) < 4:
            await asyncio.sleep(0.001)
        work.stop()

    asyncio.run(scenario())
    assert set(passes) == {"a", "c"}


def test_two_queues_share_nothing() -> None:
    async def no_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
        return None

    first, second = queue_of(no_pass), queue_of(no_pass)
    first.watch(cluster("demo"))
    assert first.watches("ns/demo") and not second.watches("ns/demo")


def test_pod_events_of_the_clusters_nodes_request_a_pass() -> None:
    requested: list[str] = []

    class Recording(WorkQueue):
        def request_pass(self, key: str, memo: kopf.Memo) -> None:
            requested.append(key)

    async def scenario() -> None:
        async def no_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
            return None

        memo = kopf.Memo(work=Recording(no_pass, lambda: 3600.0, LOG))

        def pod(name: str, instance: str, component: str = "node") -> kopf.Body:
            labels = {"app.kubernetes.io/instance": instance, "app.kubernetes.io/component": component}
            return kopf.Body({"metadata": {"namespace": "ns", "name": name, "labels": labels}})

        await handlers.pod_changed(body=pod("demo-0", "demo"), memo=memo)
        await handlers.pod_changed(body=pod("demo-audit-1", "demo", component="audit"), memo=memo)

    asyncio.run(scenario())
    assert requested == ["ns/demo"]


def test_a_pass_is_asked_for_a_new_or_changed_cluster_not_for_a_status_write() -> None:
    work = queue_of(None)
    body = {"metadata": {"namespace": "ns", "name": "demo", "generation": 1, "annotations": {}}, "status": {}}
    assert work.watch(kopf.Body(body))  # new
    assert not work.watch(kopf.Body({**body, "status": {"phase": "Ready"}}))  # a pass wrote its status
    kopf_only = {**body["metadata"], "annotations": {"kopf.coordinated.dev/last-handled-configuration": "{}"}}
    assert not work.watch(kopf.Body({**body, "metadata": kopf_only}))  # an older operator's own record
    assert work.watch(kopf.Body({**body, "metadata": {**body["metadata"], "generation": 2}}))  # the spec changed
    paused = {**body["metadata"], "generation": 2, "annotations": {"coordinated.dev/pause": "true"}}
    assert work.watch(kopf.Body({**body, "metadata": paused}))  # paused
    resumed = {**body["metadata"], "generation": 2, "annotations": {}}
    assert work.watch(kopf.Body({**body, "metadata": resumed}))  # and resumed: at once, not a pass later


def test_only_the_leader_runs_passes_and_a_new_leader_passes_over_every_cluster() -> None:
    passes: list[str] = []
    leading = [False]

    async def scenario() -> None:
        release = asyncio.Event()

        async def one_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> Action:
            passes.append(body["metadata"]["name"])
            await release.wait()
            return Action(ActionKind.WAIT, "waiting", 3)

        work = WorkQueue(one_pass, lambda: 0.001, LOG, leading=lambda: leading[0])
        memo = kopf.Memo()
        for name in ("a", "b"):
            work.watch(cluster(name))
            work.request_pass(f"ns/{name}", memo)
        work.start_periodic(memo)
        await asyncio.sleep(0.05)
        assert passes == []  # a follower follows the clusters, and changes nothing
        leading[0] = True
        work.lead(memo)
        await settle()
        assert sorted(passes) == ["a", "b"]  # at once, not after the interval
        leading[0] = False
        work.step_down()  # the passes under way are cancelled, the follow-ups and the loop stop
        release.set()
        await asyncio.sleep(0.05)
        assert sorted(passes) == ["a", "b"]
        leading[0] = True  # the Lease again: the replica reconciles again
        work.lead(memo)
        await settle()
        assert sorted(passes) == ["a", "a", "b", "b"]
        work.stop()

    asyncio.run(scenario())


def test_the_periodic_loop_leaves_a_cluster_whose_follow_up_is_pending() -> None:
    """A cluster that keeps waiting is followed up once per interval at most; the periodic pass came on top of
    it, two passes per interval (the API-server test's rate check failed on it, 14 to 17 in 10 intervals)."""
    passes: list[float] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()

        async def waiting_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> Action:
            passes.append(loop.time())
            await asyncio.sleep(0.02)  # a pass takes time: its API calls
            return Action(ActionKind.WAIT, "waiting for the cluster to bootstrap", 1)

        work = queue_of(waiting_pass, interval=0.05)
        memo = kopf.Memo()
        work.watch(cluster("demo"))
        await work.run(cluster("demo"), memo, LOG)
        work.start_periodic(memo)
        await asyncio.sleep(0.05 * 20)
        work.stop()

    asyncio.run(scenario())
    # One pass per interval, give or take the start: never two (about 40 before).
    assert len(passes) <= 20 + 3, len(passes)


def test_a_stopping_operator_lets_the_pass_under_way_end_before_closing_and_starts_no_other() -> None:
    """The operator's cleanup stops the queue, drains it, then closes the sidecar connections: a pass under way
    ends with the connections still open (before, it failed on a closed client and sent a ReconcileFailed Event
    on every operator upgrade), and nothing starts a pass after the stop."""
    closed = False
    outcomes: list[str] = []

    async def scenario() -> None:
        nonlocal closed
        started, release = asyncio.Event(), asyncio.Event()

        async def slow_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
            started.set()
            await release.wait()
            outcomes.append("closed client" if closed else "done")

        class Connections:
            async def aclose(self) -> None:
                nonlocal closed
                closed = True

        work = queue_of(slow_pass)
        memo = kopf.Memo(work=work, http=Connections())
        work.watch(cluster("demo"))
        work.request_pass("ns/demo", memo)
        await started.wait()
        closing = asyncio.create_task(handlers.close(memo=memo))
        await settle()
        assert not closing.done() and not closed  # waiting for the pass
        work.request_pass("ns/demo", memo)  # a pod event after the stop
        await work.run(cluster("demo"), memo, LOG)  # a change handler after the stop
        release.set()
        await closing
        assert closed

    asyncio.run(scenario())
    assert outcomes == ["done"]


def test_draining_is_bounded_by_its_timeout() -> None:
    async def scenario() -> None:
        never = asyncio.Event()

        async def stuck_pass(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger) -> None:
            await never.wait()

        work = queue_of(stuck_pass)
        work.watch(cluster("demo"))
        work.request_pass("ns/demo", kopf.Memo())
        await settle()
        work.stop()
        await asyncio.wait_for(work.drain(0.01), timeout=5)  # returns although the pass never ends
        work.forget("ns/demo")

    asyncio.run(scenario())
