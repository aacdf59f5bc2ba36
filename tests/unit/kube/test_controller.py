"""The shared controller loop: the processNextWorkItem contract, the error policy, workers
only on synced caches, resync, and shutdown (no new key once stop is set; syncs in flight
finish); and the process's informer factory."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError
from kube.controller import SYNC_RESULTS, Loop, Requeue, SyncFailed
from kube.factory import InformerFactory
from kube.workqueue import RateLimitingQueue


def controller(
    sync: Callable[[str], Requeue | None],
    *,
    workers: int = 1,
    name: str = "test",
    **kwargs: object,
) -> Loop:
    queue: RateLimitingQueue[str] = RateLimitingQueue(name)
    return Loop(name, sync, queue, workers=workers, **kwargs)  # type: ignore[arg-type]


def syncs(registry: CollectorRegistry, controller: str, result: str) -> float | None:
    return registry.get_sample_value(
        "controller_sync_total", {"controller": controller, "result": result}
    )


def run_in_thread(c: Loop, stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=c.run, args=(stop,), daemon=True)
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


def test_an_exception_is_retried_with_backoff_and_counted_as_an_error() -> None:
    registry = CollectorRegistry()

    def sync(_key: str) -> Requeue | None:
        raise RuntimeError("bug")

    c = controller(sync, registry=registry)
    c.queue.add("a")
    assert c.process_next_work_item()
    assert c.queue.num_requeues("a") == 1
    assert syncs(registry, "test", "error") == 1
    c.queue.shut_down()


def test_a_failure_the_controller_explained_is_an_error_retried_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()

    def sync(_key: str) -> Requeue | None:
        raise SyncFailed("the signing certificate expires too soon")

    c = controller(sync, registry=registry)
    c.queue.add("a")
    assert c.process_next_work_item()
    assert c.queue.num_requeues("a") == 1
    assert syncs(registry, "test", "error") == 1
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("WARNING", "test: the signing certificate expires too soon; retrying", None)
    ]
    c.queue.shut_down()


def test_a_failure_that_says_when_to_look_again_is_not_retried_before() -> None:
    registry = CollectorRegistry()

    def sync(_key: str) -> Requeue | None:
        raise SyncFailed("the Secret cannot be read", after=30.0)

    c = controller(sync, registry=registry)
    c.queue.add("a")
    assert c.process_next_work_item()
    assert c.queue.num_requeues("a") == 1  # a backoff step still
    assert c.queue.get(timeout=0.2) == (None, False)  # parked for the 30 s
    assert syncs(registry, "test", "error") == 1
    c.queue.shut_down()


def test_every_sync_is_counted_once_by_outcome_under_its_controller_name() -> None:
    """The one error policy is counted in one place: the loop, for every controller, by
    `controller` and `result` (success, requeue, error). Every series starts at 0."""
    registry = CollectorRegistry()
    outcomes: list[Requeue | Exception | None] = [None, Requeue(), Requeue(after=30.0)]
    outcomes += [ApiError(503, "Service Unavailable"), RuntimeError("bug")]

    def sync(_key: str) -> Requeue | None:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    other = controller(lambda _key: None, name="other", registry=registry)
    assert [syncs(registry, "other", r) for r in SYNC_RESULTS] == [0, 0, 0]
    c = controller(sync, name="signer", registry=registry)
    for key in ("a", "b", "c", "d", "e"):
        c.queue.add(key)
        assert c.process_next_work_item()
    assert {r: syncs(registry, "signer", r) for r in SYNC_RESULTS} == {
        "success": 1,
        "requeue": 2,
        "error": 2,
    }
    assert [syncs(registry, "other", r) for r in SYNC_RESULTS] == [0, 0, 0]
    c.queue.shut_down()
    other.queue.shut_down()


def test_workers_wait_for_every_cache() -> None:
    synced = threading.Event()
    first = threading.Event()
    seen: list[str] = []

    def sync(key: str) -> None:
        seen.append(key)

    c = controller(sync, synced=(first.is_set, synced.is_set))
    stop = threading.Event()
    c.queue.add("a")
    thread = run_in_thread(c, stop)
    assert not c.wait_for_sync(threading.Event(), timeout=0.2)
    first.set()
    assert not c.wait_for_sync(threading.Event(), timeout=0.2)  # every check
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


@pytest.mark.parametrize(
    ("error", "parked", "requeues"),
    [
        (ApiError(503, "Service Unavailable", retry_after=30.0), True, 1),
        (ApiError(429, "Too Many Requests", retry_after=30.0), True, 1),
        (ApiError(0, "connection refused"), False, 1),
        (ApiError(403, "Forbidden"), False, 1),
        (ApiError(422, "Unprocessable Entity", retry_after=30.0), False, 1),
    ],
    ids=["503-retry-after", "429-retry-after", "transport", "403", "422"],
)
def test_api_errors_follow_the_server_when_transient_else_back_off(
    error: ApiError, parked: bool, requeues: int
) -> None:
    """A transient error with Retry-After waits at least what the server said; every
    failure counts a backoff step for its key, and one error."""
    registry = CollectorRegistry()

    def sync(_key: str) -> Requeue | None:
        raise error

    c = controller(sync, registry=registry)
    c.queue.add("a")
    assert c.process_next_work_item()
    assert c.queue.num_requeues("a") == requeues
    if parked:
        assert c.queue.get(timeout=0.2) == (None, False)  # parked for 30 s
    else:
        assert c.queue.get(timeout=5) == ("a", False)  # backoff of 5 ms has passed
    assert syncs(registry, "test", "error") == 1
    c.queue.shut_down()


def test_a_transient_error_repeated_backs_off_per_key_even_with_a_short_retry_after() -> None:
    """docs/reference.md §5: transient errors back off per key, *not before* Retry-After.
    An API server answering 429 with `Retry-After: 1` (or a proxy with 0) for minutes must
    not have every key retried at that fixed pace: the key's backoff grows regardless."""

    def sync(_key: str) -> Requeue | None:
        raise ApiError(429, "Too Many Requests", retry_after=0.5)

    c = controller(sync)
    for _ in range(12):  # twelve failures so far: the next backoff is 0.005 * 2**12 = 20 s
        c.queue.rate_limiter.when("a")
    c.queue.add("a")
    assert c.process_next_work_item()
    assert c.queue.get(timeout=1.0) == (None, False)  # still backing off, past Retry-After
    assert c.queue.num_requeues("a") == 13
    c.queue.shut_down()


class FakeInformer:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, stop: threading.Event) -> None:
        self.runs += 1
        stop.wait()


def test_factory_starts_each_informer_once_and_later_ones_on_the_next_start() -> None:
    factory = InformerFactory(None)  # type: ignore[arg-type]  # nothing is listed
    first = factory.informer("/api/v1/pods", name="pods", transform=dict)
    stop = threading.Event()
    fakes = [FakeInformer(), FakeInformer()]
    first.run = fakes[0].run  # type: ignore[method-assign]
    try:
        assert [t.name for t in factory.start(stop)] == ["informer-pods"]
        assert factory.start(stop) == []
        second = factory.informer("/api/v1/services", name="services", transform=dict)
        second.run = fakes[1].run  # type: ignore[method-assign]
        assert [t.name for t in factory.start(stop)] == ["informer-services"]
    finally:
        stop.set()
    for _ in range(100):
        if all(f.runs for f in fakes):
            break
        stop.wait(0.01)
    assert [f.runs for f in fakes] == [1, 1]


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
    `run` returns, so the Lease is released only once nothing of ours writes."""
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
    assert thread.is_alive(), "run returned while syncs were still running"
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert len(finished) == workers  # only the syncs in flight at stop
    assert len(c.queue) == 4000 - workers
