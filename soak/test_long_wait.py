"""The long wait, for real (`make soak`): a Pod names a Service
that appears only after 16 minutes. kube-controller-manager's PodCertificateRequest
cleaner deletes the kubelet's first request 15-20 minutes after its creation (it polls
every 5 minutes); the kubelet, finding it gone past its 10(+5)-minute abandon threshold,
creates a new one; when the Service appears the signer issues that one and the Pod runs.
The signer's waiting index drops the deleted request."""

from __future__ import annotations

import time
from typing import Any

import pytest

from controlplane.cluster import Cluster
from kube.client import Client
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import (
    chain_of,
    create_service,
    dns_sans,
    pcrs_of,
    running_files,
    service_sans,
    serving_pod,
    signer_events,
    signer_fixture,
    unique_signer_name,
    verify_against_bundle,
)

SIGNER = unique_signer_name()
SERVICE_AFTER = 16 * 60


signer = signer_fixture(SIGNER)


def pending(signer: SignerProcess) -> float | None:
    return signer.metric("service_serving_ca_controller_pending_requests")


@pytest.mark.timeout(40 * 60)
def test_service_created_16_minutes_later_issues_the_kubelets_recreated_request(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    ns = node_namespace
    started = time.monotonic()
    serving_pod(cluster, cluster_client, ns, "slow-0", app="slow", signer_name=SIGNER)
    assert eventually(lambda: bool(pcrs_of(cluster_client, ns, "slow-0")), 120)
    [first] = pcrs_of(cluster_client, ns, "slow-0")
    assert eventually(lambda: pending(signer) == 1.0, 60)
    log: list[str] = [
        f"{time.monotonic() - started:6.0f}s first request {first['metadata']['name']}"
    ]

    def recreated() -> list[dict[str, Any]]:
        current = pcrs_of(cluster_client, ns, "slow-0")
        names = {p["metadata"]["name"] for p in current}
        return current if current and first["metadata"]["name"] not in names else []

    assert eventually(lambda: bool(recreated()), 24 * 60, interval=5), log
    [second] = recreated()
    made = second["metadata"]["name"]
    log.append(f"{time.monotonic() - started:6.0f}s cleaner deleted it; kubelet made {made}")
    pod = cluster_client.get(f"/api/v1/namespaces/{ns}/pods/slow-0")
    assert pod["status"].get("phase") != "Running"
    assert eventually(lambda: pending(signer) == 1.0, 60), "index holds exactly the live request"

    time.sleep(max(0.0, SERVICE_AFTER - (time.monotonic() - started)))
    create_service(cluster_client, ns, "slow", {"app": "slow"})
    log.append(f"{time.monotonic() - started:6.0f}s Service created")

    _, files = running_files(cluster, cluster_client, ns, "slow-0", timeout=300)
    log.append(f"{time.monotonic() - started:6.0f}s Pod Running")
    leaf = chain_of(files.chain)[0]
    assert dns_sans(leaf) == service_sans("slow", ns)
    verify_against_bundle(files.chain, files.bundle, service_sans("slow", ns))
    [issued] = pcrs_of(cluster_client, ns, "slow-0")
    assert issued["metadata"]["name"] == second["metadata"]["name"]
    assert eventually(lambda: pending(signer) == 0.0, 60)
    waits = [
        e for e in signer_events(cluster_client, ns, "slow-0") if e["reason"] == "ServiceNotFound"
    ]
    log.append(f"ServiceNotFound Events: {len(waits)} (one per request)")
    print("\n".join(log))
    assert len(waits) == 2
