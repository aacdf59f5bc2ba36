"""`make soak`: one managed-CA rotation in real time — stage → swap → retire with 1-hour
leaves, nothing moved by hand — through the real (hollow) kubelet, with TLS handshakes
every 2 s from a client Pod's `clusterTrustBundle` projection to a server Pod's projected
certificate: 0 failed. The server Pod keeps running across the rotation: the kubelet
refreshes its certificate (from the new CA after the swap) before the old root is retired
at swap + 1 h + 5 min, and the old root then leaves the client's projection.

About 75 minutes."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from cryptography import x509

from controlplane.cluster import Cluster
from controlplane.workload import CHAIN_FILE
from kube.client import Client
from tests.integration.managed_ca_harness import Prober, ca_cli, phase, roots
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import create_service, running_files, serving_pod
from tests.integration.signer_harness import unique_signer_name

pytestmark = pytest.mark.integration

SIGNER = unique_signer_name()
SECRET = f"soak-ca-{uuid.uuid4().hex[:8]}"
SECRET_PATH = f"/api/v1/namespaces/kube-system/secrets/{SECRET}"


@pytest.mark.timeout(100 * 60)
def test_a_real_time_managed_rotation_fails_no_handshake(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    client, ns = cluster_client, node_namespace
    signer = SignerProcess(
        cluster.plane.kubeconfig,
        None,
        tmp_path / "signer.log",
        "--ca-mode=managed",
        f"--managed-ca-secret-name={SECRET}",
        "--leader-elect-resource-namespace=kube-system",
        f"--leader-elect-resource-name=sss-{SECRET}",
        "--managed-ca-propagation-delay=30s",  # hollow kubelet syncFrequency: 10 s
        "--max-certificate-lifetime=1h",
        "--managed-ca-retire-margin=5m",
        signer_name=SIGNER,
    )
    try:
        assert eventually(lambda: phase(client, SECRET_PATH) == "Stable", 60)
        create_service(client, ns, "web", {"app": "web"})
        for name in ("web-0", "client"):
            serving_pod(cluster, client, ns, name, app="web", signer_name=SIGNER)
        _, server = running_files(cluster, client, ns, "web-0")
        _, trusting = running_files(cluster, client, ns, "client")
        old_root = roots(trusting)

        with Prober(trusting, f"web.{ns}.svc", period=2.0) as prober:
            prober.servers["web-0"] = server
            started = time.monotonic()
            rotated = ca_cli(
                cluster.plane.kubeconfig,
                "rotate",
                "--namespace=kube-system",
                f"--secret-name={SECRET}",
            )
            assert rotated.returncode == 0, rotated.stderr
            assert eventually(lambda: phase(client, SECRET_PATH) == "Retiring", 120)
            swapped = time.monotonic()
            new_root = roots(trusting) - old_root
            assert len(new_root) == 1
            # Retire is due at swap + 1h + 5m, on the persisted time alone.
            assert eventually(
                lambda: phase(client, SECRET_PATH) == "Stable", 80 * 60, interval=10
            ), signer.log_lines()[-20:]
            retired = time.monotonic()
            assert eventually(lambda: roots(trusting) == new_root, 120, interval=2)
            time.sleep(10)

        leaf = x509.load_pem_x509_certificates(server.read(CHAIN_FILE))[0]
        print(
            f"managed soak: stage→swap {swapped - started:.0f}s, swap→retire "
            f"{retired - swapped:.0f}s; handshakes {prober.ok} ok, {len(prober.failed)} failed; "
            f"web-0's leaf now {leaf.issuer.rfc4514_string()}"
        )
        assert prober.failed == [], prober.failed[:5]
        assert prober.ok > 1000
    finally:
        signer.stop()
