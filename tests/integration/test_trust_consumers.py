"""Trust for consumers that cannot read a ClusterTrustBundle (docs/trust-consumers.md),
through the real kubelet: a server Pod's certificate is the one the hollow kubelet wrote
into its `podCertificate` volume; the injector keeps a labelled ConfigMap's `ca.crt` (and
a PKCS#12 truststore) equal to the signer's ClusterTrustBundle.

* **Gateway API.** The standard-channel CRDs from the `sigs.k8s.io/gateway-api` module
  are installed; a BackendTLSPolicy naming the ConfigMap in `caCertificateRefs` with
  `validation.hostname: <svc>.<ns>.svc` is accepted; a TLS client given exactly that
  `ca.crt` and hostname — what a Gateway data plane does — verifies the server, and
  fails once the signer's anchor is no longer selected.
* **An Ingress controller's proxy** (nginx with `proxy_ssl_verify on`,
  `proxy_ssl_trusted_certificate` the mounted `ca.crt` and `proxy_ssl_name`): stood in
  for by curl, the same OpenSSL verification from a CA file and a name.
* **A JVM** (`java` with `-Djavax.net.ssl.trustStore=` the ConfigMap's truststore)
  verifies the same server, as a Java application configured that way would.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from controlplane import gateway_api
from controlplane.cluster import Cluster
from controlplane.server import free_port
from injector.configmaps import CA_KEY, LABEL, TRUSTSTORE_ANNOTATION
from injector.targets import ANNOTATION
from kube.client import Client
from tests.integration.injector_harness import RunningInjector
from tests.integration.manager_process import SignerProcess
from tests.integration.nodes import (
    bundles,
    cluster_signer,
    create_pod,
    create_service,
    running_files,
    unique_signer_name,
)
from tests.integration.signer_harness import eventually
from tests.integration.webhook_server import WebhookServer
from trust.bundle import bundle_name, normalize_bundle
from trust.ca import generate_ca
from trust.selector import resolve_selector

SIGNER = unique_signer_name()
JAVA_CLIENT = Path(__file__).with_name("java") / "TrustCheck.java"
BTLS_PATH = "/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/backendtlspolicies"


@pytest.fixture(scope="module")
def signer(cluster: Cluster) -> Iterator[SignerProcess]:
    with cluster_signer(cluster, SIGNER) as proc:
        yield proc


@pytest.fixture(scope="module")
def injector(cluster_client: Client) -> Iterator[RunningInjector]:
    with RunningInjector(cluster_client) as running:
        yield running


@pytest.fixture
def server(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> Iterator[WebhookServer]:
    """A TLS server for Service `web` using the key and chain the kubelet wrote."""
    create_service(cluster_client, node_namespace, "web", {"app": "web"})
    create_pod(
        cluster_client,
        node_namespace,
        "web-0",
        node=cluster.nodes[0].name,
        labels={"app": "web"},
        signer_name=SIGNER,
        annotations={"kubernetes.io/service-names": "web"},
    )
    _, files = running_files(cluster, cluster_client, node_namespace, "web-0")
    running = WebhookServer("127.0.0.1", free_port(), files.chain, files.key).start()
    try:
        yield running
    finally:
        running.close()


def trust_config_map(
    client: Client, namespace: str, selector: str, annotations: dict[str, str] | None = None
) -> None:
    client.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "web-ca",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector, **(annotations or {})},
            },
        },
    )


def config_map(client: Client, namespace: str) -> dict[str, Any]:
    found: dict[str, Any] = client.get(f"/api/v1/namespaces/{namespace}/configmaps/web-ca")
    return found


def signer_bundle(client: Client) -> str:
    return resolve_selector(bundles(client, SIGNER), {"signerName": SIGNER, "labelSelector": {}})


def tls_verifies(ca_crt: str, hostname: str, port: int) -> str | None:
    """Handshake with exactly `ca_crt` as the trust and `hostname` as the name to verify;
    None on success, else the verification error."""
    context = ssl.create_default_context(cadata=ca_crt)
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            context.wrap_socket(raw, server_hostname=hostname),
        ):
            return None
    except ssl.SSLCertVerificationError as err:
        return str(err)


def test_gateway_backend_tls_policy_trusts_the_injected_config_map(
    cluster_client: Client,
    node_namespace: str,
    injector: RunningInjector,
    server: WebhookServer,
) -> None:
    ns, client = node_namespace, cluster_client
    gateway_api.install(client)
    trust_config_map(client, ns, json.dumps({"signerName": SIGNER, "labelSelector": {}}))
    expected = signer_bundle(client)
    eventually(lambda: config_map(client, ns).get("data", {}).get(CA_KEY) == expected, timeout=30)

    hostname = f"web.{ns}.svc"
    policy = client.create(
        BTLS_PATH.format(ns=ns),
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "BackendTLSPolicy",
            "metadata": {"name": "web"},
            "spec": {
                "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                "validation": {
                    "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "web-ca"}],
                    "hostname": hostname,
                },
            },
        },
    )
    assert policy["spec"]["validation"]["caCertificateRefs"][0]["name"] == "web-ca"

    # What a Gateway data plane does with that policy: trust exactly the ConfigMap's
    # ca.crt and verify the backend as validation.hostname.
    ca_crt = config_map(client, ns)["data"][CA_KEY]
    assert tls_verifies(ca_crt, hostname, server.port) is None
    assert tls_verifies(ca_crt, f"other.{ns}.svc", server.port) is not None

    # The signer's anchor retired from the selection: the ConfigMap follows, and the
    # same client now refuses the server.
    other = normalize_bundle(generate_ca("retired selection").cert.public_bytes(Encoding.PEM))
    other_signer = f"{SIGNER.split('/')[0]}/other"
    other_name = bundle_name(other_signer, other)
    client.create(
        "/apis/certificates.k8s.io/v1/clustertrustbundles",
        {
            "apiVersion": "certificates.k8s.io/v1",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": other_name},
            "spec": {"signerName": other_signer, "trustBundle": other},
        },
    )
    try:
        client.patch(
            f"/api/v1/namespaces/{ns}/configmaps/web-ca",
            {"metadata": {"annotations": {ANNOTATION: json.dumps({"name": other_name})}}},
        )
        eventually(lambda: config_map(client, ns)["data"][CA_KEY] == other, timeout=30)
        failure = tls_verifies(config_map(client, ns)["data"][CA_KEY], hostname, server.port)
        assert failure is not None and "certificate verify failed" in failure, failure
    finally:
        client.delete(f"/apis/certificates.k8s.io/v1/clustertrustbundles/{other_name}")


def test_a_jvm_trusts_the_server_through_the_injected_truststore(
    cluster_client: Client,
    node_namespace: str,
    injector: RunningInjector,
    server: WebhookServer,
    tmp_path: Path,
) -> None:
    java = shutil.which("java")
    assert java, "a JDK (11+) is needed for the JVM example (Debian: openjdk-17-jdk-headless)"
    ns, client = node_namespace, cluster_client
    trust_config_map(
        client,
        ns,
        json.dumps({"signerName": SIGNER, "labelSelector": {}}),
        {TRUSTSTORE_ANNOTATION: "truststore.p12"},
    )
    store = eventually(
        lambda: (config_map(client, ns).get("binaryData") or {}).get("truststore.p12"),
        timeout=30,
    )
    # What the ConfigMap volume would hold at /etc/trust/truststore.p12.
    path = tmp_path / "truststore.p12"
    path.write_bytes(base64.b64decode(store))

    def run_java(hostname: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                java,
                f"-Djavax.net.ssl.trustStore={path}",
                "-Djavax.net.ssl.trustStoreType=PKCS12",
                str(JAVA_CLIENT),
                "127.0.0.1",
                str(server.port),
                hostname,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )

    verified = run_java(f"web.{ns}.svc")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"web.{ns}.svc" in verified.stdout
    refused = run_java(f"other.{ns}.svc")
    assert refused.returncode == 1 and "No subject alternative DNS name" in refused.stdout, (
        refused.stdout + refused.stderr
    )


def test_an_ingress_proxy_trusts_the_server_through_the_mounted_ca_crt(
    cluster_client: Client,
    node_namespace: str,
    injector: RunningInjector,
    server: WebhookServer,
    tmp_path: Path,
) -> None:
    curl = shutil.which("curl")
    assert curl, "curl (OpenSSL) is needed for the Ingress-proxy example (Debian: curl)"
    ns, client = node_namespace, cluster_client
    trust_config_map(client, ns, json.dumps({"signerName": SIGNER, "labelSelector": {}}))
    ca_crt = eventually(lambda: config_map(client, ns).get("data", {}).get(CA_KEY), timeout=30)
    # What the ConfigMap volume holds at /etc/trust/ca.crt in the controller's Pod.
    path = tmp_path / "ca.crt"
    path.write_text(ca_crt)

    def fetch(hostname: str) -> subprocess.CompletedProcess[str]:
        address = f"{hostname}:{server.port}"
        return subprocess.run(
            [
                *(curl, "-sS", "-o", "/dev/null", "--cacert", str(path)),
                *("--resolve", f"{address}:127.0.0.1", f"https://{address}/"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )

    verified = fetch(f"web.{ns}.svc")
    assert verified.returncode == 0, verified.stderr
    refused = fetch(f"other.{ns}.svc")
    assert refused.returncode == 60, refused.stderr  # curl: peer certificate not verified
