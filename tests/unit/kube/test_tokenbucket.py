"""The one token bucket: a burst, then `qps`; reservations queue; `qps <= 0` is off; a
fresh bucket shares nothing with the one it came from."""

from __future__ import annotations

import pytest

from kube.tokenbucket import TokenBucket


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_take_sleeps_for_the_token_it_reserved_once_the_burst_is_spent() -> None:
    clock = Clock()
    bucket = TokenBucket(qps=4.0, burst=2, clock=clock, sleep=clock.sleep)
    bucket.take()
    bucket.take()
    assert clock.slept == []
    bucket.take()
    bucket.take()
    assert clock.slept == [pytest.approx(0.25), pytest.approx(0.5)], "each queues behind the last"
    clock.now += 10.0
    assert bucket.reserve() == 0.0, "refilled, capped at the burst"


def test_zero_qps_never_waits() -> None:
    bucket = TokenBucket(qps=0.0, burst=1)
    assert [bucket.reserve() for _ in range(1000)] == [0.0] * 1000


def test_a_fresh_bucket_is_full_whatever_its_origin_owes() -> None:
    clock = Clock()
    workers = TokenBucket(qps=1.0, burst=1, clock=clock, sleep=clock.sleep)
    for _ in range(30):
        workers.reserve()
    own = workers.fresh()
    assert (own.qps, own.burst) == (1.0, 1)
    assert own.reserve() == 0.0
    assert workers.reserve() == pytest.approx(30.0)
