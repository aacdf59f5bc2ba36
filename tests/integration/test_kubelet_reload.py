"""The sample workload reloads its certificate (docs/reload.md), with the
files the real kubelet wrote.

The shipped `web` sample (config/samples: the Deployment, its Service and the `tls-server`
ConfigMap) runs on a hollow node: the real kubelet writes its key, chain and trust bundle,
and the sample's server script into the ConfigMap volume. A hollow node runs no
containers, so the test runs that kubelet-written script itself, on the kubelet-written
files, and checks what it serves over TLS, trusting only the kubelet-projected bundle.

The refresh: a real one cannot be forced inside a test's two minutes. kube-apiserver wants
`notBefore` within 5 min of its clock and `beginRefreshAt` ≥ `notBefore` + 10 min; the
kubelet adds up to 5 min of jitter and looks once a minute — the earliest refresh is 5 to
11 minutes away (and the signer asks for one at half-life: 30 min for the shortest, 1 h,
certificate). So the test makes the refresh the kubelet would: a second request for the
same Pod, issued by the signer, written into a copy of the volume the way the kubelet's
atomic writer swaps it (`tests/atomic_volume.py`; the kubelet's own directory would be put
back by its next sync).
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from controlplane.cluster import Cluster
from controlplane.kubelet import Kubelet
from controlplane.server import free_port
from controlplane.workload import VolumeFiles, volume_files, wait_running
from kube.client import Client
from kube.types import JSON
from tests.atomic_volume import atomic_write
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import signer_fixture, unique_signer_name, verify_against_bundle
from tests.integration.signer_harness import wait_terminal
from tests.unit.deploy.kustomize import CONFIG, find, render

SIGNER = unique_signer_name()


signer = signer_fixture(SIGNER)


def shipped_web(
    namespace: str, signer_name: str, max_expiration_seconds: int | None = None
) -> list[JSON]:
    """The sample's web objects, for `signer_name` in `namespace`, one replica."""
    samples = render(CONFIG / "samples")
    objects = [
        find(samples, "ConfigMap", "tls-server"),
        find(samples, "Service", "web"),
        find(samples, "Deployment", "web"),
    ]
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    deployment = objects[2]
    deployment["spec"]["replicas"] = 1
    for volume in deployment["spec"]["template"]["spec"]["volumes"]:
        for source in volume.get("projected", {}).get("sources", []):
            for kind in ("podCertificate", "clusterTrustBundle"):
                if kind in source:
                    source[kind]["signerName"] = signer_name
            if max_expiration_seconds is not None and "podCertificate" in source:
                source["podCertificate"]["maxExpirationSeconds"] = max_expiration_seconds
    return objects


def create(client: Client, obj: JSON) -> None:
    plural = {"ConfigMap": "configmaps", "Service": "services", "Deployment": "deployments"}
    group = "/apis/apps/v1" if obj["kind"] == "Deployment" else "/api/v1"
    ns = obj["metadata"]["namespace"]
    client.create(f"{group}/namespaces/{ns}/{plural[obj['kind']]}", obj)


def running_web_pod(client: Client, namespace: str) -> JSON:
    def named() -> str | None:
        pods = client.get(
            f"/api/v1/namespaces/{namespace}/pods",
            {"labelSelector": "app.kubernetes.io/name=web"},
        )["items"]
        return str(pods[0]["metadata"]["name"]) if pods else None

    assert eventually(lambda: named() is not None, 60), "the Deployment made no Pod"
    name = named()
    assert name is not None
    return wait_running(client, namespace, name, 120)


def served_leaf(port: int, anchors: bytes, hostname: str) -> x509.Certificate:
    """The leaf the server presents to a client that trusts only `anchors` and checks
    `hostname`; the server also answers an HTTP request on that connection."""
    context = ssl.create_default_context(cadata=anchors.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=hostname) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        tls.sendall(f"GET / HTTP/1.0\r\nHost: {hostname}\r\n\r\n".encode())
        assert tls.recv(64).startswith(b"HTTP/1.0 200")
    assert der is not None
    return x509.load_der_x509_certificate(der)


def accepting(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def leaf_of(chain: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificates(chain)[0]


def deploy_web(
    cluster: Cluster, client: Client, namespace: str, signer_name: str, **kwargs: Any
) -> tuple[JSON, VolumeFiles, VolumeFiles]:
    """The shipped web sample, Running: (its Pod, the kubelet-written `tls` volume, the
    kubelet-written `tls-server` ConfigMap volume holding the script)."""
    for obj in shipped_web(namespace, signer_name, **kwargs):
        create(client, obj)
    pod = running_web_pod(client, namespace)
    node = cluster.node_of(pod)
    script = VolumeFiles(node.volume_dir(pod["metadata"]["uid"], "tls-server", "configMap"))
    return pod, volume_files(node, pod), script


@dataclass(frozen=True)
class SampleServer:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def loads(self) -> int:
        """How many key/chain pairs it has loaded (its `loaded …` log lines)."""
        return self.log.read_text().count("loaded ")


@contextmanager
def sample_server(script: VolumeFiles, volume: Path, log: Path) -> Iterator[SampleServer]:
    """The kubelet-written sample script serving `volume`'s tls.crt/tls.key on loopback."""
    port = free_port()
    env = {
        **os.environ,
        "TLS_CERT_FILE": str(volume / "tls.crt"),
        "TLS_KEY_FILE": str(volume / "tls.key"),
        "HOST": "127.0.0.1",
        "PORT": str(port),
    }
    with log.open("wb") as server_log:
        proc = subprocess.Popen(
            [sys.executable, "-u", str(script.directory / "tls_server.py")],
            env=env,
            stderr=server_log,
        )
    try:
        assert eventually(lambda: accepting(port), 30), log.read_text()
        yield SampleServer(proc, port, log)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.timeout(150)
def test_sample_server_serves_the_refreshed_certificate_without_a_restart(
    cluster: Cluster,
    cluster_client: Client,
    signer: SignerProcess,
    node_namespace: str,
    tmp_path: Path,
) -> None:
    ns, hostname = node_namespace, f"web.{node_namespace}.svc"
    pod, tls, script = deploy_web(cluster, cluster_client, ns, SIGNER)
    assert script.text("tls_server.py") == (CONFIG / "samples" / "tls_server.py").read_text()
    assert (tls.directory / "..data").is_symlink()  # the layout atomic_write reproduces
    anchors = tls.read("ca.crt")
    verify_against_bundle(tls.chain, anchors, [hostname])

    volume = tmp_path / "tls"
    atomic_write(volume, {"tls.key": tls.key, "tls.crt": tls.chain})
    with sample_server(script, volume, tmp_path / "server.log") as server:
        first = served_leaf(server.port, anchors, hostname)
        assert first == leaf_of(tls.chain)

        # The refresh: a new key and a new certificate for the same Pod, from the signer.
        refresh, key = Kubelet(cluster_client, SIGNER).create_pcr(
            pod, annotations={"kubernetes.io/service-names": "web"}
        )
        issued = wait_terminal(cluster_client, refresh, timeout=30)
        chain = issued["status"]["certificateChain"].encode()
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        atomic_write(volume, {"tls.key": key_pem, "tls.crt": chain})

        second = served_leaf(server.port, anchors, hostname)
        assert second == leaf_of(chain) != first
        assert server.proc.poll() is None, "served the new certificate without a restart"
        assert server.loads() == 2, server.log.read_text()
