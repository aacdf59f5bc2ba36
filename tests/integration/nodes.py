"""Helpers for tests through the real kubelet: a signer process for the cluster, Pods with
a `podCertificate` volume on hollow nodes, and checks on the files the kubelet wrote.

A test's signer runs as the real CLI (`service-serving-signer run`: signer and publisher,
with leader election) under a signer name unique to the test module, so the hollow
kubelets project *its* ClusterTrustBundle and no other test's signer answers its
requests.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.verification import PolicyBuilder, Store

from controlplane.cluster import Cluster
from controlplane.workload import VolumeFiles, cert_pod, volume_files, wait_running
from kube.client import Client
from kube.types import JSON
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.signer_harness import unique_signer_name
from trust.ca import write_ca

__all__ = ["unique_signer_name"]

DOMAIN = "cluster.local"


@contextmanager
def cluster_signer(cluster: Cluster, name: str) -> Iterator[SignerProcess]:
    """`service-serving-signer run` for signer `name` (see `unique_signer_name`) against
    the cluster with a fresh CA, leading, its ClusterTrustBundle published; stopped
    (SIGTERM) afterwards."""
    with tempfile.TemporaryDirectory(prefix="node-signer-") as tmp:
        ca_dir = Path(tmp) / "ca"
        write_ca(ca_dir)
        lease = "sss-" + name.split(".", 1)[0]
        proc = SignerProcess(
            cluster.plane.kubeconfig,
            ca_dir,
            Path(tmp) / "signer.log",
            f"--leader-elect-resource-name={lease}",
            "--leader-elect-resource-namespace=kube-system",
            signer_name=name,
        )
        try:
            assert eventually(proc.leading, 60), "\n".join(proc.log_lines()[-20:])
            client = cluster.plane.client()
            assert eventually(lambda: bool(bundles(client, name)), 30), "no ClusterTrustBundle"
            yield proc
        finally:
            proc.stop()


def bundles(client: Client, signer_name: str) -> list[JSON]:
    listed = client.get(
        "/apis/certificates.k8s.io/v1/clustertrustbundles",
        {"fieldSelector": f"spec.signerName={signer_name}"},
    )
    return list(listed.get("items") or [])


def create_pod(client: Client, namespace: str, name: str, **kwargs: Any) -> JSON:
    body = cert_pod(name, namespace, **kwargs)
    pod: JSON = client.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return pod


def serving_pod(
    cluster: Cluster,
    client: Client,
    namespace: str,
    name: str,
    *,
    app: str,
    signer_name: str,
    services: str | None = None,
    node_index: int = 0,
    **kwargs: Any,
) -> JSON:
    """The usual test Pod: on hollow node `node_index` (the first), labelled `app=<app>`,
    its projection naming `services` (default: the Service called like the app) for
    `signer_name`."""
    annotations = {"kubernetes.io/service-names": app if services is None else services}
    return create_pod(
        client,
        namespace,
        name,
        node=cluster.nodes[node_index].name,
        labels={"app": app},
        signer_name=signer_name,
        annotations=annotations,
        **kwargs,
    )


def signer_fixture(name: str) -> Callable[[Cluster], Iterator[SignerProcess]]:
    """A module-scoped `signer` fixture: `cluster_signer(cluster, name)` for the module's
    tests (`signer = signer_fixture(SIGNER)` at module level)."""

    @pytest.fixture(scope="module")
    def signer(cluster: Cluster) -> Iterator[SignerProcess]:
        with cluster_signer(cluster, name) as proc:
            yield proc

    return signer


def condition_of_type(pcr: JSON, kind: str) -> JSON | None:
    """The request's condition of type `kind` (e.g. "Denied"), or None."""
    for c in (pcr.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def create_service(
    client: Client, namespace: str, name: str, selector: dict[str, str], *, headless: bool = False
) -> JSON:
    spec: JSON = {"selector": selector, "ports": [{"name": "https", "port": 443}]}
    if headless:
        spec["clusterIP"] = "None"
    svc: JSON = client.create(
        f"/api/v1/namespaces/{namespace}/services",
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec},
    )
    return svc


def running_files(
    cluster: Cluster, client: Client, namespace: str, name: str, timeout: float = 180
) -> tuple[JSON, VolumeFiles]:
    """Wait for the Pod to be Running, return it and what the kubelet wrote for it."""
    pod = wait_running(client, namespace, name, timeout)
    return pod, volume_files(cluster.node_of(pod), pod)


def chain_of(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def dns_sans(cert: x509.Certificate) -> list[str]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert not ext.get_values_for_type(x509.IPAddress), "no IP SANs"
    return list(ext.get_values_for_type(x509.DNSName))


def verify_against_bundle(chain_pem: bytes, bundle_pem: bytes, names: list[str]) -> None:
    """Verify the chain as a TLS server certificate for each name, trusting only the
    anchors in `bundle_pem` (cryptography's RFC 5280 / CABF verifier)."""
    chain = chain_of(chain_pem)
    store = Store(x509.load_pem_x509_certificates(bundle_pem))
    for name in names:
        verifier = PolicyBuilder().store(store).build_server_verifier(x509.DNSName(name))
        verifier.verify(chain[0], chain[1:])


def key_matches(key_pem: bytes, cert: x509.Certificate) -> bool:
    key = serialization.load_pem_private_key(key_pem, password=None)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    return bool(
        key.public_key().public_bytes(der, spki) == cert.public_key().public_bytes(der, spki)
    )


def service_sans(service: str, namespace: str) -> list[str]:
    return [f"{service}.{namespace}.svc.{DOMAIN}", f"{service}.{namespace}.svc"]


def pcrs_of(client: Client, namespace: str, pod_name: str) -> list[JSON]:
    listed = client.get(
        f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests"
    )
    return [p for p in listed.get("items") or [] if p["spec"]["podName"] == pod_name]


def stays_not_running(client: Client, namespace: str, name: str, seconds: float) -> bool:
    """True if the Pod is not Running at any poll during `seconds` (a bounded watch)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pod = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if (pod.get("status") or {}).get("phase") == "Running":
            return False
        time.sleep(0.5)
    return True


def signer_events(client: Client, namespace: str, pod_name: str) -> list[JSON]:
    """events.k8s.io Events the signer wrote about the Pod."""
    items = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [
        e
        for e in items
        if e.get("reportingController") == "service-serving-signer"
        and (e.get("regarding") or {}).get("kind") == "Pod"
        and (e.get("regarding") or {}).get("name") == pod_name
    ]
