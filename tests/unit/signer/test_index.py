"""The waiting index: who waits on which Service or Pod, and what an event wakes."""

from __future__ import annotations

import threading

from signer.index import WaitingIndex


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_service_event_wakes_exactly_the_requests_waiting_on_that_service() -> None:
    index = WaitingIndex()
    index.wait("ns/req-a", "ns/pod-1", ["ns/web"])
    index.wait("ns/req-b", "ns/pod-2", ["ns/web", "ns/api"])
    index.wait("ns/req-c", "ns/pod-3", ["ns/api"])

    assert index.waiting_on_service("ns/web") == {"ns/req-a", "ns/req-b"}
    assert index.waiting_on_service("ns/api") == {"ns/req-b", "ns/req-c"}
    assert index.waiting_on_service("other/web") == set()


def test_pod_label_change_wakes_that_pods_requests() -> None:
    index = WaitingIndex()
    index.wait("ns/req-a", "ns/pod-1", ["ns/web"])
    index.wait("ns/req-b", "ns/pod-1", ["ns/api"])
    index.wait("ns/req-c", "ns/pod-2", ["ns/api"])

    assert index.waiting_on_pod("ns/pod-1") == {"ns/req-a", "ns/req-b"}
    assert index.waiting_on_pod("ns/pod-9") == set()


def test_waiting_again_replaces_the_previous_entries() -> None:
    index = WaitingIndex()
    index.wait("ns/req-a", "ns/pod-1", ["ns/web", "ns/api"])
    index.wait("ns/req-a", "ns/pod-1", ["ns/api"])

    assert index.waiting_on_service("ns/web") == set()
    assert index.waiting_on_service("ns/api") == {"ns/req-a"}
    assert index.services_of("ns/req-a") == frozenset({"ns/api"})
    assert index.pending() == 1


def test_forget_leaves_no_entry_behind() -> None:
    index = WaitingIndex()
    index.wait("ns/req-a", "ns/pod-1", ["ns/web", "ns/api"])
    index.wait("ns/req-b", "ns/pod-1", ["ns/web"])

    assert index.forget("ns/req-a") is True
    assert index.forget("ns/req-a") is False
    assert index.waiting_on_service("ns/api") == set()
    assert index.waiting_on_service("ns/web") == {"ns/req-b"}

    index.forget("ns/req-b")
    assert index.sizes() == (0, 0, 0)
    assert not index.is_waiting("ns/req-b")


def test_returned_sets_are_copies() -> None:
    index = WaitingIndex()
    index.wait("ns/req-a", "ns/pod-1", ["ns/web"])
    woken = index.waiting_on_service("ns/web")
    woken.add("ns/intruder")
    index.forget("ns/req-a")
    assert index.waiting_on_service("ns/web") == set()


def test_pending_count_and_oldest_age_follow_the_waiters() -> None:
    clock = FakeClock(1000.0)
    index = WaitingIndex(clock)
    assert index.pending() == 0
    assert index.oldest_since() is None
    assert index.oldest_age() == 0.0

    index.wait("ns/req-a", "ns/pod-1", ["ns/web"], since=900.0)
    clock.now = 1010.0
    index.wait("ns/req-b", "ns/pod-2", ["ns/web"])
    assert index.pending() == 2
    assert index.oldest_since() == 900.0
    assert index.oldest_age() == 110.0

    index.forget("ns/req-a")
    assert index.oldest_since() == 1010.0


def test_re_waiting_keeps_the_original_start_time() -> None:
    clock = FakeClock(1000.0)
    index = WaitingIndex(clock)
    index.wait("ns/req-a", "ns/pod-1", ["ns/web"])
    clock.now = 2000.0
    index.wait("ns/req-a", "ns/pod-1", ["ns/api"], since=1500.0)
    assert index.oldest_since() == 1000.0


def test_a_request_may_wait_on_its_pod_only() -> None:
    index = WaitingIndex()
    index.wait("ns/req-a", "ns/pod-1", [])
    assert index.waiting_on_pod("ns/pod-1") == {"ns/req-a"}
    assert index.sizes() == (1, 0, 1)


def test_concurrent_waits_and_forgets_stay_consistent() -> None:
    index = WaitingIndex()

    def churn(worker: int) -> None:
        for i in range(500):
            key = f"ns/req-{worker}-{i % 20}"
            index.wait(key, f"ns/pod-{i % 7}", [f"ns/svc-{i % 5}", f"ns/svc-{(i + 1) % 5}"])
            if i % 3 == 0:
                index.forget(key)

    threads = [threading.Thread(target=churn, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    waiting = {f"ns/req-{w}-{j}" for w in range(8) for j in range(20)}
    waiting = {key for key in waiting if index.is_waiting(key)}
    from_services = set().union(*(index.waiting_on_service(f"ns/svc-{s}") for s in range(5)))
    from_pods = set().union(*(index.waiting_on_pod(f"ns/pod-{p}") for p in range(7)))
    assert from_services == waiting
    assert from_pods == waiting
    assert index.pending() == len(waiting)
    for key in list(waiting):
        index.forget(key)
    assert index.sizes() == (0, 0, 0)


def test_a_request_waiting_on_signing_material_is_handed_back_once_when_it_changes() -> None:
    index = WaitingIndex()
    index.wait_for_material("ns/a")
    index.wait_for_material("ns/b")
    index.forget("ns/b")

    assert index.material_changed() == ["ns/a"]
    assert index.material_changed() == []


def test_forgetting_a_request_ends_its_pods_wait_unless_it_was_deleted() -> None:
    now = [1000.0]
    index = WaitingIndex(clock=lambda: now[0])
    index.wait("ns/answered", "ns/p1", ["ns/web"], since=900.0, pod_uid="u1", namespace="ns")
    index.wait("ns/deleted", "ns/p2", ["ns/web"], since=950.0, pod_uid="u2", namespace="ns")
    assert index.pod_waits.oldest_by_namespace() == {"ns": 100.0}

    index.forget("ns/answered")
    index.forget("ns/deleted", gone=True)

    assert index.sizes() == (0, 0, 0)
    # The answered Pod's wait ended; the deleted request's Pod still waits for kubelet's
    # next request.
    assert index.pod_waits.oldest_by_namespace() == {"ns": 50.0}
    index.pod_deleted("u2")
    assert index.pod_waits.oldest_by_namespace() == {}
