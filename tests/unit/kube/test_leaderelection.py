"""Leader election acquires, renews, releases on stop, hands over to a standby, and gives
up (on_stopped_leading) when it cannot renew."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kube.leaderelection import LeaderElector
from tests.unit.fakeapi import FakeApi

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
LEASE = LEASES + "/signer"
MICRO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


@dataclass
class Candidate:
    elector: LeaderElector
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    leader_stop: threading.Event | None = None
    thread: threading.Thread | None = None
    started_at: float = 0.0
    lost_at: float = 0.0

    def start(self) -> Candidate:
        self.thread = threading.Thread(target=self.elector.run, args=(self.stop,), daemon=True)
        self.thread.start()
        return self

    def finish(self, timeout: float = 3.0) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "run() did not return"


def candidate(
    fake: FakeApi, identity: str, registry: CollectorRegistry | None = None, **kwargs: Any
) -> Candidate:
    box: dict[str, Candidate] = {}

    def started(leader_stop: threading.Event) -> None:
        box["c"].started_at = time.monotonic()
        box["c"].leader_stop = leader_stop
        box["c"].started.set()
        leader_stop.wait()

    def stopped() -> None:
        box["c"].lost_at = time.monotonic()
        box["c"].lost.set()

    kwargs.setdefault("lease_duration", 1.0)
    kwargs.setdefault("renew_deadline", 0.5)
    kwargs.setdefault("retry_period", 0.05)
    client = kwargs.pop("client", None) or fake.client()
    c = Candidate(
        LeaderElector(
            client,
            "kube-system",
            "signer",
            identity,
            on_started_leading=started,
            on_stopped_leading=stopped,
            registry=registry,
            **kwargs,
        )
    )
    box["c"] = c
    return c


def lease_spec(fake: FakeApi) -> dict[str, Any]:
    lease = fake.get(LEASES, "signer")
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


def test_a_missing_lease_is_created_and_leadership_starts(fake: FakeApi) -> None:
    registry = CollectorRegistry()
    a = candidate(fake, "a", registry).start()
    try:
        assert a.started.wait(3)
        assert a.elector.is_leader()
        spec = lease_spec(fake)
        assert spec["holderIdentity"] == "a"
        assert spec["leaseDurationSeconds"] == 1
        assert spec["leaseTransitions"] == 0
        assert re.fullmatch(MICRO, spec["renewTime"])
        assert re.fullmatch(MICRO, spec["acquireTime"])
        assert registry.get_sample_value("leader_election_master_status", {"name": "signer"}) == 1
    finally:
        a.finish()
    assert registry.get_sample_value("leader_election_master_status", {"name": "signer"}) == 0


def test_the_leader_renews_with_a_direct_put(fake: FakeApi) -> None:
    a = candidate(fake, "a").start()
    try:
        assert a.started.wait(3)
        first = lease_spec(fake)["renewTime"]
        gets = fake.count("GET", LEASE)
        assert fake.wait_for("PUT", LEASE, count=3)
        assert lease_spec(fake)["renewTime"] > first
        assert lease_spec(fake)["acquireTime"] == first
        assert fake.count("GET", LEASE) == gets, "renewals need no GET"
        assert a.elector.healthy()
    finally:
        a.finish()


def test_stop_while_leading_stops_the_leader_work_and_releases_the_lease(fake: FakeApi) -> None:
    a = candidate(fake, "a").start()
    assert a.started.wait(3)
    a.finish()
    assert a.leader_stop is not None and a.leader_stop.is_set()
    spec = lease_spec(fake)
    assert spec["holderIdentity"] == ""
    assert spec["leaseDurationSeconds"] == 1
    assert not a.elector.is_leader()
    assert not a.lost.is_set(), "a requested stop is not a lost lease"


def held_by(fake: FakeApi) -> tuple[str, int]:
    """The Lease's holder and its transition count."""
    spec = lease_spec(fake)
    return spec["holderIdentity"], spec["leaseTransitions"]


def test_a_standby_waits_then_takes_over_at_once_after_release(fake: FakeApi) -> None:
    a = candidate(fake, "a", lease_duration=5.0, renew_deadline=2.0).start()
    assert a.started.wait(3)
    b = candidate(fake, "b").start()
    try:
        time.sleep(0.3)
        assert not b.started.is_set() and not b.elector.is_leader()
        released = time.monotonic()
        a.finish()
        assert b.started.wait(3)
        assert time.monotonic() - released < 1.0, "no need to wait out the 5 s lease"
        assert held_by(fake) == ("b", 1)
    finally:
        b.finish()


