"""The recent diffs between the states this node accepted, so that the master can bring a node that lags or
rejoins after a restart up to date with the changes it missed rather than with the whole state.

A bounded ring, by count and by encoded size (`cluster.publish.diff_history.max_diffs` and `.max_size`): the
oldest diffs go first. Every node keeps one, since any master-eligible node may become master. The ring is
always a chain ending at the last accepted state; a state that is not derived from the previous one (a full
state received after a gap) restarts it.

Elasticsearch sends a follower a diff against the state the master believes it holds and falls back to the
full state when the diff does not apply (PublicationTransportHandler); the same fallback covers a diff
built from this ring: the follower answers `need_full_state` and the master sends the full state.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

from coordinated.coordination.context import CoreContext
from coordinated.coordination.messages import ApplyCommit, JoinRequest, PublishRequest, PublishResponse
from coordinated.coordination.settings import int_setting, size_setting
from coordinated.coordination.state import (
    MAP_FIELDS,
    ClusterState,
    ClusterStateDiff,
    Derivations,
    compose_diffs,
    compute_diff,
    encode_diff,
)

# Each node's memory: any value leaves the cluster working (0 diffs: a node that missed a state gets the full one).
DIFF_HISTORY_MAX_DIFFS = int_setting(
    "cluster.publish.diff_history.max_diffs",
    10_000,
    minimum=0,
    maximum=1_000_000,
    dynamic=True,
    doc="how many recent diffs each node keeps to catch a lagging or restarted node up without the full state "
    "(0: always the full state)",
)
DIFF_HISTORY_MAX_SIZE = size_setting(
    "cluster.publish.diff_history.max_size",
    "64mb",
    minimum="1b",
    maximum="1gb",
    dynamic=True,
    doc="the most bytes (encoded) those diffs may take; the oldest go first",
)


class _Entry:
    __slots__ = ("base", "diff", "size")

    def __init__(self, base: tuple[int, int], diff: ClusterStateDiff, size: int) -> None:
        self.base = base  # (term, version) of the state the diff applies to
        self.diff = diff
        self.size = size


class DiffHistory:
    def __init__(self, max_diffs: int, max_size: int, derivations: Derivations | None = None) -> None:
        self.derivations = derivations  # the node's: a diff of a state derived from the last costs the change
        self.max_diffs = max_diffs
        self.max_size = max_size
        self._entries: deque[_Entry] = deque()
        self._size = 0
        self._last: ClusterState | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def last(self) -> ClusterState | None:
        """The last state recorded, as it was accepted."""
        return self._last

    @property
    def size(self) -> int:
        """The encoded size of the diffs held, in bytes."""
        return self._size

    def resize(self, max_diffs: int, max_size: int) -> None:
        self.max_diffs, self.max_size = max_diffs, max_size
        self._trim()

    def record(self, state: ClusterState) -> None:
        """`state` is now this node's last-accepted state."""
        last = self._last
        if last is state:
            return
        self._last = state
        if last is None or state.parent_uuid != last.state_uuid or state.parent_uuid is None:
            self.clear(keep_last=True)
            return
        if self.max_diffs == 0:
            return
        diff = compute_diff(last, state, self.derivations)  # in proportion to the change: derived from `last`
        entry = _Entry(last.term_version(), diff, len(encode_diff(diff)))
        self._entries.append(entry)
        self._size += entry.size
        self._trim()

    def clear(self, keep_last: bool = False) -> None:
        self._entries.clear()
        self._size = 0
        if not keep_last:
            self._last = None

    def diff_since(self, term: int, version: int, current: ClusterState) -> ClusterStateDiff | None:
        """One diff from the state (term, version) to `current`, the last accepted state, if the ring reaches
        back to it and is worth sending (smaller than the state's maps); else None: send the full state.

        Whether the receiver holds exactly that state is its own check (the diff's base UUID)."""
        if self._last is not current or (term, version) >= current.term_version():
            return None
        # Each diff moves the chain one version on, so the one based on `version` is found by subtraction.
        entries = self._entries
        if not entries:
            return None
        index = version - entries[0].base[1]
        if not 0 <= index < len(entries) or entries[index].base != (term, version):
            return None
        diff = compose_diffs([entry.diff for entry in islice(entries, index, None)])
        return diff if worth_sending(diff, current) else None

    def _trim(self) -> None:
        while self._entries and (len(self._entries) > self.max_diffs or self._size > self.max_size):
            self._size -= self._entries.popleft().size


