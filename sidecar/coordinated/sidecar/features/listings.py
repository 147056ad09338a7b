"""Range reads on this node: the sorted index of its applied state's keys, and the listings it holds so that
every page of a listing comes from the state its first page was read from.

A first page is read from the node's applied state (after a read barrier, unless local). When it does not
hold every key under the prefix, the node pins that state and the page's prefix keys (in order) for the next
pages: a continuation names the listing's version (`at_version`) and its last key (`after`), and is read from
the pinned state whatever was written since, as etcd's revision pins a range. A node holds at most
MAX_LISTINGS listings, each for PIN_SECONDS after its last page; a continuation of a listing that is not (or
no longer) pinned here, on a state that has moved on, is gone (410), and the listing starts again. A state
shares every unchanged part with the states after it, so a pinned listing costs its prefix's key names plus
what changed since.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass

from coordinated.coordination.ranges import RangePage, range_page
from coordinated.coordination.state import ClusterState, Derivations
from coordinated.coordination.state_index import SortedKeys

MAX_LISTINGS = 16
PIN_SECONDS = 60.0


class ListingGone(Exception):
    def __init__(self, version: int, prefix: str, applied: int) -> None:
        super().__init__(
            f"the listing of prefix [{prefix}] at version [{version}] is not held by this node (it keeps the "
            f"state of a listing for {PIN_SECONDS:.0f}s after its last page, at most {MAX_LISTINGS} listings, "
            f"and has applied version [{applied}] since): list again from the start, or continue through the "
            "node that served the first page"
        )


@dataclass
class _Listing:
    state: ClusterState
    keys: tuple[str, ...]  # the keys under the prefix in `state`, in order
    used: float  # when its last page was read (the loop's clock)


class Listings:
    def __init__(self, derivations: Derivations | None = None) -> None:
        self.index = SortedKeys(derivations)  # of the applied state, built on the first range read
        self._pinned: OrderedDict[tuple[int, str], _Listing] = OrderedDict()

    def on_applied(self, before: ClusterState, after: ClusterState) -> None:
        self.index.advance(before, after)

    def count(self, state: ClusterState, prefix: str) -> int:
        return self.index.at(state).count(prefix)

    def first_page(
        self,
        state: ClusterState,
        prefix: str,
        after: str | None,
        limit: int,
        keys_only: bool,
        now: float,
        writers: bool = False,
    ) -> RangePage:
        """A page of `state` (the applied one); pinned for its continuations if keys follow it. With `writers`,
        each key with its last writer."""
        index = self.index.at(state)
        page = range_page(state, index.with_prefix(prefix, after), limit, keys_only, writers=writers)
        if page.more:
            self._expire(now)
            keys = tuple(index.with_prefix(prefix))
            self._pinned[(state.version, prefix)] = _Listing(state, keys, now)
            self._pinned.move_to_end((state.version, prefix))
            while len(self._pinned) > MAX_LISTINGS:
                self._pinned.popitem(last=False)
        return page

    def next_page(
        self,
        applied: ClusterState,
        version: int,
        prefix: str,
        after: str | None,
        limit: int,
        keys_only: bool,
        now: float,
        writers: bool = False,
    ) -> RangePage:
        """A page of the listing of `prefix` at `version`: from the pinned state, or from the applied one if it
        is that version. Raises ListingGone otherwise."""
        self._expire(now)
        listing = self._pinned.get((version, prefix))
        if listing is None:
            if applied.version != version:
                raise ListingGone(version, prefix, applied.version)
            return self.first_page(applied, prefix, after, limit, keys_only, now, writers)
        listing.used = now
        self._pinned.move_to_end((version, prefix))
        start = 0 if after is None else bisect.bisect_right(listing.keys, after)
        return range_page(listing.state, listing.keys[start:], limit, keys_only, writers=writers)

    def _expire(self, now: float) -> None:
        while self._pinned:
            key, oldest = next(iter(self._pinned.items()))
            if now - oldest.used < PIN_SECONDS:
                return
            del self._pinned[key]

    @property
    def pinned(self) -> int:
        return len(self._pinned)
