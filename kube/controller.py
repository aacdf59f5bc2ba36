"""One shape for every controller, and the one loop that runs them.

The shape of kube-controller-manager's controllers (`pkg/controller/certificates/`): the
process builds the informers (`kube.factory.InformerFactory`) and passes each controller
the caches it reads in its constructor; the controller registers event handlers that only
enqueue, and supplies `sync(key)`; this module's `Loop` does the rest. What every
controller is to the process is `Controller` (below): `name`, `has_synced()`, `run(stop)`
(the workers; the informers are the process's) and `sync(key)`.

What the loop decides:

* **Workers start only on synced caches.** `run` waits for every `synced` check before the
  first key is taken: a decision from a half-filled cache could delete or deny something
  that exists. So no `sync` ever sees an unsynced cache, and none checks.
* **The contract** (client-go's `processNextWorkItem`), for the outcome of one `sync(key)`:
  `None` → done: `forget` the key's backoff; `Requeue(after=s)` → `add_after`;
  `Requeue()` → retry with the key's exponential backoff (`add_rate_limited`). Always
  `done(key)` last, so the queue may hand the key out again.
* **The error policy is the loop's, not the controllers'.** A `sync` lets every failure
  raise. A transient `ApiError` (transport failure, 429, 5xx) is retried with the key's
  backoff, and not before the server's `Retry-After` when it sent one, logged as a
  warning without a traceback, and so is a `SyncFailed` (a failure the controller has
  already explained, e.g. with an Event); any other exception (403, 422, a bug) is logged with its
  traceback and retried with the key's backoff (up to the queue's 1000 s ceiling, as
  kube-controller-manager does).
* **Counted once, here.** Every sync's outcome is counted by the loop, the same way for
  every controller: `controller_sync_total{controller, result}`, `result` one of
  `success` (done), `requeue` (the controller asked to retry) and `error` (it raised; the
  policy above retries). A controller counts no errors of its own; it keeps only what is
  its own to say (Events, the metrics of its domain). How long a sync takes is the work
  queue's `workqueue_work_duration_seconds{name}`.
* **Resync.** With `resync_period`, every period the keys `resync_keys()` names are added
  (KCM's periodic resync; for the signer, only the waiting requests).
* **Shutdown.** Once `stop` is set no worker takes a new key — keys still queued stay
  unprocessed, as a replica that stops leading must not keep acting — while syncs already
  running finish; `run` returns after they have (bounded by `shutdown_timeout`,
  `SHUTDOWN_GRACE` by default), so the caller can release the Lease knowing nothing of
  ours still writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter

from kube import _metrics
from kube.client import ApiError
from kube.workqueue import RateLimitingQueue

log = logging.getLogger(__name__)

# How long the syncs in flight get to finish once `stop` is set. The process uses the
# same bound for all its controllers together (manager/app.py) and then releases the
# Lease and exits, so it must fit, with the release, in the Pod's
# terminationGracePeriodSeconds (30 s in config/, like kube-controller-manager's Pod).
SHUTDOWN_GRACE = 20.0


SYNC_RESULTS = ("success", "requeue", "error")


def _make_syncs(registry: CollectorRegistry | None) -> Counter:
    return Counter(
        "controller_sync",
        "Controller syncs by outcome: success (done), requeue (the controller asked to "
        "retry), error (the sync raised and is retried with backoff).",
        ["controller", "result"],
        registry=registry,
    )


class SyncFailed(Exception):
    """A sync that cannot succeed yet, for a reason its controller has already told (an
    Event): the loop counts it as an error and retries it with the key's backoff — and not
    before `after` seconds when given — logging one warning line, without a traceback."""

    def __init__(self, message: str, *, after: float | None = None) -> None:
        super().__init__(message)
        self.after = after


@dataclass(frozen=True)
class Requeue:
    """Retry the key: after `after` seconds if set, else with the key's backoff."""

    after: float | None = None


Sync = Callable[[str], Requeue | None]

T = TypeVar("T", covariant=True)


class Cache(Protocol[T]):
    """What every controller needs of each cache it is given (`kube.informer.Informer`
    or a test's seeded fake): the synced flag the loop waits for, and the event handlers
    it registers (they only enqueue). A controller's own cache protocol adds the reads
    its `sync` makes."""

    def has_synced(self) -> bool: ...

    def add_handler(
        self,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
    ) -> None: ...


