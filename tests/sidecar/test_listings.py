"""The listings a node holds for range reads: a page that leaves keys for later pins its state; a
continuation reads the pinned state; pins expire and are bounded; a listing not held is gone."""

from __future__ import annotations

import pytest

from coordinated.coordination.state import ClusterState, KeyVersion
from coordinated.sidecar.features.listings import MAX_LISTINGS, PIN_SECONDS, ListingGone, Listings


def state(version: int, keys: list[str]) -> ClusterState:
    return ClusterState(
        cluster_name="t",
        version=version,
        state_uuid=f"s{version}",
        kv={key: version for key in keys},
        kv_versions={key: KeyVersion(version, 1) for key in keys},
    )


def names(page: object) -> list[str]:
    return [entry.key for entry in page.keys]  # type: ignore[attr-defined]


def test_a_continuation_reads_the_pinned_state_whatever_was_applied_since() -> None:
    listings = Listings()
    first = state(5, ["p/a", "p/b", "p/c", "q"])
    page = listings.first_page(first, "p/", None, 2, False, now=0.0)
    assert names(page) == ["p/a", "p/b"] and page.more and listings.pinned == 1
    later = state(6, ["p/a", "p/bb", "q"])
    listings.on_applied(first, later)
    rest = listings.next_page(later, 5, "p/", page.next, 2, False, now=1.0)
    assert names(rest) == ["p/c"] and rest.version == 5 and not rest.more
    assert names(listings.first_page(later, "p/", None, 10, False, now=1.0)) == ["p/a", "p/bb"]


def test_a_whole_listing_pins_nothing_and_a_continuation_at_the_applied_version_needs_no_pin() -> None:
    listings = Listings()
    applied = state(3, ["a", "b"])
    assert not listings.first_page(applied, "", None, 10, False, now=0.0).more and listings.pinned == 0
    assert names(listings.next_page(applied, 3, "", "a", 10, False, now=0.0)) == ["b"]
    with pytest.raises(ListingGone, match=r"version \[2\]"):
        listings.next_page(applied, 2, "", "a", 10, False, now=0.0)


def test_pins_expire_after_their_last_page_and_are_bounded() -> None:
    listings = Listings()
    states = [state(version, ["k/1", "k/2", "k/3"]) for version in range(1, MAX_LISTINGS + 3)]
    for index, pinned in enumerate(states):
        listings.first_page(pinned, "k/", None, 1, False, now=float(index))
    assert listings.pinned == MAX_LISTINGS  # the oldest went
    applied = states[-1]
    with pytest.raises(ListingGone):
        listings.next_page(applied, 1, "k/", "k/1", 1, False, now=20.0)
    assert names(listings.next_page(applied, 5, "k/", "k/1", 1, False, now=20.0)) == ["k/2"]
    with pytest.raises(ListingGone):
        listings.next_page(applied, 6, "k/", "k/1", 1, False, now=20.0 + PIN_SECONDS + 100)
