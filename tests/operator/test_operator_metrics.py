"""The operator's own metrics: a deleted cluster's certificate series go at once (they stayed until the operator
restarted, and fired the expiry alert for a cluster long gone), and a replica that stops leading drops every
cluster's series (the leader exports them)."""

from __future__ import annotations

import asyncio
import datetime

import kopf
from prometheus_client import REGISTRY

from coordinated.operator import certificates, handlers, metrics
from coordinated.operator.config import OperatorConfig

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
EXPIRY = "coordinated_operator_certificate_expiry_timestamp_seconds"


def expiry(namespace: str, cluster: str, certificate: str) -> float | None:
    labels = {"namespace": namespace, "cluster": cluster, "certificate": certificate}
    return REGISTRY.get_sample_value(EXPIRY, labels)


def record(namespace: str, cluster: str) -> None:
    ca = certificates.generate_ca(f"{cluster} CA", NOW, datetime.timedelta(days=90))
    metrics.record_certificate_expiry(namespace, cluster, {"ca.crt": ca.certificate})


def test_a_deleted_clusters_series_are_dropped_at_once() -> None:
    record("shop", "orders")
    record("shop", "kept")
    assert expiry("shop", "orders", "ca") == (NOW + datetime.timedelta(days=90)).timestamp()

    async def deleted() -> None:
        memo = kopf.Memo(work=handlers.make_work_queue(OperatorConfig()))
        body = kopf.Body({"metadata": {"namespace": "shop", "name": "orders"}})
        await handlers.track(event={"type": "DELETED"}, body=body, memo=memo)

    asyncio.run(deleted())
    assert expiry("shop", "orders", "ca") is None
    assert expiry("shop", "kept", "ca") is not None
    metrics.forget_clusters()  # this replica stopped leading
    assert expiry("shop", "kept", "ca") is None
