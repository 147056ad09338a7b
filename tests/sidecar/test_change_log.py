"""The change log that watches are served from, on hand-built applied states."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from coordinated.coordination import state as state_module
from coordinated.coordination.state import ClusterState, Derivations, KeyVersion, apply_diff, diff_between
from coordinated.sidecar.features.change_log import ChangeLog, ChangesGone, prefixes_touched


def state(version: int, keys: dict[str, tuple[Any, int, int]], master: str | None = "m") -> ClusterState:
    """keys: {key: (value, version, create_version)}."""
    return ClusterState(
        cluster_name="c",
        version=version,
        master_node=master,
        kv={key: value for key, (value, _, _) in keys.items()},
        kv_versions={key: KeyVersion(v, c) for key, (_, v, c) in keys.items()},
    )


def summary(events: list[Any]) -> list[tuple[str, str, Any, int]]:
    return [(e.type, e.key, e.value, e.version) for e in events]


def test_puts_and_deletes_in_version_order_filtered_by_prefix() -> None:
    log = ChangeLog(100)
    assert log.record(state(5, {"a/x": (1, 3, 3)})) == []  # the first state is the base
    assert log.record(state(6, {"a/x": (1, 3, 3), "b/y": (2, 6, 6)})) == ["b/y"]
    assert log.record(state(7, {"a/x": (9, 7, 3), "b/y": (2, 6, 6)})) == ["a/x"]
    assert log.record(state(8, {"b/y": (2, 6, 6)})) == ["a/x"]
    events, version = log.events_after("a/", 5, 100)
    assert summary(events) == [("put", "a/x", 9, 7), ("delete", "a/x", None, 8)]
    assert version == 8
    events, version = log.events_after("", 6, 100)
    assert summary(events) == [("put", "a/x", 9, 7), ("delete", "a/x", None, 8)]
    events, version = log.events_after("b/", 6, 100)
    assert events == [] and version == 8
    with pytest.raises(ChangesGone):
        log.events_after("a/", 4, 100)


def test_a_skipped_span_is_one_step_with_the_latest_values() -> None:
    log = ChangeLog(100)
    log.record(state(2, {"k": (1, 2, 2), "gone": (0, 1, 1)}))
    # The node lagged: versions 3..9 arrive as one full state.
    log.record(state(10, {"k": (3, 8, 2), "new": (4, 5, 5)}))
    events, version = log.events_after("", 2, 100)
    assert version == 10
    assert summary(events) == [("put", "new", 4, 5), ("put", "k", 3, 8), ("delete", "gone", None, 10)]
    # A watcher that had seen up to 6 elsewhere gets what changed after 6 (the delete conservatively too).
    events, _ = log.events_after("", 6, 100)
    assert summary(events) == [("put", "k", 3, 8), ("delete", "gone", None, 10)]


def test_the_bound_drops_the_oldest_steps_and_answers_gone() -> None:
    log = ChangeLog(3)
    log.record(state(1, {}))
    keys: dict[str, tuple[Any, int, int]] = {}
    for version in range(2, 7):
        keys = {**keys, f"k{version}": (version, version, version)}
        log.record(state(version, keys))
    assert log.base == 3
    with pytest.raises(ChangesGone):
        log.events_after("", 2, 100)
    events, version = log.events_after("", 3, 100)
    assert [e.key for e in events] == ["k4", "k5", "k6"] and version == 6


def test_the_limit_cuts_between_steps_and_the_version_says_where() -> None:
    log = ChangeLog(100)
    log.record(state(1, {}))
    keys: dict[str, tuple[Any, int, int]] = {}
    for version in range(2, 6):
        keys = {**keys, f"k{version}": (version, version, version)}
        log.record(state(version, keys))
    events, version = log.events_after("", 1, 2)
    assert [e.key for e in events] == ["k2", "k3"] and version == 3
    events, version = log.events_after("", version, 2)
    assert [e.key for e in events] == ["k4", "k5"] and version == 5


def test_states_without_a_master_and_unchanged_states_add_nothing() -> None:
    log = ChangeLog(100)
    # At startup the recovered (maybe never committed) state is shown without a master: not a base.
    log.record(state(9, {"uncommitted": (1, 9, 9)}, master=None))
    assert log.base is None
    log.record(state(8, {}))
    assert log.base == 8
    log.record(state(8, {}, master=None))
    log.record(state(9, {}))
    assert log.events_after("", 8, 100) == ([], 9)


def test_a_restart_of_the_log_when_a_state_goes_back() -> None:
    log = ChangeLog(100)
    log.record(state(5, {}))
    log.record(state(6, {"a": (1, 6, 6)}))
    log.record(state(4, {}))
    assert log.base == 4
    with pytest.raises(ChangesGone):
        log.events_after("", 3, 100)


def test_prefixes_touched() -> None:
    keys = sorted(["app/a", "app/b/c", "locks/x"])
    assert sorted(prefixes_touched(["app/", "app/b/", "locks/y", "", "zz", "locks/x"], keys)) == [
        "",
        "app/",
        "app/b/",
        "locks/x",
    ]


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError):
        ChangeLog(0)


def test_a_log_that_started_without_keys_serves_a_watch_from_zero_until_it_drops_a_change() -> None:
    log = ChangeLog(2)
    log.record(state(3, {}))
    log.record(state(4, {"a": (1, 4, 4)}))
    assert summary(log.events_after("", 0, 100)[0]) == [("put", "a", 1, 4)]
    with pytest.raises(ChangesGone):
        log.events_after("", 2, 100)  # a watcher at 2 may have seen keys deleted before 3
    log.record(state(5, {"a": (1, 4, 4), "b": (2, 5, 5)}))
    log.record(state(6, {"a": (1, 4, 4), "b": (2, 5, 5), "c": (3, 6, 6)}))
    with pytest.raises(ChangesGone):
        log.events_after("", 0, 100)
    started_with_keys = ChangeLog(10)
    started_with_keys.record(state(3, {"a": (1, 2, 2)}))
    with pytest.raises(ChangesGone):
        started_with_keys.events_after("", 0, 100)


DERIVATIONS = Derivations()  # as a node's


def derived(base: ClusterState, version: int, key: str, value: Any) -> ClusterState:
    """`base` with one key written, the way a node gets it: `apply_diff`, which records the derivation."""
    shape = base.replace(version=version, state_uuid=f"s{version}", parent_uuid=base.state_uuid)
    diff = diff_between(
        base, shape, {"kv": ({key: value}, ()), "kv_versions": ({key: KeyVersion(version, version)}, ())}
    )
    return apply_diff(base, diff, DERIVATIONS)


def test_states_accepted_but_never_applied_keep_the_comparison_in_proportion_to_the_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = ChangeLog(100, DERIVATIONS)  # the node's, which its core records into
    applied = state(1, {f"k{i}": (i, 1, 1) for i in range(1000)}).replace(state_uuid="s1")
    log.record(applied)
    # A follower accepts versions 2 and 3 but applies only 4 (the commit of 2 and 3 came too late): nothing
    # but the change log's hold keeps them alive.
    accepted = derived(applied, 2, "k1", "two")
    log.hold(accepted)
    accepted = derived(accepted, 3, "k2", "three")
    log.hold(accepted)
    newest = derived(accepted, 4, "k3", "four")
    log.hold(newest)
    del accepted
    gc.collect()

    def compare_every_key(*args: object) -> None:
        raise AssertionError("compared every key of the state")

    monkeypatch.setattr(state_module, "diff_maps", compare_every_key)
    assert log.record(newest) == ["k1", "k2", "k3"]
    events, _ = log.events_after("", 1, 100)
    assert summary(events) == [("put", "k1", "two", 2), ("put", "k2", "three", 3), ("put", "k3", "four", 4)]
    assert len(log._held) == 0  # released once applied
