"""How long a Pod has waited for its certificate, across the requests kubelet makes for it:
kube-controller-manager's cleaner deletes a waiting request after 15-20
minutes and kubelet makes a new one, so a request's age restarts every ~16 minutes while
the Pod's wait goes on; the pending alert reads the Pod's wait, per namespace."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from signer.metrics import SignerMetrics
from signer.podwaits import RELEASE_GRACE, PodWaits

MIN = 60.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_pods_wait_goes_on_across_the_cleaners_replacement_of_its_request() -> None:
    clock = Clock()
    waits = PodWaits(clock)
    start = clock.now
    waits.waiting("uid-1", "team-a", "team-a/req-1", since=start)
    clock.now = start + 16 * MIN
    waits.released("team-a/req-1")  # the cleaner deleted it; the Pod still waits
    assert waits.oldest_by_namespace() == {"team-a": 16 * MIN}
    clock.now = start + 16.5 * MIN
    waits.waiting("uid-1", "team-a", "team-a/req-2", since=start + 16.4 * MIN)
    clock.now = start + 30 * MIN
    assert waits.oldest_by_namespace() == {"team-a": 30 * MIN}


def test_an_answered_pod_stops_waiting_at_once() -> None:
    clock = Clock()
    waits = PodWaits(clock)
    waits.waiting("uid-1", "team-a", "team-a/req-1", since=clock.now)
    clock.now += 12 * MIN
    waits.resolved("team-a/req-1")
    assert waits.oldest_by_namespace() == {}
    # A later request of the same Pod (a refresh at half-life) starts a new wait.
    waits.waiting("uid-1", "team-a", "team-a/req-2", since=clock.now)
    clock.now += MIN
    assert waits.oldest_by_namespace() == {"team-a": MIN}


def test_a_pod_whose_request_is_gone_and_not_replaced_is_forgotten_after_the_grace() -> None:
    clock = Clock()
    waits = PodWaits(clock)
    waits.waiting("uid-1", "team-a", "team-a/req-1", since=clock.now)
    clock.now += 16 * MIN
    waits.released("team-a/req-1")  # and the Pod was deleted: no new request comes
    clock.now += RELEASE_GRACE - 1
    assert "team-a" in waits.oldest_by_namespace()
    clock.now += 2
    assert waits.oldest_by_namespace() == {}
    assert waits.size() == 0


def test_a_pod_with_two_volumes_waits_until_both_requests_are_answered() -> None:
    clock = Clock()
    waits = PodWaits(clock)
    waits.waiting("uid-1", "ns", "ns/a", since=clock.now)
    clock.now += MIN
    waits.waiting("uid-1", "ns", "ns/b", since=clock.now)
    clock.now += MIN
    waits.resolved("ns/a")
    assert waits.oldest_by_namespace() == {"ns": 2 * MIN}
    waits.resolved("ns/b")
    assert waits.oldest_by_namespace() == {}


def test_only_namespaces_with_waiting_pods_are_reported_with_their_longest_wait() -> None:
    clock = Clock()
    waits = PodWaits(clock)
    waits.waiting("uid-1", "a", "a/1", since=clock.now - 5 * MIN)
    waits.waiting("uid-2", "a", "a/2", since=clock.now - 9 * MIN)
    waits.waiting("uid-3", "b", "b/1", since=clock.now - MIN)
    waits.waiting("uid-3", "b", "b/1", since=clock.now)  # a re-drive keeps the first time
    assert waits.oldest_by_namespace() == {"a": 9 * MIN, "b": MIN}
    waits.resolved("b/1")
    waits.resolved("unknown/request")  # never waited: nothing to do
    assert waits.oldest_by_namespace() == {"a": 9 * MIN}


def test_the_gauge_has_one_series_per_namespace_with_waiting_pods() -> None:
    clock = Clock()
    registry = CollectorRegistry()
    metrics = SignerMetrics(registry, clock=clock)
    name = "service_serving_ca_controller_pod_waiting_seconds"
    assert registry.get_sample_value(name, {"namespace": "team-a"}) is None
    metrics.pod_waits.waiting("uid-1", "team-a", "team-a/req-1", since=clock.now - 11 * MIN)
    assert registry.get_sample_value(name, {"namespace": "team-a"}) == 11 * MIN
    metrics.pod_waits.resolved("team-a/req-1")
    assert registry.get_sample_value(name, {"namespace": "team-a"}) is None


def test_deleted_pods_are_forgotten_even_when_nothing_scrapes_the_metrics() -> None:
    """With `--metrics-bind-address=0` nothing calls `oldest_by_namespace`: the Pods whose
    requests were deleted with them must still expire, or memory grows with every Pod
    ever deleted while it waited."""
    clock = Clock()
    waits = PodWaits(clock)
    for i in range(1000):
        waits.waiting(f"uid-{i}", "team-a", f"team-a/req-{i}", since=clock.now)
        waits.released(f"team-a/req-{i}")  # the Pod and its request were deleted
    clock.now += RELEASE_GRACE + 1
    waits.waiting("uid-new", "team-a", "team-a/req-new", since=clock.now)
    waits.released("team-a/req-new")

    assert waits.size() == 1
