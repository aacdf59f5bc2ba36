"""The injector's Prometheus metrics.

- `cabundle_injector_sync_total{kind, result}`: one count per sync of an annotated
  object. `result` is `injected` (a caBundle was written), `unchanged` (already
  current), `invalid` (bad annotation, or the object cannot carry a caBundle), `empty`
  (the selector matched nothing; the current caBundle was kept), `released` (the
  annotation was removed and our field manager gave up the fields it owned), `conflict`
  (another server-side apply manager owns a field we would write; nothing written) or
  `refused` (the API refused the write as invalid; a Warning Event, no retry until the
  object or the bundle changes), `contested` (another manager's Update retook a field we
  wrote; the injector backs off on that object, 5 s doubling to 5 minutes), `failed`
  (a write failed for any other reason — any API status, a timeout, a failed guard, an
  exception — or planning the object failed; tried again after a back-off, and blocked
  from `decide.FAILURE_BOUND` failures in a row on: `decide.settle`). Other
  objects without the annotation are not counted. A sync never raises, so the
  controller loop's `controller_sync_total{controller="injector", result="error"}`
  stays 0; `failed` takes its place (the sync-errors alert counts it for the
  cluster-scoped kinds: a tenant's ConfigMap has its Events, not a cluster alert).
  Every (kind, result) pair starts at 0 so rate alerts work from the first scrape.
- `cabundle_injector_objects{kind, state}`: annotated objects by kind: `managed` (all of
  them) and those in each state that is not current (`injector.convergence`): `stale`
  (not holding the anchors selected now), `empty`, `invalid`, `conflicting`. Rebuilt
  from every object's first sync after a start, so it survives a restart.
- `cabundle_injector_anchor_expiry_seconds`: Unix time of the earliest notAfter among
  the trust anchors in the caBundles the injector currently keeps (NaN while it
  keeps none). Alert on it as on the signer's own expiry: a caBundle holding only an
  expiring root breaks every webhook call when it expires.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from injector import convergence
from injector.kinds import ALL_KINDS
from trust.convergence import ObjectConvergence

RESULTS = (
    "injected",
    "unchanged",
    "invalid",
    "empty",
    "released",
    "conflict",
    "refused",
    "contested",
    "failed",
)


class InjectorMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        self.syncs = Counter(
            "cabundle_injector_sync",
            "Syncs of objects annotated for caBundle injection, by kind and result.",
            ["kind", "result"],
            registry=registry,
        )
        for kind in ALL_KINDS:
            for result in RESULTS:
                self.syncs.labels(kind.kind, result)
        self._expiry = Gauge(
            "cabundle_injector_anchor_expiry_seconds",
            "Unix time of the earliest notAfter among the trust anchors the injector keeps "
            "in caBundle fields.",
            registry=registry,
        )
        self._lock = threading.Lock()
        self._expiries: dict[str, float] = {}
        self._expiry.set_function(self._earliest)

    def count_objects(self, statuses: Callable[[], Iterable[ObjectConvergence]]) -> None:
        """Export `cabundle_injector_objects` from `statuses` at each scrape."""
        self.registry.register(_ObjectCounts(statuses))

    def objects(self, kind: str, state: str) -> float:
        value = self.registry.get_sample_value(
            "cabundle_injector_objects", {"kind": kind, "state": state}
        )
        return float(value or 0.0)

    def count(self, kind: str, result: str) -> float:
        value = self.registry.get_sample_value(
            "cabundle_injector_sync_total", {"kind": kind, "result": result}
        )
        return float(value or 0.0)

    def observe(self, kind: str, result: str) -> None:
        self.syncs.labels(kind, result).inc()

    def keep_expiry(self, key: str, not_after: float | None) -> None:
        """Record (or with None forget) the earliest anchor expiry of one object."""
        with self._lock:
            if not_after is None:
                self._expiries.pop(key, None)
            else:
                self._expiries[key] = not_after

    def _earliest(self) -> float:
        with self._lock:
            return min(self._expiries.values(), default=float("nan"))


class _ObjectCounts(Collector):
    def __init__(self, statuses: Callable[[], Iterable[ObjectConvergence]]) -> None:
        self.statuses = statuses

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "cabundle_injector_objects",
            "Annotated objects by kind: managed, and those stale, empty, invalid or "
            "conflicting (not holding the anchors their selection picks now).",
            labels=["kind", "state"],
        )
        kinds = [kind.kind for kind in ALL_KINDS]
        for kind, row in sorted(convergence.counts(self.statuses(), kinds).items()):
            for state, value in row.items():
                family.add_metric([kind, state], value)
        yield family