def test_an_abandoned_lease_is_taken_only_after_it_expires_by_our_clock(fake: FakeApi) -> None:
    fake.put(
        LEASES,
        {
            "metadata": {"name": "signer", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "crashed",
                "leaseDurationSeconds": 1,
                # Ancient by the wall clock: must not matter, only what we observe does.
                "renewTime": "2000-01-01T00:00:00.000000Z",
                "acquireTime": "2000-01-01T00:00:00.000000Z",
                "leaseTransitions": 4,
            },
        },
    )
    began = time.monotonic()
    b = candidate(fake, "b").start()
    try:
        assert b.started.wait(4)
        assert time.monotonic() - began >= 0.95
        assert held_by(fake) == ("b", 5)
    finally:
        b.finish()


def test_failing_to_renew_past_the_deadline_calls_on_stopped_leading(fake: FakeApi) -> None:
    a = candidate(fake, "a").start()
    assert a.started.wait(3)
    fake.fail("PUT", LEASE, 500, times=10_000)
    lost_at = time.monotonic()
    assert a.lost.wait(3)
    assert 0.45 <= time.monotonic() - lost_at < 2.0
    assert a.leader_stop is not None and a.leader_stop.is_set()
    assert not a.elector.is_leader()
    assert a.thread is not None
    a.thread.join(2)
    assert not a.thread.is_alive()


def test_a_lease_taken_by_another_holder_is_lost(fake: FakeApi) -> None:
    a = candidate(fake, "a", lease_duration=3.0, renew_deadline=0.5).start()
    assert a.started.wait(3)
    lease = fake.get(LEASES, "signer")
    assert lease is not None
    lease["spec"]["holderIdentity"] = "usurper"
    fake.put(LEASES, lease)  # new resourceVersion: a's direct PUT now conflicts
    assert a.lost.wait(3)
    assert lease_spec(fake)["holderIdentity"] == "usurper"
    assert fake.count("PUT", LEASE) >= 2


def test_unhealthy_when_leading_but_renewal_is_overdue(fake: FakeApi) -> None:
    skew = [0.0]
    a = candidate(
        fake,
        "a",
        lease_duration=3.0,
        renew_deadline=2.0,
        retry_period=1.0,
        clock=lambda: time.monotonic() + skew[0],
    ).start()
    try:
        assert a.started.wait(3)
        assert a.elector.healthy()
        skew[0] = 3.5  # as if the renew loop had been stuck for 3.5 s
        assert not a.elector.healthy()
    finally:
        a.finish()


def test_a_follower_is_healthy_and_bad_timings_are_refused(fake: FakeApi) -> None:
    assert candidate(fake, "x").elector.healthy()
    with pytest.raises(ValueError):
        candidate(fake, "x", lease_duration=1.0, renew_deadline=1.0)
    with pytest.raises(ValueError):
        candidate(fake, "x", renew_deadline=0.5, retry_period=0.5)


def black_hole_overlap(
    fake: FakeApi, lease_duration: float, renew_deadline: float, retry_period: float
) -> tuple[float, float]:
    """Seconds the black-holed leader went on leading after a standby could first have
    acquired the Lease, and after the standby did acquire it (> 0: two leaders at once).
    The standby waits `lease_duration` from its own read of the last record the leader
    wrote, so the earliest moment is that write's arrival at the server plus
    `lease_duration`."""
    timings: dict[str, Any] = {
        "lease_duration": lease_duration,
        "renew_deadline": renew_deadline,
        "retry_period": retry_period,
    }
    leader_client = fake.client()
    leader_client.user_agent = "leader"
    a = candidate(fake, "a", client=leader_client, **timings).start()
    assert a.started.wait(10)
    b = candidate(fake, "b", **timings).start()
    try:
        assert fake.wait_for("GET", LEASE, count=1, timeout=10)  # the standby has read it
        assert fake.wait_for("PUT", LEASE, count=2, timeout=10)  # and a has renewed
        holed_at = time.monotonic()
        fake.black_hole(lambda r: r.user_agent == "leader")
        assert a.lost.wait(lease_duration + 3 * renew_deadline + 10), "never stopped leading"
        assert b.started.wait(lease_duration + 10), "the standby never took over"
        last_write = max(
            r.at
            for r in fake.matching("PUT", LEASE)
            if r.user_agent == "leader" and r.at < holed_at
        )
        earliest_takeover = last_write + lease_duration
        return a.lost_at - earliest_takeover, a.lost_at - b.started_at
    finally:
        a.stop.set()
        b.finish(timeout=renew_deadline + 5)


