"""Leader election acquires, renews, releases on stop, hands over to a standby, and gives
up (on_stopped_leading) when it cannot renew."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kube.leaderelection import LeaderElector
from tests.unit.fakeapi import FakeApi

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
LEASE = LEASES + "/signer"
MICRO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi().start()
    yield api
    api.stop()


@dataclass
class Candidate:
    elector: LeaderElector
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    leader_stop: threading.Event | None = None
    thread: threading.Thread | None = None

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
        box["c"].leader_stop = leader_stop
        box["c"].started.set()
        leader_stop.wait()

    kwargs.setdefault("lease_duration", 1.0)
    kwargs.setdefault("renew_deadline", 0.5)
    kwargs.setdefault("retry_period", 0.05)
    c = Candidate(
        LeaderElector(
            fake.client(),
            "kube-system",
            "signer",
            identity,
            on_started_leading=started,
            on_stopped_leading=lambda: box["c"].lost.set(),
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
        spec = lease_spec(fake)
        assert spec["holderIdentity"] == "b"
        assert spec["leaseTransitions"] == 1
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
        spec = lease_spec(fake)
        assert spec["holderIdentity"] == "b"
        assert spec["leaseTransitions"] == 5
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
