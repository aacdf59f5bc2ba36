"""The signer's Prometheus metrics (docs/reference.md §6), registered on a caller-supplied
registry.

What counts as what is decided here, once:
- `requests_total{result="issued"}`: a certificate was written to a request's status;
- `requests_total{result="failed"}`: a request was Denied or Failed (final), with the
  reason broken down in `denied_total{reason}`; `issued` is broken down by the leaf's
  key type in `issued_total{key_type}` (kubelet's `keyType` spelling, ML-DSA included),
  so an operator sees which Pods already use post-quantum keys;
- `requests_total{result="error"}`: a sync attempt that hit an error and will be
  retried (transient API errors, a signing certificate too close to expiry, bugs) — the
  KEP's third result, which its monitoring advice alerts on (`result=~"failed|error"`).
  The controller loop counts the same attempts as for every controller,
  `controller_sync_total{controller="signer", result="error"}` (`kube.controller`); the
  two are always equal. Losing a write race to another replica is *not* an error, and
  waiting on a Service is neither issued nor failed.
- `waiting_resyncs_total`: waiting requests re-driven by the periodic resync
  (`--waiting-resync-period`) rather than by an event.
- `pod_waiting_seconds{namespace}`: how long the longest-waiting Pod of each namespace
  has waited, across the requests kubelet made for it (`signer.podwaits`: the cleaner
  replaces a request every ~16 minutes, so a request's age would restart). Only
  namespaces with a waiting Pod have a series.

Counters with known label values start at 0 so alerts work from the first scrape. The
pending gauges and the signer expiry gauge are read at scrape time from callables, so
they can never go stale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from signer.podwaits import PodWaits
from trust import keys

PREFIX = "service_serving_ca_controller"

# The KEP's results, in its words: `result="issued|failed|error"`.
RESULTS = ("issued", "failed", "error")

# Every reason the signer writes on a Denied or Failed condition.
DENIAL_REASONS = (
    "InvalidUnverifiedUserAnnotations",
    "UnsupportedKeyType",
    "InvalidStubPKCS10Request",
    "InvalidPKIXPublicKey",
    "PodNotFound",
    "PodMismatch",
    "PodTerminating",
    "PodHostnameRequired",
)

# Creation → Issued: sub-second when the Service exists; minutes when it waited.
ISSUANCE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900)


class SignerMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        clock: Callable[[], float] = time.time,
        pod_waits: PodWaits | None = None,
    ) -> None:
        self.registry = registry
        self.pod_waits = pod_waits if pod_waits is not None else PodWaits(clock)
        registry.register(_PodWaitCollector(self.pod_waits))
        self.requests = Counter(
            f"{PREFIX}_requests",
            "PodCertificateRequests answered by the service-serving signer, by result "
            "(issued; failed = Denied or Failed; error = a sync attempt failed and will be "
            "retried).",
            ["result"],
            registry=registry,
        )
        self.denied = Counter(
            f"{PREFIX}_denied",
            "PodCertificateRequests Denied or Failed, by condition reason.",
            ["reason"],
            registry=registry,
        )
        self.issued_by_key_type = Counter(
            f"{PREFIX}_issued",
            "Certificates issued, by the key type of the leaf (kubelet's keyType spelling).",
            ["key_type"],
            registry=registry,
        )

        # The gauges `bind` sets: plain, unlabelled, read at scrape time.
        def gauge(name: str, documentation: str) -> Gauge:
            return Gauge(f"{PREFIX}_{name}", documentation, registry=registry)

        self.signer_ttl = gauge(
            "signer_ttl_seconds", "Unix timestamp of the signing certificate's notAfter."
        )
        self.pending = gauge(
            "pending_requests", "PodCertificateRequests waiting on a Service or Pod."
        )
        self.oldest_pending = gauge(
            "oldest_pending_seconds",
            "Age in seconds of the oldest PodCertificateRequest waiting on a Service or Pod.",
        )
        self.issuance_duration = Histogram(
            f"{PREFIX}_issuance_duration_seconds",
            "Seconds from PodCertificateRequest creation to its Issued status being written.",
            buckets=ISSUANCE_BUCKETS,
            registry=registry,
        )
        self.waiting_resyncs = Counter(
            f"{PREFIX}_waiting_resyncs",
            "Waiting PodCertificateRequests re-driven by the periodic resync "
            "(--waiting-resync-period), the safety net against a missed event.",
            registry=registry,
        )
        # The children, looked up once (`labels()` parses and locks on every call).
        self._by_result = {result: self.requests.labels(result=result) for result in RESULTS}
        for reason in DENIAL_REASONS:
            self.denied.labels(reason=reason)
        for key_type in keys.leaf_key_types():
            self.issued_by_key_type.labels(key_type=key_type)

    def bind(
        self,
        *,
        pending: Callable[[], float],
        oldest_pending: Callable[[], float],
        signer_not_after: Callable[[], float],
    ) -> None:
        """Read the gauges from these callables at scrape time."""
        self.pending.set_function(pending)
        self.oldest_pending.set_function(oldest_pending)
        self.signer_ttl.set_function(signer_not_after)

    def issued(self, seconds_since_creation: float | None, key_type: str) -> None:
        self._by_result["issued"].inc()
        self.issued_by_key_type.labels(key_type=key_type).inc()
        if seconds_since_creation is not None:
            self.issuance_duration.observe(max(0.0, seconds_since_creation))

    def failed(self, reason: str) -> None:
        self._by_result["failed"].inc()
        self.denied.labels(reason=reason).inc()

    def sync_error(self) -> None:
        """A sync attempt raised: the controller loop retries it."""
        self._by_result["error"].inc()

    def waiting_resynced(self, count: int) -> None:
        self.waiting_resyncs.inc(count)

    def count(self, result: str) -> float:
        """Current value of `requests_total{result}` (tests and the demo read it)."""
        value = self.registry.get_sample_value(f"{PREFIX}_requests_total", {"result": result})
        return float(value or 0.0)


class _PodWaitCollector(Collector):
    """`pod_waiting_seconds{namespace}`, read from `PodWaits` at scrape time."""

    def __init__(self, waits: PodWaits) -> None:
        self._waits = waits

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            f"{PREFIX}_pod_waiting_seconds",
            "Seconds the longest-waiting Pod of the namespace has waited for a certificate, "
            "across the PodCertificateRequests kubelet made for it.",
            labels=["namespace"],
        )
        for namespace, seconds in sorted(self._waits.oldest_by_namespace().items()):
            family.add_metric([namespace], seconds)
        yield family