def test_a_black_holed_leader_stops_leading_before_a_standby_can_acquire(
    fake: FakeApi,
) -> None:
    """The renew deadline cuts off a renewal already in flight (client-go bounds each try
    by the time left): against a server that answers nothing, on_stopped_leading runs
    before the standby can take the Lease, not a renew deadline later."""
    could, did = black_hole_overlap(fake, lease_duration=4.0, renew_deadline=2.0, retry_period=0.5)
    assert could <= 0, f"led {could:.2f}s after a standby could acquire"
    assert did <= 0, f"led {did:.2f}s after the standby acquired"


def test_observed_time_is_taken_after_a_slow_read(fake: FakeApi) -> None:
    """A standby whose read of a live holder's Lease was slow counts the lease duration
    from when the answer arrived, not from when it asked: otherwise the next try, one
    retry later, would find a lease it has watched for 0.5 s already "expired"."""
    fake.put(
        LEASES,
        {
            "metadata": {"name": "signer", "namespace": "kube-system"},
            "spec": {"holderIdentity": "holder", "leaseDurationSeconds": 1},
        },
    )
    now = [0.0]
    client = fake.client()
    real_get = client.get
    slow = [True]

    def get(path: str, params: Any = None, *, timeout: float | None = None) -> Any:
        result = real_get(path, params, timeout=timeout)
        if slow.pop() if slow else False:
            now[0] += 5.0  # the first answer took 5 s to arrive
        return result

    client.get = get  # type: ignore[method-assign]
    b = LeaderElector(
        client,
        "kube-system",
        "signer",
        "b",
        lease_duration=1.0,
        renew_deadline=0.5,
        retry_period=0.1,
        on_started_leading=lambda _stop: None,
        on_stopped_leading=lambda: None,
        clock=lambda: now[0],
    )
    assert not b._try_acquire_or_renew()
    now[0] += 0.5
    assert not b._try_acquire_or_renew(), "observed 0.5 s ago: not expired"
    assert lease_spec(fake)["holderIdentity"] == "holder"
    now[0] += 0.6
    assert b._try_acquire_or_renew(), "unchanged for more than the lease duration"
    assert lease_spec(fake)["holderIdentity"] == "b"


def test_the_lease_is_released_only_after_the_leader_work_has_finished(fake: FakeApi) -> None:
    """SIGTERM: the workers finish their syncs in flight, then the Lease is released — not
    after a fixed `renew_deadline` while a sync may still write."""
    finished: list[float] = []

    def lead(leader_stop: threading.Event) -> None:
        leader_stop.wait()
        time.sleep(1.5)  # a sync in flight when stop came
        finished.append(time.monotonic())

    elector = LeaderElector(
        fake.client(),
        "kube-system",
        "signer",
        "a",
        lease_duration=4.0,
        renew_deadline=1.0,
        retry_period=0.2,
        on_started_leading=lead,
        on_stopped_leading=lambda: None,
    )
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    thread.start()
    assert fake.wait_for("PUT", LEASE, count=1, timeout=5) or fake.wait_for("POST", LEASES)
    deadline = time.monotonic() + 5
    while not elector.is_leader() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert elector.is_leader()
    stop.set()
    thread.join(10)
    assert not thread.is_alive()

    [done_at] = finished
    [release] = [r for r in fake.matching("PUT", LEASE) if r.body["spec"]["holderIdentity"] == ""]
    assert release.at >= done_at


def test_a_renewal_is_not_delayed_by_an_exhausted_worker_bucket(fake: FakeApi) -> None:
    """Leader election has a write limiter of its own (kube-controller-manager gives it a
    client of its own): a burst of worker writes that has emptied the client's bucket
    for the next 30 s delays neither taking the Lease nor renewing it."""
    client = fake.client(qps=20.0, burst=1)
    for _ in range(600):
        client.write_limiter.reserve()  # the workers' writes: 30 s of tokens spoken for
    a = candidate(fake, "a", client=client, retry_period=0.1).start()
    try:
        assert a.started.wait(3), "taking the Lease waited for the workers' bucket"
        renewals = fake.count("PUT", LEASE)
        time.sleep(1.0)
        assert fake.count("PUT", LEASE) - renewals >= 3, "renewals waited for the workers' bucket"
        assert not a.lost.is_set()
    finally:
        a.finish()
    assert client.write_limiter.reserve() > 25.0, "the elector took none of the workers' tokens"
