"""The shared controller loop: the processNextWorkItem contract, workers only on synced
caches, resync, and shutdown (no new key once stop is set; syncs in flight finish)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from kube.controller import Controller, Requeue
from kube.workqueue import RateLimitingQueue


class FakeInformer:
    def __init__(self, name: str = "things", synced: bool = True) -> None:
        self.name = name
        self.synced = synced
        self.runs = 0

    def run(self, stop: threading.Event) -> None:
        self.runs += 1
        stop.wait()

    def has_synced(self) -> bool:
        return self.synced


def controller(
    sync: Callable[[str], Requeue | None],
    *,
    workers: int = 1,
    informer: FakeInformer | None = None,
    **kwargs: object,
) -> Controller:
    queue: RateLimitingQueue[str] = RateLimitingQueue("test")
    return Controller(
        "test",
        sync,
        queue,
        informers=(informer or FakeInformer(),),
        workers=workers,
        **kwargs,  # type: ignore[arg-type]
    )


def run_in_thread(c: Controller, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=c.run_workers, args=(stop,), daemon=True)
    thread.start()
    return thread


def test_success_forgets_requeue_backs_off_and_retry_after_is_honoured() -> None:
    outcomes: list[Requeue | None] = [None, Requeue(), Requeue(after=30.0)]
    c = controller(lambda _key: outcomes.pop(0))
    q = c.queue
    q.add("a")
    assert c.process_next_work_item()
    assert q.num_requeues("a") == 0
    q.add("a")
    assert c.process_next_work_item()
    assert q.num_requeues("a") == 1  # add_rate_limited
    assert q.get(timeout=5) == ("a", False)  # backoff of 5 ms has passed
    q.done("a")
    q.add("a")
    assert c.process_next_work_item()
    assert q.num_requeues("a") == 1  # Retry-After is not counted as a failure
    assert q.get(timeout=0.2) == (None, False)  # parked for 30 s, not handed out
    q.shut_down()


def test_an_exception_is_retried_with_backoff_and_reported() -> None:
    errors: list[tuple[str, Exception]] = []

    def sync(_key: str) -> Requeue | None:
        raise RuntimeError("bug")

    c = controller(sync, on_error=lambda key, err: errors.append((key, err)))
    c.queue.add("a")
    assert c.process_next_work_item()
    assert c.queue.num_requeues("a") == 1
    assert [(k, str(e)) for k, e in errors] == [("a", "bug")]
    c.queue.shut_down()


def test_workers_wait_for_every_cache() -> None:
    synced = threading.Event()
    seen: list[str] = []
    informer = FakeInformer(synced=False)

    def sync(key: str) -> None:
        seen.append(key)

    c = controller(sync, informer=informer, synced=(synced.is_set,))
    stop = threading.Event()
    c.queue.add("a")
    thread = run_in_thread(c, stop)
    assert not c.wait_for_sync(threading.Event(), timeout=0.2)
    informer.synced = True
    assert not c.wait_for_sync(threading.Event(), timeout=0.2)  # the extra check too
    assert seen == []
    synced.set()
    assert c.wait_for_sync(threading.Event(), timeout=5)
    deadline = threading.Event()
    for _ in range(100):
        if seen:
            break
        deadline.wait(0.05)
    assert seen == ["a"]
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


def test_start_informers_is_idempotent() -> None:
    informer = FakeInformer()
    c = controller(lambda _key: None, informer=informer)
    stop = threading.Event()
    first = c.start_informers(stop)
    second = c.start_informers(stop)
    assert first == second and len(first) == 1
    stop.set()
    first[0].join(5)
    assert informer.runs == 1


def test_resync_adds_the_named_keys_every_period() -> None:
    seen: list[str] = []
    both = threading.Event()

    def sync(key: str) -> None:
        seen.append(key)
        if {"w1", "w2"} <= set(seen):
            both.set()

    c = controller(sync, resync_period=0.05, resync_keys=lambda: ["w1", "w2"])
    stop = threading.Event()
    thread = run_in_thread(c, stop)
    assert both.wait(5)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()


@pytest.mark.parametrize("workers", [1, 4])
def test_no_new_key_is_taken_once_stop_is_set_and_syncs_in_flight_finish(workers: int) -> None:
    """A replica told to stop (SIGTERM, lost lease) must not keep draining its queue: the
    keys it holds are the next leader's. Those already running finish before
    `run_workers` returns, so the Lease is released only once nothing of ours writes."""
    stop = threading.Event()
    started = threading.Semaphore(0)
    release = threading.Event()
    finished: list[str] = []
    lock = threading.Lock()

    def sync(key: str) -> None:
        started.release()
        release.wait(10)
        with lock:
            finished.append(key)

    c = controller(sync, workers=workers)
    for i in range(4000):
        c.queue.add(f"k{i}")
    thread = run_in_thread(c, stop)
    for _ in range(workers):
        assert started.acquire(timeout=5)
    stop.set()
    thread.join(0.3)
    assert thread.is_alive(), "run_workers returned while syncs were still running"
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert len(finished) == workers  # only the syncs in flight at stop
    assert len(c.queue) == 4000 - workers
