"""Fault detection on the master, as Elasticsearch's FollowersChecker and LagDetector.

The master checks every other node of the published state at `cluster.fault_detection.follower_check.*`
and removes a node after too many consecutive failures or at once when its connection closes. A node that
does not apply a committed state within `cluster.follower_lag.timeout` is removed as lagging.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from coordinated.coordination.context import CoreContext, Mode
from coordinated.coordination.messages import FollowerCheck, FollowerCheckResponse
from coordinated.coordination.settings import int_setting, time_setting
from coordinated.coordination.state import ClusterState

# Lower bounds as in Elasticsearch's FollowersChecker.
FOLLOWER_CHECK_INTERVAL = time_setting(
    "cluster.fault_detection.follower_check.interval",
    "1s",
    minimum="100ms",
    maximum="1m",
    doc="the master checks each follower this often",
)
FOLLOWER_CHECK_TIMEOUT = time_setting(
    "cluster.fault_detection.follower_check.timeout",
    "10s",
    minimum="1ms",
    maximum="5m",
    doc="a follower check fails after this long",
)
FOLLOWER_CHECK_RETRY_COUNT = int_setting(
    "cluster.fault_detection.follower_check.retry_count",
    3,
    minimum=1,
    maximum=100,
    doc="failed follower checks in a row before the master removes the node",
)
# Node-level, as in Elasticsearch: a value that removes every follower could not be reset by the cluster it
# takes apart. At least a second: applying a committed state takes a follower milliseconds to a few hundred.
FOLLOWER_LAG_TIMEOUT = time_setting(
    "cluster.follower_lag.timeout",
    "90s",
    minimum="1s",
    maximum="1h",
    doc="a follower that has not applied a committed state after this long is removed (read by the master)",
)


class FollowersChecker:
    def __init__(
        self,
        ctx: CoreContext,
        *,
        on_node_failed: Callable[[str, str], None],  # (node id, reason)
        on_healthy: Callable[[str, FollowerCheckResponse], None],
        on_term_seen: Callable[[int], None],
    ) -> None:
        self.ctx = ctx
        self.on_node_failed = on_node_failed
        self.on_healthy = on_healthy
        self.on_term_seen = on_term_seen
        self.failures: dict[str, int] = {}  # node id -> consecutive failures, for every checked node
        # node id -> (request id, address) of the check awaiting an answer. Keyed by node id, not address:
        # a node that comes back at a new address (a rescheduled pod) must stay checked.
        self.in_flight: dict[str, tuple[int, str]] = {}

    def _leading(self) -> bool:
        return self.ctx.mode() is Mode.LEADER

    def checked_nodes(self) -> list[str]:
        return list(self.failures)

    def sync(self, state: ClusterState) -> None:
        """Check exactly the other nodes of the published state."""
        timers = self.ctx.timers
        for node_id in list(self.failures):
            if node_id not in state.nodes:
                del self.failures[node_id]
                timers.cancel((self, "check", node_id))
                timers.cancel((self, "timeout", node_id))
        for node_id, node in state.nodes.items():
            if node_id == self.ctx.local_node.id:
                continue
            in_flight = self.in_flight.get(node_id)
            if in_flight is not None and in_flight[1] != node.transport_address:
                # It rejoined from a new address: what was sent to the old one proves nothing either way.
                del self.in_flight[node_id]
                timers.cancel((self, "timeout", node_id))
                self.failures[node_id] = 0
                self._schedule(node_id, self.ctx.now)
            elif node_id not in self.failures:
                self.failures[node_id] = 0
                self._schedule(node_id, self.ctx.now)

    def stop_checking(self, node_id: str) -> None:
        self.failures.pop(node_id, None)
        self.ctx.timers.cancel((self, "check", node_id))
        self.ctx.timers.cancel((self, "timeout", node_id))

    def clear(self) -> None:
        for node_id in list(self.failures):
            self.ctx.timers.cancel((self, "check", node_id))
            self.ctx.timers.cancel((self, "timeout", node_id))
        self.failures.clear()
        self.in_flight.clear()

    def _schedule(self, node_id: str, at: int) -> None:
        self.ctx.timers.schedule((self, "check", node_id), at, lambda: self._send(node_id))

    def _send(self, node_id: str) -> None:
        ctx = self.ctx
        node = ctx.accepted.nodes.get(node_id)
        if not self._leading() or node is None:
            return
        request_id = ctx.new_request_id()
        self.in_flight[node_id] = (request_id, node.transport_address)
        versions = ctx.versions.check_fields(ctx.accepted)  # the master's, and every node's in a mixed cluster
        ctx.send(node.transport_address, FollowerCheck(ctx.local_node, ctx.current_term, request_id, **versions))
        ctx.timers.schedule(
            (self, "timeout", node_id),
            ctx.now + ctx.settings[FOLLOWER_CHECK_TIMEOUT],
            lambda: self.check_failed(node_id, request_id, disconnected=False),
        )

    def on_response(self, response: FollowerCheckResponse) -> None:
        node_id = response.source_id
        in_flight = self.in_flight.get(node_id)
        if in_flight is None or in_flight[0] != response.request_id or not self._leading():
            return
        if not response.ok:
            self.on_term_seen(response.term)
            if self._leading():
                self.check_failed(node_id, response.request_id, disconnected=False)
            return
        del self.in_flight[node_id]
        self.ctx.timers.cancel((self, "timeout", node_id))
        self.failures[node_id] = 0
        self.on_healthy(node_id, response)
        self._schedule(node_id, self.ctx.now + self.ctx.settings[FOLLOWER_CHECK_INTERVAL])

    def on_send_failure(self, destination: str, message: FollowerCheck) -> None:
        for node_id, (request_id, address) in list(self.in_flight.items()):
            if request_id == message.request_id and address == destination:
                self.check_failed(node_id, request_id, disconnected=True)

    def check_failed(self, node_id: str, request_id: int, disconnected: bool) -> None:
        in_flight = self.in_flight.get(node_id)
        if not self._leading() or in_flight is None or in_flight[0] != request_id:
            return
        del self.in_flight[node_id]
        self.ctx.timers.cancel((self, "timeout", node_id))
        failures = self.failures.get(node_id, 0) + 1
        self.failures[node_id] = failures
        if disconnected or failures >= self.ctx.settings[FOLLOWER_CHECK_RETRY_COUNT]:
            reason = "disconnected" if disconnected else f"failed {failures} consecutive follower checks"
            self.on_node_failed(node_id, reason)
        else:
            self._schedule(node_id, self.ctx.now + self.ctx.settings[FOLLOWER_CHECK_INTERVAL])


class LagDetector:
    """Tracks the version each node has applied; a node that stays behind a committed version is lagging."""

    def __init__(self, ctx: CoreContext, on_lagging: Callable[[str, str], None]) -> None:
        self.ctx = ctx
        self.on_lagging = on_lagging
        self.applied_versions: dict[str, int] = {}
        self.lagging_nodes_removed = 0

    def applied(self, node_id: str) -> int:
        return self.applied_versions.get(node_id, 0)

    def record_applied(self, node_id: str, version: int) -> None:
        self.applied_versions[node_id] = max(self.applied_versions.get(node_id, 0), version)

    def start(self, state: ClusterState) -> None:
        """A state was committed: every node that has not applied it yet has until the lag timeout."""
        ctx = self.ctx
        for node_id in state.nodes:
            if node_id == ctx.local_node.id or ctx.timers.is_scheduled((self, node_id)):
                continue
            if self.applied(node_id) < state.version:
                ctx.timers.schedule(
                    (self, node_id),
                    ctx.now + ctx.settings[FOLLOWER_LAG_TIMEOUT],
                    partial(self._check, node_id, state.version),
                )

    def cancel(self, node_id: str) -> None:
        self.ctx.timers.cancel((self, node_id))

    def clear_versions(self) -> None:
        self.applied_versions.clear()

    def _check(self, node_id: str, version: int) -> None:
        ctx = self.ctx
        if ctx.mode() is not Mode.LEADER or node_id not in ctx.accepted.nodes:
            return
        applied = self.applied(node_id)
        if applied < version:
            self.lagging_nodes_removed += 1
            self.on_lagging(node_id, f"lagging: has not applied version {version} within cluster.follower_lag.timeout")
        elif applied < ctx.accepted.version:
            latest = ctx.accepted.version
            deadline = ctx.now + ctx.settings[FOLLOWER_LAG_TIMEOUT]
            ctx.timers.schedule((self, node_id), deadline, partial(self._check, node_id, latest))
