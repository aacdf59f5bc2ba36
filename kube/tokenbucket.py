"""The one token bucket: client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)`
and `rate.Limiter`'s `Reserve().Delay()`, which the API client (its write limiter) and
the work queue (its overall retry bucket) both use.

What it decides:

* **Burst, then pace.** The bucket starts full (`burst` tokens, at least 1) and refills
  at `qps` tokens a second up to `burst`.
* **Reserve, never refuse.** `reserve()` takes a token now, possibly one not yet there,
  and returns how long the caller must wait for it; the next caller queues behind it.
  `take()` is `reserve()` and then that sleep.
* **Off.** `qps <= 0` never waits (`--kube-api-qps=0` disables client-side limiting).

One bucket limits one client: a caller that must not queue behind another's burst (the
leader election's Lease renewals) gets a bucket of its own, as kube-controller-manager
gives leader election its own client.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """A token bucket of `burst` tokens refilled at `qps` a second. Thread-safe."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; returns the seconds until it is there (0.0: now)."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return -self._tokens / self.qps if self._tokens < 0 else 0.0

    def take(self) -> float:
        """Take a token, sleeping until it is there; returns the seconds slept."""
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait

    def fresh(self) -> TokenBucket:
        """A full bucket of the same rate, sharing nothing with this one."""
        return TokenBucket(self.qps, self.burst, clock=self._clock, sleep=self._sleep)
