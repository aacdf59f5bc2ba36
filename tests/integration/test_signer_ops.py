"""Operating the signer against the real API server: a signing cert about to expire,
hot rotation, two replicas racing, and the exact `requests_total` counts a scenario
leaves behind."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kube.client import Client
from tests.integration.signer_harness import (
    RunningSigner,
    condition,
    events_for,
    eventually,
    expiring_ca,
    read_pcr,
    unique_signer_name,
    wait_terminal,
)
from trust.ca import write_ca


def test_expiring_signing_cert_issues_nothing_until_rotated(
    client: Client, namespace: str, tmp_path: Path
) -> None:
    files = write_ca(tmp_path / "ca", ca=expiring_ca(minutes=30))
    with RunningSigner(client, files=files) as signer:
        kubelet = signer.kubelet
        created, _ = kubelet.serving_request(namespace)

        [event] = eventually(
            lambda: events_for(client, namespace, reason="SignerCertificateExpiring"),
            what="SignerCertificateExpiring event",
        )
        assert event["type"] == "Warning" and event["regarding"]["name"] == "web-0"
        assert signer.errors() >= 1
        assert signer.count("issued") == 0
        assert read_pcr(client, created).get("status", {}).get("conditions") is None
        not_after = signer.material.current().signing_cert.not_valid_after_utc.timestamp()
        assert (
            signer.registry.get_sample_value("service_serving_ca_controller_signer_ttl_seconds")
            == not_after
        )

        # Rotate: a fresh CA is written over the same files; the source reloads it.
        write_ca(tmp_path / "ca", overwrite=True)
        stored = wait_terminal(client, created, timeout=15)

        assert condition(stored)["type"] == "Issued"
        issued, failed, _ = signer.counts()
        assert (issued, failed) == (1, 0)


def test_two_replicas_racing_issue_each_request_exactly_once(
    client: Client, namespace: str, tmp_path: Path
) -> None:
    signer_name = unique_signer_name()
    files = write_ca(tmp_path / "ca")
    first = RunningSigner(client, signer_name=signer_name, files=files, identity="a")
    second = RunningSigner(client, signer_name=signer_name, files=files, identity="b")
    kubelet = first.kubelet
    count = 30
    pods = [kubelet.create_pod(f"web-{i}", namespace, labels={"app": "web"}) for i in range(count)]
    kubelet.create_service("web", namespace, selector={"app": "web"})
    created = [
        kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})[0]
        for pod in pods
    ]

    # Start both at once so they see the same pending requests.
    starters = [threading.Thread(target=s.start) for s in (first, second)]
    try:
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join()
        stored = [wait_terminal(client, pcr, timeout=30) for pcr in created]
        assert all(condition(pcr)["type"] == "Issued" for pcr in stored)
        # counts() waits for each replica's workers to go idle (losers finish their 409s)
        first_issued, first_failed, first_errors = first.counts()
        second_issued, second_failed, second_errors = second.counts()
        assert first_issued + second_issued == count
        assert (first_errors, second_errors) == (0, 0)
        assert first_failed + second_failed == 0
        # Exactly once: the issued counts add up to the number of requests, and a second
        # write would have been rejected (stale resourceVersion or immutable status).
    finally:
        first.close()
        second.close()


def test_metrics_count_exactly_what_a_scenario_did(client: Client, namespace: str) -> None:
    with RunningSigner(client) as signer:
        kubelet = signer.kubelet
        service_names = {"kubernetes.io/service-names": "web"}
        ok = [kubelet.create_pod(f"ok-{i}", namespace, labels={"app": "web"}) for i in range(3)]
        kubelet.create_service("web", namespace, selector={"app": "web"})
        issued = [kubelet.create_pcr(pod, annotations=service_names)[0] for pod in ok]
        bad = kubelet.create_pod("bad-0", namespace, labels={"app": "web"})
        denied = [
            kubelet.create_pcr(bad, annotations={"example.com/x": "1"})[0],
            kubelet.create_pcr(bad, annotations={"kubernetes.io/service-names": "A"})[0],
        ]
        waiting_pod = kubelet.create_pod("lonely-0", namespace, labels={"app": "lonely"})
        waiting, _ = kubelet.create_pcr(
            waiting_pod, annotations={"kubernetes.io/service-names": "lonely"}
        )

        for pcr in issued + denied:
            wait_terminal(client, pcr)
        key = f"{namespace}/{waiting['metadata']['name']}"
        eventually(lambda: signer.controller.index.is_waiting(key), what="waiting")
        time.sleep(0.5)

        assert signer.counts() == (3, 2, 0)
        assert signer.denied("InvalidUnverifiedUserAnnotations") == 2
        assert (
            signer.registry.get_sample_value(
                "service_serving_ca_controller_issuance_duration_seconds_count"
            )
            == 3
        )
        assert (
            signer.registry.get_sample_value("service_serving_ca_controller_pending_requests")
            == 1.0
        )

        kubelet.create_service("lonely", namespace, selector={"app": "lonely"})
        wait_terminal(client, waiting)
        assert signer.counts() == (4, 2, 0)
        assert (
            signer.registry.get_sample_value("service_serving_ca_controller_pending_requests")
            == 0.0
        )
