"""Waiting on Services and re-driving by index (docs/reference.md §5.2 step 6, §5.4),
against the real API server: requests whose Services are missing or do not select the Pod
stay pending with one aggregated Warning Event, and issue within seconds of the event that
fixes them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bench.harness import apiserver_metrics, sum_samples
from controlplane import ControlPlane
from kube.client import Client
from kube.informer import Informer
from kube.types import JSON
from signer.controller import QUEUE_NAME
from tests.integration.signer_harness import (
    RunningSigner,
    condition,
    events_for,
    eventually,
    pod_fqdn_request,
    read_pcr,
    running_signer_fixture,
    wait_terminal,
)

REDRIVE_SECONDS = 5.0


signer = running_signer_fixture()


def wait_until_waiting(signer: RunningSigner, key: str) -> None:
    eventually(lambda: signer.controller.index.is_waiting(key), what=f"{key} waiting")


@pytest.fixture
def plane_signer(plane_client: Client, plane_pcr_version: str) -> Iterator[RunningSigner]:
    with RunningSigner(plane_client, pcr_version=plane_pcr_version) as running:
        yield running


def test_waits_when_service_missing_then_issues_on_create(
    plane_signer: RunningSigner, plane_client: Client, plane_namespace: str, plane_pcr_version: str
) -> None:
    """On every tested kube-apiserver, with the version it serves."""
    signer, client, namespace, version = (
        plane_signer,
        plane_client,
        plane_namespace,
        plane_pcr_version,
    )
    kubelet = signer.kubelet
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(
        pod, annotations={"kubernetes.io/service-names": "web"}, version=version
    )
    key = f"{namespace}/{created['metadata']['name']}"

    wait_until_waiting(signer, key)
    [event] = eventually(
        lambda: events_for(client, namespace, reason="ServiceNotFound"), what="event"
    )
    assert event["type"] == "Warning"
    assert event["regarding"]["kind"] == "Pod" and event["regarding"]["name"] == "web-0"
    assert "'web'" in event["note"] and created["metadata"]["name"] in event["note"]
    assert read_pcr(client, created, version).get("status", {}).get("conditions") is None
    assert signer.counts() == (0, 0, 0)

    started = time.monotonic()
    kubelet.create_service("web", namespace, selector={"app": "web"})
    stored = wait_terminal(client, created, version, timeout=REDRIVE_SECONDS)

    assert condition(stored)["type"] == "Issued"
    assert time.monotonic() - started < REDRIVE_SECONDS
    # A test sees the status write before the worker that made it forgets the request
    # (as `counts()` knows): let the sync finish.
    eventually(signer.controller.queue.idle, what="idle workers")
    assert signer.controller.index.sizes() == (0, 0, 0)
    assert signer.counts() == (1, 0, 0)


def test_repeated_waits_aggregate_into_one_event(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    created = request_for_web_0(signer, namespace, "web")
    wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")
    eventually(lambda: events_for(client, namespace, reason="ServiceNotFound"), what="event")

    # Re-drive the same request several times (the PCR update handler enqueues it).
    for i in range(3):
        client.patch(
            f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests/"
            f"{created['metadata']['name']}",
            {"metadata": {"labels": {"poke": str(i)}}},
        )
    time.sleep(2)

    events = events_for(client, namespace, reason="ServiceNotFound")
    assert len(events) == 1
    assert events[0].get("series", {}).get("count", 1) >= 2


def request_for_web_0(signer: RunningSigner, namespace: str, service_names: str) -> JSON:
    """Pod web-0 (app=web) and a request for it naming `service_names`, as created."""
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = signer.kubelet.create_pcr(
        pod, annotations={"kubernetes.io/service-names": service_names}
    )
    return created


def waiting_on_a_selector(signer: RunningSigner, namespace: str, selector: dict[str, str]) -> JSON:
    """Pod web-0 (app=web), Service web with `selector` (which does not select it) and a
    request naming the Service, once the signer has it waiting; the request as created."""
    signer.kubelet.create_service("web", namespace, selector=selector)
    created = request_for_web_0(signer, namespace, "web")
    wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")
    return created


def patch_then_issued(client: Client, created: JSON, path: str, labels: dict[str, str]) -> None:
    """Patch `labels` into the Service's selector or the Pod's labels (`path` says which);
    the waiting request is then Issued within the redrive time."""
    if "/services/" in path:
        client.patch(path, {"spec": {"selector": labels}})
    else:
        client.patch(path, {"metadata": {"labels": labels}})
    assert condition(wait_terminal(client, created, timeout=REDRIVE_SECONDS))["type"] == "Issued"


def test_selector_mismatch_waits_then_issues_when_the_selector_is_fixed(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    created = waiting_on_a_selector(signer, namespace, {"app": "other"})
    eventually(
        lambda: events_for(client, namespace, reason="ServiceSelectorMismatch"), what="event"
    )

    patch_then_issued(
        client, created, f"/api/v1/namespaces/{namespace}/services/web", {"app": "web"}
    )


def test_selector_mismatch_waits_then_issues_when_the_pod_labels_change(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    created = waiting_on_a_selector(signer, namespace, {"app": "web", "tier": "front"})

    patch_then_issued(
        client, created, f"/api/v1/namespaces/{namespace}/pods/web-0", {"tier": "front"}
    )


def test_cluster_ip_subdomain_service_waits_as_not_headless(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    created = pod_fqdn_request(signer, namespace, headless=False)

    wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")
    [event] = eventually(
        lambda: events_for(client, namespace, reason="ServiceNotHeadless"), what="event"
    )
    assert "'db'" in event["note"]
    assert read_pcr(client, created).get("status", {}).get("conditions") is None


def test_deleted_waiting_request_leaves_no_index_entry(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    created = request_for_web_0(signer, namespace, "web,api")
    key = f"{namespace}/{created['metadata']['name']}"
    wait_until_waiting(signer, key)
    assert signer.controller.index.services_of(key) == {f"{namespace}/web", f"{namespace}/api"}

    client.delete(
        f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests/"
        f"{created['metadata']['name']}"
    )

    eventually(
        lambda: signer.controller.index.sizes() == (0, 0, 0), what="index empty after delete"
    )
    assert signer.registry.get_sample_value("service_serving_ca_controller_pending_requests") == 0.0


def test_a_pods_wait_goes_on_when_its_waiting_request_is_replaced(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    """What kube-controller-manager's cleaner and kubelet do to a stuck Pod —
    delete its waiting request, then make a new one for the same Pod. The Pod's wait
    (`pod_waiting_seconds{namespace}`, the pending alert's metric) does not start again;
    once the Service appears and the new request is issued, the namespace's series goes."""
    created = request_for_web_0(signer, namespace, "web")
    wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")

    def waited() -> float | None:
        return signer.registry.get_sample_value(
            "service_serving_ca_controller_pod_waiting_seconds", {"namespace": namespace}
        )

    time.sleep(4)
    before = waited()
    assert before is not None and before >= 3
    client.delete(
        f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests/"
        f"{created['metadata']['name']}"
    )
    eventually(lambda: signer.controller.index.sizes() == (0, 0, 0), what="first forgotten")
    pod = client.get(f"/api/v1/namespaces/{namespace}/pods/web-0")
    second, _ = signer.kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
    wait_until_waiting(signer, f"{namespace}/{second['metadata']['name']}")
    oldest = signer.registry.get_sample_value(
        "service_serving_ca_controller_oldest_pending_seconds"
    )
    now = waited()
    assert now is not None and now >= before, "the Pod's wait went on across the new request"
    # The request's own age restarted: it is younger by at least the 4 s slept (less the
    # creationTimestamp's one-second resolution).
    assert oldest is not None and oldest <= now - 2

    signer.kubelet.create_service("web", namespace, selector={"app": "web"})
    assert condition(wait_terminal(client, second, timeout=REDRIVE_SECONDS))["type"] == "Issued"
    eventually(lambda: waited() is None, what="no series once the Pod is answered")


def queue_adds(signer: RunningSigner) -> float:
    value = signer.registry.get_sample_value("workqueue_adds_total", {"name": QUEUE_NAME})
    return float(value or 0.0)


def event_writes(plane: ControlPlane) -> float:
    """Event creates and patches the API server itself counted (all clients)."""
    return sum_samples(
        apiserver_metrics(plane),
        "apiserver_request_total",
        lambda labels: (
            labels.get("resource") == "events" and labels.get("verb") in ("POST", "PATCH", "CREATE")
        ),
    )


def settle(signer: RunningSigner, adds: float) -> None:
    """Wait until the queue has seen `adds` adds and every sync has finished."""
    eventually(lambda: queue_adds(signer) >= adds, what=f"{adds} queue adds")
    eventually(signer.controller.queue.idle, what="idle workers")


def test_annotation_only_service_updates_do_not_re_drive_and_repeats_write_no_events(
    signer: RunningSigner, client: Client, namespace: str, control_plane: ControlPlane
) -> None:
    kubelet = signer.kubelet
    kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    pod = client.get(f"/api/v1/namespaces/{namespace}/pods/web-0")
    kubelet.create_service("web", namespace, selector={"app": "other"})
    created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
    wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")
    eventually(
        lambda: events_for(client, namespace, reason="ServiceSelectorMismatch"), what="event"
    )
    eventually(signer.controller.queue.idle, what="idle workers")
    assert signer.recorder.flush()

    # 20 annotation-only PATCHes of the Service: nothing a decision reads changes.
    adds = queue_adds(signer)
    last_rv = ""
    for i in range(20):
        patched = client.patch(
            f"/api/v1/namespaces/{namespace}/services/web",
            {"metadata": {"annotations": {"example.com/poke": str(i)}}},
        )
        last_rv = patched["metadata"]["resourceVersion"]
    informer = signer.caches.services
    assert isinstance(informer, Informer)
    eventually(
        lambda: int(informer.resource_version or 0) >= int(last_rv), what="informer caught up"
    )
    assert queue_adds(signer) == adds

    # 20 real re-drives (the Pod's labels change, still not matching) repeat the same
    # Warning: the API server sees at most one more Event write, not 20.
    writes = event_writes(control_plane)
    for i in range(20):
        client.patch(
            f"/api/v1/namespaces/{namespace}/pods/web-0",
            {"metadata": {"labels": {"poke": str(i)}}},
        )
        settle(signer, adds + i + 1)
    assert signer.recorder.flush()
    assert event_writes(control_plane) - writes <= 1
    [event] = events_for(client, namespace, reason="ServiceSelectorMismatch")
    assert event["series"]["count"] == 2  # later repeats are counted in memory
    assert read_pcr(client, created).get("status", {}).get("conditions") is None


def test_statefulset_pod_naming_its_subdomain_service_twice_issues_when_it_is_created(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    kubelet = signer.kubelet
    pod = kubelet.create_pod(
        "db-0", namespace, labels={"app": "db"}, hostname="db-0", subdomain="db"
    )
    created, _ = kubelet.create_pcr(
        pod,
        annotations={"kubernetes.io/service-names": "db", "kubernetes.io/add-pod-fqdn": "true"},
    )
    wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")

    kubelet.create_service("db", namespace, selector={"app": "db"}, headless=True)

    stored = wait_terminal(client, created, timeout=REDRIVE_SECONDS * 3)
    assert condition(stored)["type"] == "Issued"
    assert "db-0.db." in condition(stored)["message"]
    eventually(signer.controller.queue.idle, what="idle workers")
    assert signer.controller.index.sizes() == (0, 0, 0)


def test_waiting_request_is_issued_by_the_periodic_resync_when_its_wake_up_is_missed(
    client: Client, namespace: str
) -> None:
    with RunningSigner(client, waiting_resync_period=2.0) as signer:
        # A wake-up lost to a bug or a missed event: the Service event finds nobody.
        signer.controller.index.waiting_on_service = lambda service_key: set()  # type: ignore[method-assign]
        kubelet = signer.kubelet
        pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
        created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
        wait_until_waiting(signer, f"{namespace}/{created['metadata']['name']}")

        kubelet.create_service("web", namespace, selector={"app": "web"})

        assert condition(wait_terminal(client, created, timeout=30))["type"] == "Issued"
        resyncs = signer.registry.get_sample_value(
            "service_serving_ca_controller_waiting_resyncs_total"
        )
        assert resyncs is not None and resyncs >= 1


def test_pending_gauge_returns_to_zero_after_300_create_delete_pairs_from_4_threads(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    """The PCR cleaner deletes exactly the waiting requests; a delete that lands while the
    request's sync is deciding must not leave an index entry behind."""
    import threading

    from controlplane.kubelet import pcr_path

    kubelet = signer.kubelet
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    errors: list[BaseException] = []

    def pairs(worker: int) -> None:
        try:
            for _ in range(75):
                created, _ = kubelet.create_pcr(
                    pod, annotations={"kubernetes.io/service-names": f"missing-{worker}"}
                )
                client.delete(pcr_path(namespace, name=created["metadata"]["name"]))
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=pairs, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors

    def settled() -> bool:
        gauge = signer.registry.get_sample_value("service_serving_ca_controller_pending_requests")
        return gauge == 0.0 and signer.controller.queue.idle()

    eventually(settled, timeout=60, what="pending gauge back to 0")
    assert signer.controller.index.sizes() == (0, 0, 0)
    oldest = signer.registry.get_sample_value(
        "service_serving_ca_controller_oldest_pending_seconds"
    )
    assert oldest == 0.0
