"""Prometheus metrics for one node, in a registry of its own (several nodes can share a process in tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinated.coordination.context import Mode
from coordinated.coordination.effects import PublicationFinished
from coordinated.coordination.history import SESSION_EVENT_TYPES
from coordinated.sidecar.events.archive import ArchiveStatus

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
MODES = tuple(mode.value for mode in Mode)
# The peer label of bytes sent to an address that no known node has (a seed host before discovery).
UNKNOWN_PEER = "unknown"


@dataclass(frozen=True)
class StatusSnapshot:
    """What the node reports at scrape time, read from the core and the shell's parts."""

    current_term: int
    mode: Mode
    applied_version: int
    applied_nodes: int
    elections_won: int
    failed_publications: int
    lagging_nodes_removed: int
    history_bytes: int
    persisted_bytes: int
    sent_bytes: dict[str, int] | None  # by peer node name; None without a transport
    dropped_messages: int
    # On the master only: per follower (by node name), committed versions it has not applied yet.
    follower_lag: dict[str, int] | None = None
    watches_waiting: int = 0  # key watches parked on this node
    watch_streams: int = 0  # streaming watches open on this node
    change_log_events: int = 0  # key changes held for watches
    sessions_active: int = 0  # in the applied state
    ephemeral_keys: int = 0
    archive: ArchiveStatus | None = None  # None: no history archive configured
    state_bytes: int | None = None  # on the master: the applied state against cluster.metadata.max_state_size
    max_state_bytes: int | None = None  # cluster.metadata.max_state_size
    problems: dict[str, int] | None = None  # by kind (`problems.ProblemKind`), every kind present


