"""The work queue keeps client-go's promises: dedup, one worker per key, backoff, delays,
shutdown, metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from kube.workqueue import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimitingQueue,
    default_controller_rate_limiter,
)


class FixedDelay:
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requeues: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        self.requeues[key] = self.requeues.get(key, 0) + 1
        return self.delay

    def forget(self, key: Hashable) -> None:
        self.requeues.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self.requeues.get(key, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def get_now(q: RateLimitingQueue[str]) -> str | None:
    key, shutdown = q.get(timeout=1.0)
    assert not shutdown
    return key


def test_key_added_twice_waits_once() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("dedup")
    q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert [get_now(q), get_now(q)] == ["a", "b"]
    assert q.get(timeout=0.01) == (None, False)


def test_queue_is_idle_only_when_nothing_waits_or_is_processed() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("idle")
    assert q.idle()
    q.add("a")
    assert not q.idle()
    key = get_now(q)
    assert not q.idle()  # being processed
    assert key is not None
    q.done(key)
    assert q.idle()


def test_key_added_while_processing_is_requeued_after_done() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("processing")
    q.add("a")
    assert get_now(q) == "a"
    q.add("a")
    assert len(q) == 0, "a processing key must not be handed to a second worker"
    assert q.get(timeout=0.01) == (None, False)
    q.done("a")
    assert len(q) == 1
    assert get_now(q) == "a"
    q.done("a")
    assert len(q) == 0


def test_key_is_never_processed_by_two_workers_at_once() -> None:
    q: RateLimitingQueue[int] = RateLimitingQueue("exclusive")
    active: set[int] = set()
    overlaps: list[int] = []
    processed: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            key, shutdown = q.get()
            if shutdown:
                return
            assert key is not None
            with lock:
                if key in active:
                    overlaps.append(key)
                active.add(key)
            time.sleep(0.0005)
            with lock:
                active.discard(key)
                processed.append(key)
            q.done(key)

    workers = [threading.Thread(target=worker) for _ in range(4)]
    for w in workers:
        w.start()
    for i in range(400):
        q.add(i % 5)
        if i % 50 == 0:
            time.sleep(0.002)
    q.shut_down_with_drain(timeout=5)
    for w in workers:
        w.join(timeout=5)
    assert overlaps == []
    assert set(processed) == {0, 1, 2, 3, 4}


def test_item_backoff_doubles_per_failure_and_forget_resets_it() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert limiter.num_requeues("a") == 5
    assert limiter.when("b") == pytest.approx(0.005), "backoff is per key"
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_item_backoff_is_capped() -> None:
    limiter = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(100)]
    assert max(delays) == 1000.0
    assert delays[-1] == 1000.0


def test_bucket_allows_burst_then_paces_at_qps() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10, burst=100, clock=clock)
    assert all(bucket.when(i) == 0.0 for i in range(100))
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.when("y") == pytest.approx(0.2)
    clock.now += 10.0  # refills fully (capped at burst)
    assert bucket.when("z") == 0.0


def test_default_limiter_takes_the_longer_of_backoff_and_bucket() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(0.005, 1000.0), BucketRateLimiter(10, 1, clock)
    )
    assert limiter.when("a") == pytest.approx(0.005)  # bucket has its one token
    assert limiter.when("a") == pytest.approx(0.1)  # bucket empty: 1/qps
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert default_controller_rate_limiter().when("k") == pytest.approx(0.005)


def test_add_rate_limited_delivers_after_the_limiter_delay_and_counts_requeues() -> None:
    limiter = FixedDelay(0.05)
    q: RateLimitingQueue[str] = RateLimitingQueue("ratelimited", rate_limiter=limiter)
    start = time.monotonic()
    q.add_rate_limited("a")
    assert len(q) == 0
    assert get_now(q) == "a"
    assert time.monotonic() - start >= 0.045
    assert q.num_requeues("a") == 1
    q.done("a")
    q.forget("a")
    assert q.num_requeues("a") == 0
    q.shut_down()


def test_add_after_delivers_later_and_an_earlier_deadline_wins() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("delayed")
    start = time.monotonic()
    q.add_after("late", 0.15)
    q.add_after("a", 50.0)
    q.add_after("a", 0.05)  # earlier deadline replaces the later one
    q.add_after("a", 30.0)  # a later one does not push it back
    key, shutdown = q.get(timeout=20.0)  # far below the superseded deadlines, whatever the load
    assert (key, shutdown) == ("a", False)
    assert time.monotonic() - start >= 0.04
    q.done("a")
    assert q.get(timeout=20.0) == ("late", False)
    assert time.monotonic() - start >= 0.14
    q.done("late")
    assert q.get(timeout=0.05) == (None, False), "the superseded 'a' deadlines never fire"
    q.shut_down()


def test_add_after_zero_adds_at_once() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("zero")
    q.add_after("a", 0)
    assert len(q) == 1


def test_shut_down_wakes_every_blocked_getter() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("shutdown")
    results: list[tuple[str | None, bool]] = []

    def getter() -> None:
        results.append(q.get())

    threads = [threading.Thread(target=getter) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    q.shut_down()
    for t in threads:
        t.join(timeout=2)
    assert not any(t.is_alive() for t in threads)
    assert results == [(None, True)] * 3


def test_queued_keys_are_still_handed_out_after_shutdown_but_new_adds_are_ignored() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("drain")
    q.add("a")
    q.shut_down()
    q.add("b")
    q.add_after("c", 0.01)
    assert q.get() == ("a", False)
    assert q.get() == (None, True)


def test_shut_down_with_drain_waits_for_processing_keys() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("drainwait")
    q.add("a")
    assert get_now(q) == "a"
    assert q.shut_down_with_drain(timeout=0.05) is False
    threading.Timer(0.05, q.done, args=("a",)).start()
    assert q.shut_down_with_drain(timeout=2) is True


def test_metrics_are_exported_per_queue_name_on_a_shared_registry() -> None:
    registry = CollectorRegistry()
    first: RateLimitingQueue[str] = RateLimitingQueue("first", registry)
    second: RateLimitingQueue[str] = RateLimitingQueue(
        "second", registry, rate_limiter=FixedDelay(0.0)
    )
    first.add("a")
    first.add("b")
    key = get_now(first)
    assert key is not None
    time.sleep(0.01)

    def value(metric: str, name: str) -> float | None:
        return registry.get_sample_value(metric, {"name": name})

    assert value("workqueue_depth", "first") == 1
    assert value("workqueue_adds_total", "first") == 2
    assert value("workqueue_queue_duration_seconds_count", "first") == 1
    unfinished = value("workqueue_unfinished_work_seconds", "first")
    assert unfinished is not None and unfinished >= 0.01
    longest = value("workqueue_longest_running_processor_seconds", "first")
    assert longest is not None and longest >= 0.01
    first.done(key)
    assert value("workqueue_work_duration_seconds_count", "first") == 1
    assert value("workqueue_unfinished_work_seconds", "first") == 0

    second.add_rate_limited("x")
    assert value("workqueue_retries_total", "second") == 1
    assert value("workqueue_depth", "second") == 1
    text = generate_latest(registry).decode()
    for family in (
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds_bucket",
        "workqueue_work_duration_seconds_bucket",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
    ):
        assert any(
            line.startswith(family + "{") and 'name="second"' in line for line in text.splitlines()
        ), family


# fairness across flows ---------------------------------------------------------------------


def namespace_of(key: str) -> str:
    return key.partition("/")[0]


def test_without_flows_keys_are_handed_out_in_arrival_order() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("fifo")
    for key in ("storm/1", "storm/2", "quiet/1", "storm/3"):
        q.add(key)
    assert [get_now(q) for _ in range(4)] == ["storm/1", "storm/2", "quiet/1", "storm/3"]


def test_flows_are_served_round_robin_so_a_flood_does_not_queue_another_flow_behind_it() -> None:
    """A key of a quiet flow added behind 1,000 keys of a busy one is handed out second:
    one key per flow per turn, each flow in its own arrival order."""
    q: RateLimitingQueue[str] = RateLimitingQueue("fair", flow=namespace_of)
    for i in range(1000):
        q.add(f"storm/{i}")
    q.add("quiet/probe")
    assert q.waiting_flows() == 2
    assert [get_now(q), get_now(q), get_now(q)] == ["storm/0", "quiet/probe", "storm/1"]
    assert len(q) == 998
    assert q.waiting_flows() == 1


def test_flows_keep_dedup_and_one_worker_per_key() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("fair-dedup", flow=namespace_of)
    q.add("a/1")
    q.add("a/1")
    q.add("b/1")
    assert len(q) == 2
    assert get_now(q) == "a/1"
    q.add("a/1")  # while processing: dirty only
    assert len(q) == 1
    assert get_now(q) == "b/1"
    assert q.get(timeout=0.01) == (None, False)
    q.done("a/1")  # requeued at its flow's tail
    assert get_now(q) == "a/1"


def test_a_requeued_key_goes_behind_the_other_flows_waiting() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("fair-requeue", flow=namespace_of)
    q.add("a/1")
    q.add("a/2")
    q.add("b/1")
    assert get_now(q) == "a/1"
    q.add("a/1")
    q.done("a/1")
    assert [get_now(q), get_now(q), get_now(q)] == ["b/1", "a/2", "a/1"]


def test_flows_drain_after_shutdown_and_refuse_new_keys() -> None:
    q: RateLimitingQueue[str] = RateLimitingQueue("fair-shutdown", flow=namespace_of)
    q.add("a/1")
    q.add("b/1")
    q.shut_down()
    q.add("c/1")
    assert q.get(timeout=1) == ("a/1", False)
    assert q.get(timeout=1) == ("b/1", False)
    assert q.get(timeout=1) == (None, True)


def test_a_rate_limited_retry_comes_back_into_its_own_flow() -> None:
    """A retry after its backoff joins its flow's tail: behind the flood it belongs to,
    never ahead of another flow's waiting key."""
    q: RateLimitingQueue[str] = RateLimitingQueue(
        "fair-retry", rate_limiter=FixedDelay(0.01), flow=namespace_of
    )
    for key in ("storm/0", "storm/1", "storm/2"):
        q.add(key)
    assert get_now(q) == "storm/0"
    q.add_rate_limited("storm/0")
    q.done("storm/0")
    deadline = time.monotonic() + 10
    while len(q) < 3 and time.monotonic() < deadline:  # the delay thread re-adds it
        time.sleep(0.01)
    q.add("quiet/probe")
    assert [get_now(q) for _ in range(4)] == ["storm/1", "quiet/probe", "storm/2", "storm/0"]
    assert q.num_requeues("storm/0") == 1
