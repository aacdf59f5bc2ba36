"""One controller loop for every controller: informers, a rate-limited queue, workers.

The shape of kube-controller-manager's `pkg/controller/certificates/certificate_controller.go`:
the loop owns the informers' start-up, `has_synced`, the worker threads and client-go's
`processNextWorkItem` contract; a controller supplies only `sync(key)` and its event
handlers (which only enqueue). What the loop decides:

* **Workers start only on synced caches.** `run_workers` waits for every informer (and any
  extra `synced` check) before the first key is taken: a decision from a half-filled cache
  could delete or deny something that exists.
* **The contract**, for the outcome of one `sync(key)`:
  `None` → done: `forget` the key's backoff; `Requeue(after=s)` → the server said when
  (`Retry-After`): `add_after`; `Requeue()` → retry with the key's exponential backoff
  (`add_rate_limited`); an exception → the same backoff, and `on_error` is told. Always
  `done(key)` last, so the queue may hand the key out again.
* **Resync.** With `resync_period`, every period the keys `resync_keys()` names are added
  (KCM's periodic resync; for the signer, only the waiting requests).
* **Shutdown.** Once `stop` is set no worker takes a new key — keys still queued stay
  unprocessed, as a replica that stops leading must not keep acting — while syncs already
  running finish; `run_workers` returns after they have (bounded by `shutdown_timeout`,
  `SHUTDOWN_GRACE` by default), so the caller can release the Lease knowing nothing of
  ours still writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kube.workqueue import RateLimitingQueue

log = logging.getLogger(__name__)

# How long the syncs in flight get to finish once `stop` is set. The process uses the
# same bound for all its controllers together (manager/app.py) and then releases the
# Lease and exits, so it must fit, with the release, in the Pod's
# terminationGracePeriodSeconds (30 s in config/, like kube-controller-manager's Pod).
SHUTDOWN_GRACE = 20.0


@dataclass(frozen=True)
class Requeue:
    """Retry the key: after `after` seconds if the server said so, else with backoff."""

    after: float | None = None


Sync = Callable[[str], Requeue | None]


class RunnableInformer(Protocol):
    """What the loop needs of an informer (`kube.informer.Informer`)."""

    @property
    def name(self) -> str: ...

    def run(self, stop: threading.Event) -> None: ...

    def has_synced(self) -> bool: ...


class Controller:
    """Informers + one queue + `workers` threads running `sync` (see the module docstring)."""

    def __init__(
        self,
        name: str,
        sync: Sync,
        queue: RateLimitingQueue[str],
        *,
        informers: Sequence[RunnableInformer] = (),
        synced: Sequence[Callable[[], bool]] = (),
        workers: int = 1,
        on_error: Callable[[str, Exception], None] | None = None,
        resync_period: float | None = None,
        resync_keys: Callable[[], Iterable[str]] | None = None,
        shutdown_timeout: float = SHUTDOWN_GRACE,
    ) -> None:
        self.name = name
        self.queue = queue
        self.workers = max(1, workers)
        self.resync_period = resync_period
        self._sync = sync
        self._informers = tuple(informers)
        self._synced = tuple(synced)
        self._on_error = on_error
        self._resync_keys = resync_keys
        self._shutdown_timeout = shutdown_timeout
        self._stop = threading.Event()  # the `stop` of the running `run_workers`
        self._informer_threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    # informers ------------------------------------------------------------------------

    def start_informers(self, stop: threading.Event) -> list[threading.Thread]:
        """Start every informer (may run before leadership: warm caches). Idempotent: a
        second call returns the threads of the first."""
        with self._start_lock:
            if not self._informer_threads:
                for informer in self._informers:
                    thread = threading.Thread(
                        target=informer.run,
                        args=(stop,),
                        name=f"informer-{informer.name}",
                        daemon=True,
                    )
                    thread.start()
                    self._informer_threads.append(thread)
            return list(self._informer_threads)

    def has_synced(self) -> bool:
        return all(i.has_synced() for i in self._informers) and all(s() for s in self._synced)

    def wait_for_sync(self, stop: threading.Event, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not stop.is_set():
            if self.has_synced():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            stop.wait(0.05)
        return False

    # workers --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Informers and workers; blocks until `stop` is set and the workers have ended."""
        self.start_informers(stop)
        self.run_workers(stop)

    def run_workers(self, stop: threading.Event) -> None:
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
        except Exception as err:
            log.exception("%s: sync failed", self.name, extra={"key": key})
            if self._on_error is not None:
                self._on_error(key, err)
            # An unexpected failure: retry with this key's exponential backoff.
            self.queue.add_rate_limited(key)
        else:
            if outcome is None:
                # Done (written, waiting, or nothing to do): reset the key's backoff.
                self.queue.forget(key)
            elif outcome.after is not None:
                # The server said when (Retry-After): honour it.
                self.queue.add_after(key, outcome.after)
            else:
                # Retry later with this key's exponential backoff.
                self.queue.add_rate_limited(key)
        finally:
            # Let the queue hand this key to a worker again.
            self.queue.done(key)
        return True