def worth_sending(diff: ClusterStateDiff, state: ClusterState) -> bool:
    """A diff that touches fewer entries than the state's maps hold beats the full state."""
    touched = sum(len(getattr(diff, name).upserts) + len(getattr(diff, name).deletes) for name in MAP_FIELDS)
    return touched < sum(len(getattr(state, name)) for name in MAP_FIELDS)


# How many joining nodes' accepted states the master remembers: only ever a handful, bounded against a flood.
MAX_JOINERS_REMEMBERED = 1024


class CatchUp:
    """Which diff brings a node up to date: the node's own diff history, and the accepted state of each node
    that asked to join (a restarted node), which the master would otherwise send the full state."""

    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        settings = ctx.settings
        self.history = DiffHistory(settings[DIFF_HISTORY_MAX_DIFFS], settings[DIFF_HISTORY_MAX_SIZE], ctx.derivations)
        self.history.record(ctx.accepted)
        self._joiners: dict[str, tuple[int, int]] = {}
        self.diffs_sent = 0  # catch-ups by diff rather than by the full state, for metrics and tests

    def on_accepted(self, state: ClusterState) -> None:
        settings = self.ctx.settings  # dynamic: follows the applied state's settings
        self.history.resize(settings[DIFF_HISTORY_MAX_DIFFS], settings[DIFF_HISTORY_MAX_SIZE])
        self.history.record(state)

    def on_join_request(self, request: JoinRequest) -> None:
        if request.accepted_version == 0 or request.source.id == self.ctx.local_node.id:
            return
        if len(self._joiners) >= MAX_JOINERS_REMEMBERED:
            self._joiners.clear()
        self._joiners[request.source.id] = (request.accepted_term, request.accepted_version)

    def joiner_diff(self, node_id: str) -> ClusterStateDiff | None:
        """For a node joining in a publication: the diff from its accepted state to the publication's base."""
        accepted = self._joiners.pop(node_id, None)
        return None if accepted is None else self.diff_since(*accepted)

    def as_published(self, state: ClusterState) -> ClusterState:
        """`state` (this node's last-accepted state) as it was published and accepted. A commit marks this
        node's copy (the last-committed configuration becomes the accepted one) under the same state UUID; a
        node that missed the publication must be sent what the others accepted, or one UUID would name two
        contents (the audit's unique-state-per-version). As in Elasticsearch, the marking stays local."""
        accepted = self.history.last
        if accepted is not None and accepted.state_uuid == state.state_uuid:
            return accepted
        return state

    def on_late_response(self, response: PublishResponse) -> None:
        """A follower's answer that came after its publication completed, or to a catch-up: the follower gets
        what it still misses now rather than at the next follower check. That is the whole state, as a
        publication sends it, when it could not apply a diff (its state is not the diff's base), and otherwise
        the commit of the state it accepted (the leader's last-accepted state is committed once no publication
        is in flight); without it, the follower's watchers would see the change up to a check interval late."""
        ctx = self.ctx
        state = ctx.accepted
        node = state.nodes.get(response.source_id)
        if node is None or (response.term, response.version) != state.term_version():
            return  # about an older state: the next follower check finds what the node still misses
        if response.need_full_state:
            published = self.as_published(state)
            ctx.send(node.transport_address, PublishRequest(ctx.local_node, state.term, state.version, state=published))
        elif response.ok:
            ctx.send(node.transport_address, ApplyCommit(ctx.local_node.id, state.term, state.version))

    def diff_since(self, term: int, version: int) -> ClusterStateDiff | None:
        """The changes from the state (term, version) to this node's last-accepted one, if it still has them."""
        diff = self.history.diff_since(term, version, current=self.as_published(self.ctx.accepted))
        if diff is not None:
            self.diffs_sent += 1
        return diff
