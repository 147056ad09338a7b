"""The history's and the data volume's metrics, read from the last maintenance pass at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinated.sidecar.events.history_maintenance import HistoryStatus


class HistoryCollector(Collector):
    def __init__(self, status: Callable[[], HistoryStatus]) -> None:
        self.status = status

    def collect(self) -> Iterator[Any]:
        status = self.status()
        if status.volume is not None:
            yield GaugeMetricFamily(
                "coordinated_data_volume_size_bytes", "Size of the node's data volume", value=status.volume.total
            )
            yield GaugeMetricFamily(
                "coordinated_data_volume_available_bytes",
                "Bytes of the data volume available to the node (what df shows as available)",
                value=status.volume.available,
            )
        yield GaugeMetricFamily("coordinated_history_segments", "History segment files", value=status.segments)
        yield CounterMetricFamily(
            "coordinated_history_retention_cuts", "Retention cuts (each a retention_cut event)", value=status.cuts
        )
        yield CounterMetricFamily(
            "coordinated_history_deleted_bytes", "History bytes deleted by retention", value=status.deleted_bytes
        )
        yield CounterMetricFamily(
            "coordinated_history_unarchived_deleted_segments",
            "Segments deleted past the flood stage before the archive had them",
            value=status.unarchived_deleted,
        )
        yield CounterMetricFamily(
            "coordinated_history_lost_events",
            "History events lost while the node ran: segments deleted or replaced under it, writes that failed",
            value=status.lost_events,
        )
        yield GaugeMetricFamily(
            "coordinated_history_damaged_segments",
            "Compressed segments that failed their check since the node started",
            value=status.damaged_segments,
        )
