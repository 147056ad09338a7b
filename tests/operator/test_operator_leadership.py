"""Leader election on a Lease (leadership.py): the pure rule, and the election loop against a Lease store held in
memory with a clock the test moves, so that who leads when is exact (no sleeping on time)."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import replace

import pytest

from coordinated.operator.leadership import LeaderElection, LeaseConflict, LeaseRecord, Timing, decide

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def test_a_free_or_expired_lease_is_taken_and_a_held_one_is_not() -> None:
    taken = decide(None, "a", 15, 0, NOW)
    assert taken is not None and (taken.holder, taken.transitions) == ("a", 0)
    held = LeaseRecord("b", 15, "t0", "t1", 3, "7")
    assert decide(held, "a", 15, 14.9, NOW) is None  # b renewed within the duration, as this candidate saw it
    over = decide(held, "a", 15, 15, NOW)
    assert over is not None and (over.holder, over.transitions, over.resource_version) == ("a", 4, "7")
    renewed = decide(replace(held, holder="a"), "a", 15, 100, NOW)
    assert renewed is not None and renewed.holder == "a" and renewed.transitions == 3  # the holder renews
    released = replace(held, holder="", lease_duration_seconds=1)
    assert decide(released, "a", 15, 0, NOW) is not None  # released on a clean stop: taken at once


class Store:
    """A Lease in memory with resourceVersion checks, as the API server keeps it."""

    name = "lease"

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.reachable = True

    async def read(self) -> LeaseRecord | None:
        if not self.reachable:
            raise ConnectionError("API server unreachable")
        record = self.record
        await asyncio.sleep(0)  # two candidates interleave: both may read the same record
        return record

    async def write(self, record: LeaseRecord, create: bool) -> None:
        if not self.reachable:
            raise ConnectionError("API server unreachable")
        stored = self.record.resource_version if self.record else None
        if (create and self.record is not None) or (not create and record.resource_version != stored):
            raise LeaseConflict("conflict")
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def candidate(store: Store, name: str, clock: Clock, log: list[str]) -> LeaderElection:
    return LeaderElection(
        store, name, lambda: log.append(f"{name} leads"), lambda: log.append(f"{name} stops"),
        Timing(lease_duration=15, renew_deadline=10, retry_period=2), clock,
    )  # fmt: skip


def test_one_leads_the_other_takes_over_when_it_stops_renewing() -> None:
    store, clock, log = Store(), Clock(), []
    a, b = candidate(store, "a", clock, log), candidate(store, "b", clock, log)

    async def scenario() -> None:
        await a._attempt()
        await b._attempt()
        assert (a.leading, b.leading) == (True, False) and log == ["a leads"]
        for _ in range(10):  # a renews every retry period; b never gets it
            clock.now += 2
            await a._attempt()
            await b._attempt()
        assert (a.leading, b.leading) == (True, False)
        # a dies (no more renewals): b waits the lease duration from when it last saw a change, then takes over.
        clock.now += 14
        await b._attempt()
        assert not b.leading
        clock.now += 2
        await b._attempt()
        assert b.leading and store.record is not None and store.record.transitions == 1
        assert log == ["a leads", "b leads"]

    asyncio.run(scenario())


def test_a_leader_that_cannot_renew_steps_down_before_the_lease_expires() -> None:
    store, clock, log = Store(), Clock(), []
    a = candidate(store, "a", clock, log)

    async def scenario() -> None:
        await a._attempt()
        store.reachable = False
        clock.now += 9
        await a._attempt()
        assert a.leading  # within the renew deadline
        clock.now += 1
        await a._attempt()
        assert not a.leading and log == ["a leads", "a stops"]  # at 10 s: 5 s before anyone may take over

    asyncio.run(scenario())


def test_a_leader_whose_lease_another_took_steps_down_at_once() -> None:
    store, clock, log = Store(), Clock(), []
    a = candidate(store, "a", clock, log)

    async def scenario() -> None:
        await a._attempt()
        assert store.record is not None
        store.record = replace(store.record, holder="z")  # say, a's clock stalled and z took an expired lease
        await a._attempt()
        assert not a.leading and log == ["a leads", "a stops"]

    asyncio.run(scenario())


def test_a_clean_stop_releases_the_lease_for_an_immediate_takeover() -> None:
    store, clock, log = Store(), Clock(), []
    a, b = candidate(store, "a", clock, log), candidate(store, "b", clock, log)

    async def scenario() -> None:
        await a._attempt()
        await b._attempt()
        await a.release()
        await b._attempt()  # no waiting for the lease duration
        assert b.leading and log == ["a leads", "a stops", "b leads"]

    asyncio.run(scenario())


@pytest.mark.parametrize("first", ["a", "b"])
def test_two_candidates_racing_for_a_free_lease_one_wins(first: str) -> None:
    store, clock, log = Store(), Clock(), []
    a, b = candidate(store, "a", clock, log), candidate(store, "b", clock, log)

    async def scenario() -> None:
        await asyncio.gather(*((a._attempt(), b._attempt()) if first == "a" else (b._attempt(), a._attempt())))
        assert [a.leading, b.leading].count(True) == 1

    asyncio.run(scenario())
