"""The soak's flatness checks: a node's history is held to its bound (the retention's `max_size` plus one open
segment) from the first sample, while the rest of the data directory, RSS and descriptors must not grow past the
warm-up. A run too short for the history to fill up to its bound is not reported as growth."""

from __future__ import annotations

from bench.suites import soak


def samples_of(history_mb: list[float], store_mb: float = 4.19, rss_mb: float = 100.0) -> list[soak.Sample]:
    return [
        soak.Sample(float(minute), "node-1", store_mb + history, history, rss_mb, 30, 0.0, 0.0)
        for minute, history in enumerate(history_mb)
    ]


def test_the_soaks_history_bound_is_its_max_size_plus_one_segment() -> None:
    assert soak.history_bound_mb(soak.RETENTION) == (2 * 1024 * 1024 + 256 * 1024) / 1e6


def test_a_history_still_filling_up_to_its_bound_is_not_growth() -> None:
    """A 12-minute run at 50 writes/s, as measured: the history went from 0.4 to 2.0 MB, the store stayed flat."""
    filling = [0.1, 0.4, 0.6, 0.8, 1.0, 1.1, 1.3, 1.4, 1.6, 1.7, 1.8, 1.9, 2.0]
    assert soak.flatness_problems(samples_of(filling)) == []


def test_a_history_above_its_bound_is_named_even_when_it_is_flat() -> None:
    over = [2.5] * 13
    assert soak.flatness_problems(samples_of(over)) == [
        "node-1: its history reached 2.50 MB, above its bound of 2.36 MB"
    ]


def test_a_growing_store_is_named_though_the_history_is_bounded() -> None:
    samples = samples_of([2.0] * 13)
    for later in samples[8:]:
        later.disk_mb += 3.0  # the state store grows by 3 MB in the second half
    assert soak.flatness_problems(samples) == ["node-1: store_mb grew from 4.2 to 7.2"]
