"""A managed-CA rotation through the real kubelet (hollow nodes): a server Pod with a
projected certificate and a client Pod trusting the `clusterTrustBundle` projection
complete TLS handshakes before, during and after `ca rotate` — 0 failed — on the files the
kubelet wrote; Pods started after the swap (certificates from the new CA) are trusted by
the client at once, because the swap waited for the projection to be refreshed; the old
root leaves the projected bundle at retire.

The propagation delay here is 30 s: the hollow kubelet's `syncFrequency` is 10 s (kubemark
`hollow_kubelet.go`; a real kubelet's is 1 m, hence the 10 m default)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from controlplane.cluster import Cluster
from controlplane.workload import CHAIN_FILE, VolumeFiles
from kube.client import Client
from managedca.material import pem_fingerprints
from tests.integration.managed_ca_harness import (
    Prober,
    ca_cli,
    move_retire_time_to_the_past,
    phase,
    roots,
)
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import create_service, running_files, serving_pod
from tests.integration.signer_harness import unique_signer_name

SIGNER = unique_signer_name()
SECRET = f"ca-{uuid.uuid4().hex[:8]}"
SECRET_PATH = f"/api/v1/namespaces/kube-system/secrets/{SECRET}"


@pytest.fixture(scope="module")
def managed_signer(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    tmp = tmp_path_factory.mktemp("managed-signer")
    proc = SignerProcess(
        cluster.plane.kubeconfig,
        None,
        tmp / "signer.log",
        "--ca-mode=managed",
        f"--managed-ca-secret-name={SECRET}",
        "--leader-elect-resource-namespace=kube-system",
        f"--leader-elect-resource-name=sss-{SECRET}",
        "--managed-ca-propagation-delay=30s",
        "--managed-ca-allow-short-propagation-delay",
        "--max-certificate-lifetime=1h",
        "--managed-ca-retire-margin=5m",
        signer_name=SIGNER,
    )
    try:
        client = cluster.plane.client()
        assert eventually(lambda: _phase(client) == "Stable", 60), proc.log_lines()[-20:]
        yield
    finally:
        proc.stop()


def _phase(client: Client) -> str | None:
    return phase(client, SECRET_PATH)


@pytest.mark.usefixtures("managed_signer")
def test_handshakes_never_fail_through_a_managed_rotation(
    cluster: Cluster, cluster_client: Client, node_namespace: str
) -> None:
    client, ns = cluster_client, node_namespace
    create_service(client, ns, "web", {"app": "web"})
    for name in ("web-old", "client"):
        serving_pod(cluster, client, ns, name, app="web", signer_name=SIGNER)
    _, old_server = running_files(cluster, client, ns, "web-old")
    _, trusting = running_files(cluster, client, ns, "client")
    old_root = set(pem_fingerprints(_current_cert(client)))
    assert roots(trusting) == old_root

    with Prober(trusting, f"web.{ns}.svc") as prober:
        prober.servers["web-old"] = old_server
        time.sleep(3)
        rotated = ca_cli(
            cluster.plane.kubeconfig,
            "rotate",
            "--signer-namespace=kube-system",
            f"--secret-name={SECRET}",
        )
        assert rotated.returncode == 0, rotated.stderr
        staged_at = time.monotonic()
        assert eventually(lambda: len(roots(trusting)) == 2, 60), "old + new projected"
        print(f"kubelet projected old + new {time.monotonic() - staged_at:.0f}s after staging")
        assert eventually(lambda: _phase(client) == "Retiring", 90)
        new_root = roots(trusting) - old_root

        # A Pod started after the swap gets a certificate from the new CA, and the client,
        # whose projection the swap waited for, trusts it at once.
        serving_pod(cluster, client, ns, "web-new", app="web", signer_name=SIGNER)
        _, new_server = running_files(cluster, client, ns, "web-new")
        assert _issued_by_root(new_server, client) == new_root
        prober.servers["web-new"] = new_server
        time.sleep(5)

        # Retire is due 1h05m after the swap; move the persisted time into the past. That
        # also ends the old leaf's trust early (a real retire waits until it has expired),
        # so web-old leaves the probe first.
        del prober.servers["web-old"]
        move_retire_time_to_the_past(client, SECRET_PATH)
        assert eventually(lambda: _phase(client) == "Stable", 30)
        assert eventually(lambda: roots(trusting) == new_root, 60), "old root unprojected"
        time.sleep(3)

    assert prober.failed == [], prober.failed[:5]
    assert prober.ok > 20
    print(f"handshakes: {prober.ok} ok, 0 failed")


def _current_cert(client: Client) -> bytes:
    import base64

    return base64.b64decode(client.get(SECRET_PATH)["data"]["ca.crt"])


def _issued_by_root(server: VolumeFiles, client: Client) -> set[str]:
    """The root (by fingerprint) among the Secret's CAs that signed the server's leaf."""
    from cryptography import x509

    leaf = x509.load_pem_x509_certificates(server.read(CHAIN_FILE))[0]
    ca = x509.load_pem_x509_certificate(_current_cert(client))
    leaf.verify_directly_issued_by(ca)
    return set(pem_fingerprints(_current_cert(client)))
