"""The quotas' metrics, read at scrape time from the node's applied state: for each quota and each limit it sets,
the limit and what is used under its prefix (watch streams: this node's own, which it holds to the limit)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


@dataclass(frozen=True)
class QuotaStatus:
    name: str
    prefix: str
    limits: dict[str, int]  # max_keys, ... -> the limit, for those it sets
    used: dict[str, int]  # keys, bytes, sessions, watch_streams -> what is used


# Each limit, and the usage it is held against (None: only the master knows it, as a rate).
USED_BY_LIMIT = {
    "max_keys": "keys",
    "max_bytes": "bytes",
    "max_sessions": "sessions",
    "max_watch_streams": "watch_streams",
    "max_writes_per_second": None,
}


class QuotaCollector(Collector):
    def __init__(self, quotas: Callable[[], list[QuotaStatus]]) -> None:
        self.quotas = quotas

    def collect(self) -> Iterator[Any]:
        labels = ["quota", "prefix", "limit"]
        limits = GaugeMetricFamily("coordinated_quota_limit", "A quota's limit (`PUT /_quota/NAME`)", labels=labels)
        used = GaugeMetricFamily(
            "coordinated_quota_used",
            "What is used under a quota's prefix, against the limit (watch streams: this node's)",
            labels=labels,
        )
        for quota in self.quotas():
            for limit, value in sorted(quota.limits.items()):
                limits.add_metric([quota.name, quota.prefix, limit], value)
                resource = USED_BY_LIMIT.get(limit)
                if resource is not None:
                    used.add_metric([quota.name, quota.prefix, limit], quota.used.get(resource, 0))
        yield limits
        yield used
