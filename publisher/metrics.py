"""The publisher's metrics: kube-controller-manager's ClusterTrustBundle publisher family
(`clustertrustbundle_publisher_sync_total` / `_sync_duration_seconds`, label `code`: "200"
on success, the API status code of a failed request, or "500" for anything else) and
our `service_serving_ca_controller_trust_bundle_expiry_seconds` (Unix time of the earliest
notAfter among the anchors last published). `code="200"` starts at 0 so rate alerts work
from the first scrape."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kube.client import ApiError


def status_code(err: BaseException | None) -> str:
    """KCM's `code` label for the outcome of one sync."""
    if err is None:
        return "200"
    if isinstance(err, ApiError) and err.status:
        return str(err.status)
    return "500"


# Intentional: metric classes share a shape (a counter a label); each its own series.
class PublisherMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.sync_total = Counter(
            "clustertrustbundle_publisher_sync_total",
            "Number of ClusterTrustBundle publisher syncs, by result code.",
            ["code"],
            registry=registry,
        )
        self.sync_duration = Histogram(
            "clustertrustbundle_publisher_sync_duration_seconds",
            "Duration of ClusterTrustBundle publisher syncs, by result code.",
            ["code"],
            buckets=[0.001 * 2**i for i in range(15)],
            registry=registry,
        )
        self.trust_bundle_expiry = Gauge(
            "service_serving_ca_controller_trust_bundle_expiry_seconds",
            "Unix time of the earliest notAfter among the published trust anchors.",
            registry=registry,
        )
        self.sync_total.labels("200")

    def observe(self, err: BaseException | None, seconds: float) -> None:
        code = status_code(err)
        self.sync_total.labels(code).inc()
        self.sync_duration.labels(code).observe(seconds)
