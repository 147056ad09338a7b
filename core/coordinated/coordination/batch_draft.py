"""What the tasks of a batch build on: the batch's context (the master, its term, its limits and lease clock), the
draft each task's executor changes in turn, and the size limits a write is held to.

`batch.execute_batch` makes the draft and turns it into the next state; each client request's executor (in
`coordinated.coordination.requests`) changes the draft and returns its request's result.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinated.coordination import client
from coordinated.coordination.batch_keys import BatchKeys, state_entries_size, value_size
from coordinated.coordination.client import ClientResult
from coordinated.coordination.state import (
    ClusterState,
    Derivations,
    DiscoveryNode,
    Repository,
    Session,
    VotingConfigExclusion,
)

NO_LIMIT = 1 << 62


class StateSizes:
    """The total entry size of the master's newest states, so that a batch costs in proportion to its changes:
    it is summed over every key only for a state the master did not build itself (after an election)."""

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def of(self, state: ClusterState) -> int:
        size = self._known.get(state.state_uuid)
        if size is None:
            size = state_entries_size(state.kv)
            self.remember(state, size)
        return size

    def known(self, state: ClusterState) -> int | None:
        """The size if it is known already (no scan of the keys)."""
        return self._known.get(state.state_uuid)

    def remember(self, state: ClusterState, size: int) -> None:
        if len(self._known) >= 4:
            self._known.pop(next(iter(self._known)))
        self._known[state.state_uuid] = size


@dataclass(frozen=True)
class BatchContext:
    master: DiscoveryNode
    term: int
    voters: Collection[str]  # nodes whose join votes the master holds in this term
    max_exclusions: int
    auto_shrink: bool
    new_uuid: Callable[[], str]
    # The master's lease clock: whether a TTL session has gone without a keepalive for its TTL (now), and a
    # session as a checkpoint of its remaining TTL records it now (sessions.py).
    session_expired: Callable[[str], bool] = lambda session_id: False
    checkpoint_session: Callable[[str, Session], Session] = lambda session_id, session: session
    # The ephemeral keys of a session, and the keys under a prefix, in the base state (state_index); None: found
    # by a scan of every key.
    session_keys: Callable[[str], Collection[str]] | None = None
    keys_with_prefix: Callable[[str], Iterable[str]] | None = None
    max_value_size: int = NO_LIMIT  # cluster.metadata.max_value_size
    max_state_size: int = NO_LIMIT  # cluster.metadata.max_state_size
    sizes: StateSizes | None = None  # the base state's size (None: the state size is not limited)
    derivations: Derivations | None = None  # the node's, where the batch records how it derived its state
    # The gated `node_versions` of a state the batch builds (its nodes and configurations final): the master's
    # NodeVersions.to_publish; by default the base's, unchanged.
    node_versions: Callable[[ClusterState], Any] | None = None


@dataclass
class Draft:
    """What a batch builds, task after task: each executor changes it and returns its task's result."""

    context: BatchContext
    keys: BatchKeys
    nodes: dict[str, DiscoveryNode]
    exclusions: list[VotingConfigExclusion]
    settings: Mapping[str, str]
    repositories: dict[str, Repository]
    elected: bool = False


Result = ClientResult | None  # None: the task succeeds with the publication


def value_too_large_error(key: str, size: int, limit: int) -> client.ClusterError:
    return client.bad_request(
        f"the value of key [{key}] is [{size}] bytes, which is larger than the limit of [{limit}] bytes set by "
        "[cluster.metadata.max_value_size]"
    )


def state_too_large_error(before: int, after: int, limit: int) -> client.ClusterError:
    return client.bad_request(
        f"this write would make the stored keys and values [{after}] bytes (they are [{before}] bytes now), "
        f"which is more than the limit of [{limit}] bytes set by [cluster.metadata.max_state_size]"
    )


def first_oversized(puts: Iterable[tuple[str, Any]], limit: int) -> client.ClusterError | None:
    """The error of the first value above `limit` (`cluster.metadata.max_value_size`), if one is."""
    for key, value in puts:
        size = value_size(None if value is msgspec.UNSET else value)
        if size > limit:
            return value_too_large_error(key, size, limit)
    return None
