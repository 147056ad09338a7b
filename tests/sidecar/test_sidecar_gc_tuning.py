"""The node process tunes CPython's cyclic collector once it has started (see `tune_garbage_collector`)."""

from __future__ import annotations

import gc

from coordinated.sidecar.cli import GC_THRESHOLDS, tune_garbage_collector


def test_what_exists_at_start_is_frozen_and_collections_run_less_often() -> None:
    thresholds = gc.get_threshold()
    try:
        survivor = {"held": [1, 2, 3]}  # a container the collector tracks, alive across the call
        assert gc.is_tracked(survivor)
        tune_garbage_collector()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > 700  # CPython's default first-generation threshold
        assert gc.get_freeze_count() > 0
        assert not any(survivor is obj for obj in gc.get_objects())  # out of the collector's sight
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