def wait_until(
    check: Callable[[], bool], stop: threading.Event, timeout: float | None = None
) -> bool:
    """Poll `check` until it holds (True), or `stop` is set or `timeout` passes (False)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        if check():
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        stop.wait(0.05)
    return False


class Controller(Protocol):
    """What the process needs of every controller (signer, publisher, injector, ...).

    Built over caches the process made (its informers are started by the process, before
    leadership, so a standby is warm); `run(stop)` runs the workers until `stop` is set
    and returns once the syncs in flight have finished; `sync(key)` is one decision and
    its action (tests call it directly)."""

    @property
    def name(self) -> str: ...

    def has_synced(self) -> bool: ...

    def run(self, stop: threading.Event) -> None: ...

    def sync(self, key: str) -> Requeue | None: ...


class Loop:
    """One queue + `workers` threads running `sync` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        sync: Sync,
        queue: RateLimitingQueue[str],
        *,
        synced: Sequence[Callable[[], bool]] = (),
        workers: int = 1,
        registry: CollectorRegistry | None = None,
        resync_period: float | None = None,
        resync_keys: Callable[[], Iterable[str]] | None = None,
        shutdown_timeout: float = SHUTDOWN_GRACE,
    ) -> None:
        self.name = name
        self.queue = queue
        self.workers = max(1, workers)
        self.resync_period = resync_period
        self._sync = sync
        self._synced = tuple(synced)
        syncs = _metrics.family(registry, "controller_sync", _make_syncs)
        # The children, looked up once (`labels()` parses and locks on every call); every
        # series exists from the start, so a rate alert works from the first scrape.
        self._counted = {result: syncs.labels(name, result) for result in SYNC_RESULTS}
        self._resync_keys = resync_keys
        self._shutdown_timeout = shutdown_timeout
        self._stop = threading.Event()  # the `stop` of the running `run`

    def has_synced(self) -> bool:
        return all(s() for s in self._synced)

    def wait_for_sync(self, stop: threading.Event, timeout: float | None = None) -> bool:
        return wait_until(self.has_synced, stop, timeout)

    def run(self, stop: threading.Event) -> None:
        """Wait for the caches, run the workers (and the resync) until `stop`, then stop
        taking keys and wait for the syncs in flight."""
        self._stop = stop
        if not self.wait_for_sync(stop):
            self.queue.shut_down()
            return
        threads = [
            threading.Thread(target=self._worker, name=f"{self.name}-worker-{i}", daemon=True)
            for i in range(self.workers)
        ]
        if self.resync_period is not None and self._resync_keys is not None:
            threads.append(
                threading.Thread(
                    target=self._resync_loop, args=(stop,), name=f"{self.name}-resync", daemon=True
                )
            )
        for thread in threads:
            thread.start()
        log.info("%s workers started", self.name, extra={"workers": self.workers})
        stop.wait()
        # Workers check `stop` around `get`; shutting the queue down wakes the idle ones.
        self.queue.shut_down()
        deadline = time.monotonic() + self._shutdown_timeout
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            log.warning("%s: a sync did not finish within %ss", self.name, self._shutdown_timeout)

    def _worker(self) -> None:
        while self.process_next_work_item():
            pass

    def _resync_loop(self, stop: threading.Event) -> None:
        assert self.resync_period is not None and self._resync_keys is not None
        while not stop.wait(self.resync_period):
            for key in self._resync_keys():
                self.queue.add(key)

    def process_next_work_item(self) -> bool:
        """Take one key and run `sync` on it; False once the loop is stopping."""
        if self._stop.is_set():
            return False
        key, shutdown = self.queue.get()
        if shutdown or key is None:
            return False
        if self._stop.is_set():
            # Taken in the instant stop was set: leave it for the next leader.
            self.queue.done(key)
            return False
        try:
            outcome = self._sync(key)
        except ApiError as err:
            self._failed(key, err)
            if err.transient and err.retry_after is not None:
                # The server said when (429/503 with Retry-After): not before then, and
                # not before the key's backoff either, so a server (or proxy) repeating
                # a short Retry-After does not get every key at a fixed pace forever.
                self._retry_not_before(key, err.retry_after)
            else:
                # Retry with this key's exponential backoff.
                self.queue.add_rate_limited(key)
        except SyncFailed as err:
            self._failed(key, err)
            if err.after is not None:
                # The controller said when it is worth looking again; the backoff still grows.
                self._retry_not_before(key, err.after)
            else:
                self.queue.add_rate_limited(key)
        except Exception as err:
            self._failed(key, err)
            # An unexpected failure: retry with this key's exponential backoff.
            self.queue.add_rate_limited(key)
        else:
            self._counted["success" if outcome is None else "requeue"].inc()
            if outcome is None:
                # Done (written, waiting, or nothing to do): reset the key's backoff.
                self.queue.forget(key)
            elif outcome.after is not None:
                # The controller said when: honour it.
                self.queue.add_after(key, outcome.after)
            else:
                # Retry later with this key's exponential backoff.
                self.queue.add_rate_limited(key)
        finally:
            # Let the queue hand this key to a worker again.
            self.queue.done(key)
        return True

    def _retry_not_before(self, key: str, seconds: float) -> None:
        """Retry after `seconds` or the key's backoff, whichever is later (a backoff step)."""
        self.queue.add_after(key, max(seconds, self.queue.rate_limiter.when(key)))

    def _failed(self, key: str, err: Exception) -> None:
        self._counted["error"].inc()
        if isinstance(err, ApiError) and err.transient:
            log.warning(
                "%s: transient API error; retrying",
                self.name,
                extra={"key": key, "error": str(err)},
            )
        elif isinstance(err, SyncFailed):
            log.warning("%s: %s; retrying", self.name, err, extra={"key": key})
        else:
            log.exception("%s: sync failed; retrying", self.name, extra={"key": key})
