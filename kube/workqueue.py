"""A rate-limited work queue with client-go's `util/workqueue` semantics.

What it decides:

* **Fair and stingy.** Keys are handed out in FIFO order; a key waits in the queue at
  most once however often it is added (the *dirty* set).
* **Fair across flows (optional).** Given `flow` (a key → flow function, e.g. the key's
  namespace), each flow keeps its own FIFO and the flows with keys waiting are served
  round-robin, one key per turn: a flood of keys in one flow delays another flow's key
  by at most one key per busy flow, not by the whole flood — the client-side twin of
  API Priority and Fairness's `ByNamespace` distinguisher. Dedup, processing, delays,
  retries and shutdown are the same; only the order of hand-out changes.
* **Never on two workers.** A key handed out by `get()` is *processing* until `done(key)`.
  Adding it meanwhile marks it dirty only; `done` then puts it back at the tail, so the
  worker that picks it up next sees every change made before the add.
* **Delays.** `add_after(key, seconds)` parks the key in a heap served by one daemon
  thread (started on first use); an earlier deadline for a waiting key wins.
* **Retries.** `add_rate_limited(key)` = `add_after(key, limiter.when(key))` where the
  default limiter is client-go's `DefaultControllerRateLimiter`: the maximum of a
  per-key exponential backoff (5 ms doubling to 1000 s) and a shared token bucket
  (10 qps, burst 100). `forget(key)` resets the per-key backoff (call it on success);
  `num_requeues(key)` reports it.
* **Shutdown.** `shut_down()` wakes every blocked `get()`; keys still queued are handed
  out first, then `get()` returns `(None, True)`. Adds after shutdown are ignored.
  `shut_down_with_drain()` also waits until every processing key is `done`.
* **Metrics.** client-go's `workqueue_*` family, label `name`, on the given registry.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kube import _metrics
from kube.tokenbucket import TokenBucket

K = TypeVar("K", bound=Hashable)

Clock = Callable[[], float]


# rate limiters ---------------------------------------------------------------------


class RateLimiter(Protocol):
    """client-go's `workqueue.RateLimiter`: how long to wait before retrying `key`."""

    def when(self, key: Hashable) -> float: ...

    def forget(self, key: Hashable) -> None: ...

    def num_requeues(self, key: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """`base * 2**failures`, capped at `max_delay`; counted per key until `forget`."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, key: Hashable) -> float:
        with self._lock:
            exp = self._failures.get(key, 0)
            self._failures[key] = exp + 1
        if exp >= 64:  # 2**64 * base overflows any sensible cap
            return self.max_delay
        return float(min(self.base_delay * (2**exp), self.max_delay))

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class BucketRateLimiter:
    """A token bucket shared by all keys (`kube.tokenbucket`): each call reserves a
    token, possibly in the future, and returns the wait."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock = time.monotonic):
        self.bucket = TokenBucket(qps, burst, clock=clock)

    def when(self, key: Hashable) -> float:
        return self.bucket.reserve()

    def forget(self, key: Hashable) -> None:
        pass

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    """The longest wait of several limiters (all are consulted, so all count)."""

    def __init__(self, *limiters: RateLimiter) -> None:
        self.limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self.limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max(limiter.num_requeues(key) for limiter in self.limiters)


def default_controller_rate_limiter() -> RateLimiter:
    """client-go's `DefaultControllerRateLimiter()`."""
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter())


# metrics ---------------------------------------------------------------------------

# client-go: prometheus.ExponentialBuckets(10e-9, 10, 10)
_DURATION_BUCKETS = tuple(1e-8 * 10**i for i in range(10))


@dataclass(frozen=True)
class _Families:
    depth: Gauge
    adds: Counter
    latency: Histogram
    work_duration: Histogram
    unfinished: Gauge
    longest: Gauge
    retries: Counter


def _make_families(registry: CollectorRegistry | None) -> _Families:
    labels = ["name"]
    return _Families(
        depth=Gauge("workqueue_depth", "Current depth of workqueue", labels, registry=registry),
        adds=Counter(
            "workqueue_adds", "Total number of adds handled by workqueue", labels, registry=registry
        ),
        latency=Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            labels,
            buckets=_DURATION_BUCKETS,
            registry=registry,
        ),
        work_duration=Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            labels,
            buckets=_DURATION_BUCKETS,
            registry=registry,
        ),
        unfinished=Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration. Large values indicate stuck threads.",
            labels,
            registry=registry,
        ),
        longest=Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels,
            registry=registry,
        ),
        retries=Counter(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            labels,
            registry=registry,
        ),
    )


# the queue -------------------------------------------------------------------------


class _Flows(Generic[K]):
    """FIFO per flow; flows with keys waiting are served round-robin. With one flow (no
    `flow` function) it is a plain FIFO. Not thread-safe: the queue's lock guards it."""

    def __init__(self, flow: Callable[[K], Hashable] | None) -> None:
        self._flow = flow
        self._fifos: dict[Hashable, deque[K]] = {}
        self._turns: deque[Hashable] = deque()  # flows with keys waiting, next first
        self._len = 0

    def append(self, key: K) -> None:
        flow = self._flow(key) if self._flow is not None else None
        fifo = self._fifos.get(flow)
        if fifo is None:
            fifo = self._fifos[flow] = deque()
            self._turns.append(flow)
        fifo.append(key)
        self._len += 1

    def popleft(self) -> K:
        flow = self._turns.popleft()
        fifo = self._fifos[flow]
        key = fifo.popleft()
        if fifo:
            self._turns.append(flow)
        else:
            del self._fifos[flow]
        self._len -= 1
        return key

    def __len__(self) -> int:
        return self._len

    def flows(self) -> int:
        """How many flows have keys waiting."""
        return len(self._turns)


