"""The trust distributor's Prometheus metrics.

- `trust_distributor_actions_total{action}`: what the distributor did: `created` (a copy,
  filled when its selection resolves), `updated` (copied annotations or the opt-in label
  put back), `deleted` (a copy no configuration wants here any more), `not_ours` (a
  ConfigMap of a wanted name that this installation did not make: left alone, reported
  once an hour), `clash` (two configurations want one name in one namespace). Every
  action starts at 0 so rate alerts work from the first scrape.
- `trust_distributor_refusals_total{reason}`: creates the API server refused for a reason
  that is the namespace's, not the distributor's: `quota` (the namespace's ResourceQuota
  has no room for another ConfigMap: 403 "exceeded quota"). Not a sync error: a Warning
  Event on the configuration (one an hour), and the create is posted again at the next
  resync. Every reason starts at 0.
- `trust_distributor_copies`: the copies this installation owns now (mark verified).
Failed syncs are `controller_sync_total{controller="trust-distributor",result="error"}`
(`kube.controller`).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

ACTIONS = ("created", "updated", "deleted", "not_ours", "clash")
REFUSALS = ("quota",)


class DistributorMetrics:
    def __init__(self, registry: CollectorRegistry | None, copies: Callable[[], float]) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        self.actions = Counter(
            "trust_distributor_actions",
            "What the trust distributor did, by action.",
            ["action"],
            registry=registry,
        )
        for action in ACTIONS:
            self.actions.labels(action)
        self.refused = Counter(
            "trust_distributor_refusals",
            "Copies the API server refused to create for a reason of the namespace's, by reason.",
            ["reason"],
            registry=registry,
        )
        for reason in REFUSALS:
            self.refused.labels(reason)
        self.copies = Gauge(
            "trust_distributor_copies",
            "Trust ConfigMaps this installation's distributor owns now.",
            registry=registry,
        )
        self.copies.set_function(copies)

    def observe(self, action: str) -> None:
        self.actions.labels(action).inc()

    def refuse(self, reason: str) -> None:
        self.refused.labels(reason).inc()

    def count(self, action: str) -> float:
        value = self.registry.get_sample_value(
            "trust_distributor_actions_total", {"action": action}
        )
        return float(value or 0.0)

    def refusals(self, reason: str) -> float:
        value = self.registry.get_sample_value(
            "trust_distributor_refusals_total", {"reason": reason}
        )
        return float(value or 0.0)