class _CoreCollector(Collector):
    """Reads a snapshot of the node at scrape time, so nothing has to be kept in sync."""

    def __init__(self, snapshot: Callable[[], StatusSnapshot | None]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        status = self.snapshot()
        if status is None:
            return
        yield GaugeMetricFamily("coordinated_current_term", "The node's current term", value=status.current_term)
        mode = GaugeMetricFamily("coordinated_mode", "1 for the node's current mode", labels=["mode"])
        for name in MODES:
            mode.add_metric([name], 1.0 if status.mode.value == name else 0.0)
        yield mode
        yield GaugeMetricFamily(
            "coordinated_is_master",
            "1 if this node is the elected master",
            value=1.0 if status.mode is Mode.LEADER else 0.0,
        )
        yield GaugeMetricFamily(
            "coordinated_cluster_state_version", "Version of the applied state", value=status.applied_version
        )
        yield GaugeMetricFamily("coordinated_cluster_nodes", "Nodes in the applied state", value=status.applied_nodes)
        yield CounterMetricFamily("coordinated_elections_won", "Elections this node won", value=status.elections_won)
        yield CounterMetricFamily(
            "coordinated_failed_publications",
            "Publications that failed on this master",
            value=status.failed_publications,
        )
        yield CounterMetricFamily(
            "coordinated_lagging_nodes_removed",
            "Nodes removed by the lag detector",
            value=status.lagging_nodes_removed,
        )
        yield GaugeMetricFamily(
            "coordinated_history_segment_bytes", "Bytes in this node's history segments", value=status.history_bytes
        )
        yield CounterMetricFamily(
            "coordinated_state_bytes_persisted", "Bytes written to the state file", value=status.persisted_bytes
        )
        if status.follower_lag is not None:
            lag = GaugeMetricFamily(
                "coordinated_follower_lag_versions",
                "On the master: committed versions each follower has not applied yet (what the lag detector sees)",
                labels=["peer"],
            )
            for peer, versions in sorted(status.follower_lag.items()):
                lag.add_metric([peer], versions)
            yield lag
        yield GaugeMetricFamily(
            "coordinated_watches_waiting", "Key watches waiting on this node", value=status.watches_waiting
        )
        yield GaugeMetricFamily(
            "coordinated_watch_streams", "Streaming key watches open on this node", value=status.watch_streams
        )
        yield GaugeMetricFamily(
            "coordinated_watch_change_log_events",
            "Key changes this node keeps for watches",
            value=status.change_log_events,
        )
        yield GaugeMetricFamily(
            "coordinated_sessions_active", "Sessions in the applied state", value=status.sessions_active
        )
        yield GaugeMetricFamily(
            "coordinated_ephemeral_keys", "Ephemeral keys in the applied state", value=status.ephemeral_keys
        )
        if status.state_bytes is not None:
            yield GaugeMetricFamily(
                "coordinated_cluster_state_bytes",
                "On the master: the applied state's keys and values, as cluster.metadata.max_state_size counts them",
                value=status.state_bytes,
            )
        if status.max_state_bytes is not None:
            yield GaugeMetricFamily(
                "coordinated_cluster_state_max_bytes",
                "cluster.metadata.max_state_size: writes that would grow the state beyond it are refused",
                value=status.max_state_bytes,
            )
        if status.archive is not None:
            yield from _archive_metrics(status.archive)
        if status.problems is not None:
            problems = GaugeMetricFamily(
                "coordinated_node_problems",
                "What is wrong with this node now, by kind (the node's health lists each one with its reason)",
                labels=["kind"],
            )
            for kind, count in sorted(status.problems.items()):
                problems.add_metric([kind], count)
            yield problems
        if status.sent_bytes is not None:
            sent = CounterMetricFamily(
                "coordinated_transport_sent_bytes",
                f"Envelope bytes sent, by the peer's node name ({UNKNOWN_PEER} for an address no known node has)",
                labels=["peer"],
            )
            for peer, count in sorted(status.sent_bytes.items()):
                sent.add_metric([peer], count)
            yield sent
            yield CounterMetricFamily(
                "coordinated_transport_dropped_messages",
                "Messages dropped on full send queues",
                value=status.dropped_messages,
            )


def _archive_metrics(archive: ArchiveStatus) -> Iterator[Any]:
    """The history archive's lag (what is closed but not in object storage yet) and its failures."""
    yield GaugeMetricFamily(
        "coordinated_archive_pending_segments",
        "Closed history segments not archived yet",
        value=archive.pending_segments,
    )
    yield GaugeMetricFamily(
        "coordinated_archive_pending_bytes",
        "Bytes of closed history segments not archived yet",
        value=archive.pending_bytes,
    )
    yield GaugeMetricFamily(
        "coordinated_archive_oldest_pending_age_seconds",
        "Seconds since the oldest segment not archived yet was closed (0 when none is pending)",
        value=archive.oldest_pending_age_s or 0.0,
    )
    yield CounterMetricFamily(
        "coordinated_archive_uploaded_segments", "Segments this process archived", value=archive.uploaded_segments
    )
    yield CounterMetricFamily(
        "coordinated_archive_uploaded_bytes", "Bytes this process archived", value=archive.uploaded_bytes
    )
    yield CounterMetricFamily(
        "coordinated_archive_failures",
        "Archive passes that failed (each is retried with backoff)",
        value=archive.failures,
    )
    yield GaugeMetricFamily(
        "coordinated_archive_failing",
        "1 while the archive's last attempt failed or a segment is stuck",
        value=int(archive.problem is not None),
    )
    if archive.last_success_time is not None:
        yield GaugeMetricFamily(
            "coordinated_archive_last_success_timestamp_seconds",
            "When the archive last had every closed segment uploaded (Unix time)",
            value=archive.last_success_time,
        )


def _child(counter: Counter, children: dict[str, Counter], label: str) -> Counter:
    """`counter.labels(label)`, looked up once and kept in `children`."""
    child = children.get(label)
    if child is None:
        child = children[label] = counter.labels(label)
    return child


class NodeMetrics:
    def __init__(self, snapshot: Callable[[], StatusSnapshot | None]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_CoreCollector(snapshot))
        self.publication_latency = Histogram(
            "coordinated_publication_seconds",
            "Publication time on the master, start to finish",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.commit_latency = Histogram(
            "coordinated_commit_seconds",
            "Publication start to commit on the master",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.history_events = Counter(
            "coordinated_history_events", "History events written, by type", ["type"], registry=self.registry
        )
        self.http_requests = Counter(
            "coordinated_http_requests", "Client API requests, by status", ["status"], registry=self.registry
        )
        # The labelled children, looked up once: labels() takes a lock and builds a key on every call, and
        # these two count every request and every history line.
        self._requests_by_status: dict[str, Counter] = {}
        self._history_by_type: dict[str, Counter] = {}
        # Counted where the master records them (its history), so the cluster's total is the sum over nodes.
        self.session_events = {
            event_type.value: Counter(
                f"coordinated_{event_type.value.replace('session_', 'sessions_')}",
                f"Sessions {event_type.value.removeprefix('session_')} while this node was master",
                registry=self.registry,
            )
            for event_type in SESSION_EVENT_TYPES
        }
        self.version_conflicts = Counter(
            "coordinated_version_conflicts",
            "Conditional writes and transaction compares answered 409 on this node's client port",
            registry=self.registry,
        )

    def on_publication(self, effect: PublicationFinished) -> None:
        self.publication_latency.observe(effect.total_latency_ms / 1000)
        if effect.commit_latency_ms is not None:
            self.commit_latency.observe(effect.commit_latency_ms / 1000)

    def count_request(self, status: int) -> None:
        """One client API request answered with `status`."""
        _child(self.http_requests, self._requests_by_status, str(status)).inc()

    def on_history(self, event_type: str) -> None:
        _child(self.history_events, self._history_by_type, event_type).inc()
        if event_type in self.session_events:
            self.session_events[event_type].inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