class RateLimitingQueue(Generic[K]):
    """client-go's `TypedRateLimitingInterface[K]` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        registry: CollectorRegistry | None = None,
        *,
        rate_limiter: RateLimiter | None = None,
        flow: Callable[[K], Hashable] | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        self.name = name
        self.rate_limiter = rate_limiter or default_controller_rate_limiter()
        self._clock = clock
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # getters and drainers wait here
        self._delay_cond = threading.Condition(lock)  # the delay thread waits here
        self._queue: _Flows[K] = _Flows(flow)
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._shutting_down = False
        self._added_at: dict[K, float] = {}
        self._started_at: dict[K, float] = {}
        # delayed adds
        self._heap: list[tuple[float, int, K]] = []
        self._waiting: dict[K, float] = {}
        self._seq = itertools.count()
        self._delay_thread: threading.Thread | None = None

        fam = _metrics.family(registry, "workqueue", _make_families)
        self._m_depth = fam.depth.labels(name=name)
        self._m_adds = fam.adds.labels(name=name)
        self._m_latency = fam.latency.labels(name=name)
        self._m_work = fam.work_duration.labels(name=name)
        self._m_retries = fam.retries.labels(name=name)
        ref = weakref.ref(self)
        fam.unfinished.labels(name=name).set_function(
            lambda: q._unfinished_seconds()[0] if (q := ref()) else 0.0
        )
        fam.longest.labels(name=name).set_function(
            lambda: q._unfinished_seconds()[1] if (q := ref()) else 0.0
        )

    # Interface --------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue `key` unless it is already waiting; if it is being processed it is
        queued again when the worker calls `done`."""
        with self._cond:
            if self._shutting_down or key in self._dirty:
                return
            self._m_adds.inc()
            self._m_depth.inc()
            self._added_at.setdefault(key, self._clock())
            self._dirty.add(key)
            if key in self._processing:
                return
            self._queue.append(key)
            self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def waiting_flows(self) -> int:
        """How many flows have keys waiting (1 at most without a `flow` function)."""
        with self._cond:
            return self._queue.flows()

    def idle(self) -> bool:
        """Nothing waiting and nothing being processed (delayed `add_after` keys aside)."""
        with self._cond:
            return not self._queue and not self._processing

    def get(self, timeout: float | None = None) -> tuple[K | None, bool]:
        """Block until a key is ready; return `(key, False)`, or `(None, True)` once the
        queue is shut down and empty. With `timeout`, `(None, False)` when it passes."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while not self._queue and not self._shutting_down:
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return None, False
                    self._cond.wait(remaining)
            if not self._queue:
                return None, True
            key = self._queue.popleft()
            now = self._clock()
            self._m_depth.dec()
            added = self._added_at.pop(key, None)
            if added is not None:
                self._m_latency.observe(now - added)
            self._started_at[key] = now
            self._processing.add(key)
            self._dirty.discard(key)
            return key, False

    def done(self, key: K) -> None:
        """Mark `key` finished; requeue it if it was added while being processed."""
        with self._cond:
            self._processing.discard(key)
            started = self._started_at.pop(key, None)
            if started is not None:
                self._m_work.observe(self._clock() - started)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()
            elif self._shutting_down:
                self._cond.notify_all()  # shut_down_with_drain waits for this

    def add_after(self, key: K, seconds: float) -> None:
        """Add `key` once `seconds` have passed (at once if `seconds <= 0`)."""
        with self._cond:
            if self._shutting_down:
                return
            self._m_retries.inc()
        if seconds <= 0:
            self.add(key)
            return
        ready = self._clock() + seconds
        with self._cond:
            current = self._waiting.get(key)
            if current is not None and current <= ready:
                return
            self._waiting[key] = ready
            heapq.heappush(self._heap, (ready, next(self._seq), key))
            if self._delay_thread is None:
                self._delay_thread = threading.Thread(
                    target=self._delay_loop, name=f"workqueue-{self.name}-delay", daemon=True
                )
                self._delay_thread.start()
            self._delay_cond.notify()

    def add_rate_limited(self, key: K) -> None:
        """Retry `key` after the rate limiter's delay (per-key backoff and the bucket)."""
        self.add_after(key, self.rate_limiter.when(key))

    def forget(self, key: K) -> None:
        """Stop tracking `key`'s failures: its next retry starts at the base delay."""
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.num_requeues(key)

    def shut_down(self) -> None:
        """Refuse new keys and wake every blocked `get()`."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
            self._delay_cond.notify_all()

    def shut_down_with_drain(self, timeout: float | None = None) -> bool:
        """`shut_down()`, then wait until no key is processing. False on timeout."""
        self.shut_down()
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while self._processing or self._queue:
                if deadline is None:
                    self._cond.wait()
                else:
                    remaining = deadline - self._clock()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
        return True

    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    # internals --------------------------------------------------------------------------

    def _delay_loop(self) -> None:
        while True:
            due: list[K] = []
            with self._cond:
                if self._shutting_down:
                    return
                now = self._clock()
                while self._heap and self._heap[0][0] <= now:
                    ready, _, key = heapq.heappop(self._heap)
                    if self._waiting.get(key) == ready:  # else superseded by an earlier add
                        del self._waiting[key]
                        due.append(key)
                if not due:
                    wait = self._heap[0][0] - now if self._heap else None
                    self._delay_cond.wait(wait)
                    continue
            for key in due:
                self.add(key)

    def _unfinished_seconds(self) -> tuple[float, float]:
        with self._cond:
            now = self._clock()
            ages = [now - started for started in self._started_at.values()]
        return (sum(ages), max(ages, default=0.0))
