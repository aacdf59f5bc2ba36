"""Commands besides `run` against a real API server: `bundle resolve` with KEP-6283
selector semantics, and the demo end to end (`make demo`: python -m controlplane.demo)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from controlplane import ControlPlane
from kube.client import Client
from trust.bundle import normalize_bundle
from trust.ca import cert_pem, generate_ca

CTBS = "/apis/certificates.k8s.io/v1/clustertrustbundles"


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def bundles(client: Client) -> Iterator[tuple[str, dict[str, str]]]:
    """Three bundles of a fresh signer: two labelled `rotation`, one not."""
    signer = f"t{uuid.uuid4().hex[:8]}.example.com/serving"
    prefix = signer.replace("/", ":")
    pems = {}
    created = []
    for suffix, labels in (("a", {"rotation": "current"}), ("b", {"rotation": "next"}), ("c", {})):
        pem = cert_pem(generate_ca(f"anchor {suffix}").cert).decode()
        pems[suffix] = pem
        name = f"{prefix}:{suffix}"
        client.create(
            CTBS,
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "ClusterTrustBundle",
                "metadata": {"name": name, "labels": labels},
                "spec": {"signerName": signer, "trustBundle": pem},
            },
        )
        created.append(name)
    try:
        yield signer, pems
    finally:
        for name in created:
            client.delete(f"{CTBS}/{name}")


def subjects(pem: str) -> set[str]:
    return {c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(pem.encode())}


def test_bundle_resolve_follows_kep_selector_semantics(
    control_plane: ControlPlane, bundles: tuple[str, dict[str, str]]
) -> None:
    signer, pems = bundles
    kubeconfig = f"--kubeconfig={control_plane.kubeconfig}"

    everything = cli("bundle", "resolve", kubeconfig, f"--signer-name={signer}", "--selector=")
    assert everything.returncode == 0, everything.stderr
    assert everything.stdout == normalize_bundle("".join(pems.values()))
    assert subjects(everything.stdout) == {"CN=anchor a", "CN=anchor b", "CN=anchor c"}

    labelled = cli("bundle", "resolve", kubeconfig, f"--signer-name={signer}", "-l", "rotation")
    assert subjects(labelled.stdout) == {"CN=anchor a", "CN=anchor b"}
    nxt = cli("bundle", "resolve", kubeconfig, f"--signer-name={signer}", "-l", "rotation=next")
    assert subjects(nxt.stdout) == {"CN=anchor b"}
    by_name = cli("bundle", "resolve", kubeconfig, f"--name={signer.replace('/', ':')}:c")
    assert subjects(by_name.stdout) == {"CN=anchor c"}

    # A nil selector matches nothing (KEP-6283): one clear line, status 1.
    nothing = cli("bundle", "resolve", kubeconfig, f"--signer-name={signer}")
    assert nothing.returncode == 1
    assert nothing.stderr.count("\n") == 1
    assert "matched zero ClusterTrustBundles" in nothing.stderr


def test_demo_proves_issuance_and_tls_through_the_kubelet_then_exits_zero(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controlplane.demo", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "DNS SANs     : web.demo.svc.cluster.local, web.demo.svc" in out
    assert "chain verifies against the kubelet-projected ca.pem" in out
    assert "web.demo.svc.cluster.local: verified (TLSv1.3" in out
    assert "web.other.svc.cluster.local: refused as expected" in out
    assert "Event Warning ServiceNotFound" in out
    assert "Pod late-0 Running" in out
    assert 'service_serving_ca_controller_requests_total{result="issued"} 2.0' in out
    assert "signer exited with status 0" in out
