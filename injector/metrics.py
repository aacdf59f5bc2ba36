"""The injector's Prometheus metrics.

- `cabundle_injector_sync_total{kind, result}`: one count per sync of an annotated
  object. `result` is `injected` (a caBundle was written), `unchanged` (already
  current), `invalid` (bad annotation, or the object cannot carry a caBundle), `empty`
  (the selector matched nothing; the current caBundle was kept), `released` (the
  annotation was removed and our field manager gave up the fields it owned), `conflict`
  (another server-side apply manager owns a field we would write; nothing written) or
  `refused` (the API refused the write as invalid; a Warning Event, no retry). Other
  objects without the annotation are not counted. A sync that fails (an API error,
  retried with backoff) is counted by the controller loop, as for every controller:
  `controller_sync_total{controller="injector", result="error"}` (`kube.controller`).
  Every (kind, result) pair starts at 0 so rate alerts work from the first scrape.
- `cabundle_injector_anchor_expiry_seconds`: Unix time of the earliest notAfter among
  the trust anchors in the caBundles the injector currently keeps (NaN while it
  keeps none). Alert on it as on the signer's own expiry: a caBundle holding only an
  expiring root breaks every webhook call when it expires.
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge

from injector.targets import CONFIG_MAP, KINDS

RESULTS = ("injected", "unchanged", "invalid", "empty", "released", "conflict", "refused")


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
        for kind in (*KINDS, CONFIG_MAP):
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
