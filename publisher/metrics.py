"""The publisher's own metric: `service_serving_ca_controller_trust_bundle_expiry_seconds`,
the Unix time of the earliest notAfter among the anchors last published. How its syncs go
is counted by the controller loop, as for every controller
(`controller_sync_total{controller="publisher", result}`, `kube.controller`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge


class PublisherMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.trust_bundle_expiry = Gauge(
            "service_serving_ca_controller_trust_bundle_expiry_seconds",
            "Unix time of the earliest notAfter among the published trust anchors.",
            registry=registry,
        )
