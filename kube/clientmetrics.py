"""client-go's REST client metrics, so a throttled client can be told from a slow server.

What it decides:

* **client-go's names, labels and buckets** (`k8s.io/component-base/metrics/prometheus/
  restclient`): `rest_client_request_duration_seconds{verb,host}` and
  `rest_client_rate_limiter_duration_seconds{verb,host}` with buckets 5 ms … 60 s, and
  `rest_client_requests_total{code,method,host}`. As in client-go, a request's duration
  runs from before its rate-limiter wait to its answer, so the time spent on the API
  server (and the network) is the request duration less the rate-limiter wait; `code`
  is `<error>` when no answer came.
* **Only what waits is observed in the limiter.** Our client limits writes only (reads
  never queue), so the rate-limiter histogram counts the verbs that take a token.
* **Totals for a reader.** `totals()` is a cumulative snapshot (writes, seconds waited
  in the limiter, seconds of write requests): the difference of two snapshots says where
  a window's writes waited — on the client's own budget or on the server — without
  parsing the histograms.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from kube import _metrics

# client-go: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}
BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
NO_ANSWER = "<error>"


@dataclass(frozen=True)
class _Families:
    request_duration: Histogram
    rate_limiter_duration: Histogram
    requests: Counter


def _make_families(registry: CollectorRegistry | None) -> _Families:
    return _Families(
        request_duration=Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=BUCKETS,
            registry=registry,
        ),
        rate_limiter_duration=Histogram(
            "rest_client_rate_limiter_duration_seconds",
            "Client side rate limiter latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=BUCKETS,
            registry=registry,
        ),
        requests=Counter(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        ),
    )


@dataclass(frozen=True)
class WaitTotals:
    """Cumulative since start: writes sent, seconds they waited in the client's rate
    limiter, and seconds from before that wait to their answers."""

    writes: int = 0
    limiter_seconds: float = 0.0
    request_seconds: float = 0.0

    def __sub__(self, earlier: WaitTotals) -> WaitTotals:
        return WaitTotals(
            self.writes - earlier.writes,
            self.limiter_seconds - earlier.limiter_seconds,
            self.request_seconds - earlier.request_seconds,
        )

    @property
    def server_seconds(self) -> float:
        """Seconds the writes spent past the limiter: on the wire and the API server."""
        return max(0.0, self.request_seconds - self.limiter_seconds)


class ClientMetrics:
    """The metrics of one client (one `host`) on `registry`. Thread-safe."""

    def __init__(self, registry: CollectorRegistry | None, host: str) -> None:
        self.host = host
        self._families = _metrics.family(registry, "rest_client", _make_families)
        self._lock = threading.Lock()
        self._totals = WaitTotals()

    def throttled(self, verb: str, seconds: float) -> None:
        """A request of `verb` waited `seconds` for the client's rate limiter."""
        self._families.rate_limiter_duration.labels(verb=verb, host=self.host).observe(seconds)

    def finished(self, verb: str, code: int | None, seconds: float, waited: float | None) -> None:
        """A request of `verb` got answer `code` (None: no answer) `seconds` after it
        began; `waited` is its limiter wait when it took a token (a write)."""
        fam = self._families
        fam.request_duration.labels(verb=verb, host=self.host).observe(seconds)
        label = NO_ANSWER if code is None else str(code)
        fam.requests.labels(code=label, method=verb, host=self.host).inc()
        if waited is not None:
            with self._lock:
                t = self._totals
                self._totals = WaitTotals(
                    t.writes + 1, t.limiter_seconds + waited, t.request_seconds + seconds
                )

    def totals(self) -> WaitTotals:
        with self._lock:
            return self._totals
