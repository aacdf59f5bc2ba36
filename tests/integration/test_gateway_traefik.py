"""A real Gateway in the loop: Traefik (built from its Go module, run as a
process on loopback with the Kubernetes Gateway provider, experimental channel) in front
of a backend serving the certificate the real (hollow) kubelet wrote for a Pod, trusting
it through a BackendTLSPolicy whose `caCertificateRefs` names the ConfigMap the injector
keeps equal to the signer's ClusterTrustBundles. Gateway API v1.7.0's experimental CRDs
are installed.

* Accepted / ResolvedRefs, and HTTP 200 through Traefik; once the signer's anchor leaves
  the selection, Traefik answers 5xx.
* The v1.7.0 CRDs accept a BackendTLSPolicy and a Gateway's frontend validation naming
  the stable ClusterTrustBundle by name (GEP-5075) — no released data plane reads it yet.
* An accelerated managed-CA rotation (`ca rotate`, the swap after a 10 s propagation
  delay, the retire time moved into the past) at a steady 10 requests per second: 0
  failed, and the stable bundle's name resolves to old → old+new → new.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from controlplane import gateway_api
from controlplane.cluster import Cluster
from controlplane.traefik import Traefik
from injector.configmaps import CA_KEY, LABEL
from injector.targets import ANNOTATION
from kube.client import Client
from tests.integration.injector_harness import RunningInjector
from tests.integration.managed_ca_harness import ca_cli, move_retire_time_to_the_past, phase
from tests.integration.manager_process import SignerProcess
from tests.integration.nodes import bundles, running_files, serving_pod, unique_signer_name
from tests.integration.signer_harness import eventually
from tests.integration.traefik_harness import (
    GW,
    Requests,
    answer,
    backend,
    backend_service,
    conditions,
    delete_quietly,
    gateway_class,
    route_host,
    route_through,
)
from trust.bundle import bundle_name, normalize_bundle, stable_bundle_name
from trust.ca import generate_ca
from trust.clustertrustbundles import anchors_of
from trust.selector import resolve_selector

SIGNER = unique_signer_name()
SECRET = f"gw-ca-{uuid.uuid4().hex[:8]}"
SECRET_PATH = f"/api/v1/namespaces/kube-system/secrets/{SECRET}"
CTB = "/apis/certificates.k8s.io/v1/clustertrustbundles"
SELECT_SIGNER = json.dumps({"signerName": SIGNER, "labelSelector": {}})


@pytest.fixture(scope="module")
def managed_signer(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    proc = SignerProcess(
        cluster.plane.kubeconfig,
        None,
        tmp_path_factory.mktemp("gateway-signer") / "signer.log",
        "--ca-mode=managed",
        f"--managed-ca-secret-name={SECRET}",
        "--leader-elect-resource-namespace=kube-system",
        f"--leader-elect-resource-name=sss-{SECRET}",
        "--managed-ca-propagation-delay=10s",
        "--managed-ca-allow-short-propagation-delay",
        "--max-certificate-lifetime=1h",
        "--managed-ca-retire-margin=5m",
        signer_name=SIGNER,
    )
    try:
        client = cluster.plane.client()
        eventually(lambda: phase(client, SECRET_PATH) == "Stable", timeout=60, what="a CA")
        yield
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def injector(cluster_client: Client) -> Iterator[RunningInjector]:
    with RunningInjector(cluster_client) as running:
        yield running


@pytest.fixture(scope="module")
def traefik(cluster: Cluster, cluster_client: Client) -> Iterator[Traefik]:
    gateway_api.install(cluster_client, gateway_api.EXPERIMENTAL_VERSION, channel="experimental")
    with Traefik(cluster.plane) as running:
        yield running


@pytest.fixture(scope="module")
def class_name(cluster_client: Client, traefik: Traefik) -> Iterator[str]:
    name = gateway_class(cluster_client)
    yield name
    delete_quietly(cluster_client, f"{GW}/gatewayclasses/{name}")


def signer_bundle(client: Client) -> str:
    return resolve_selector(bundles(client, SIGNER), {"signerName": SIGNER, "labelSelector": {}})


def trust_config_map(client: Client, namespace: str, selector: str = SELECT_SIGNER) -> None:
    client.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "web-ca",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
        },
    )


def ca_crt(client: Client, namespace: str) -> str | None:
    data = client.get(f"/api/v1/namespaces/{namespace}/configmaps/web-ca").get("data") or {}
    return data.get(CA_KEY)


def stable_anchors(client: Client) -> frozenset[str]:
    obj = client.get(f"{CTB}/{stable_bundle_name(SIGNER).replace(':', '%3A')}")
    return anchors_of(obj["spec"]["trustBundle"])


def serve_web_0(
    cluster: Cluster, client: Client, ns: str, pod: str = "web-0"
) -> tuple[bytes, bytes]:
    """A Pod of Service `web` on a hollow node: (chain, key) the kubelet wrote for it."""
    serving_pod(cluster, client, ns, pod, app="web", signer_name=SIGNER, services="web")
    _, files = running_files(cluster, client, ns, pod)
    return files.chain, files.key


@pytest.mark.usefixtures("managed_signer", "injector")
def test_traefik_trusts_the_kubelet_certificate_through_the_injected_config_map(
    cluster: Cluster,
    cluster_client: Client,
    node_namespace: str,
    traefik: Traefik,
    class_name: str,
) -> None:
    client, ns = cluster_client, node_namespace
    cluster_ip = backend_service(client, ns, "web", "web")  # first: the signer waits for it
    chain, key = serve_web_0(cluster, client, ns)
    trust_config_map(client, ns)
    eventually(lambda: ca_crt(client, ns) == signer_bundle(client), timeout=30, what="ca.crt")
    route_through(client, ns, traefik, class_name, "web", "web-ca")
    with backend(cluster_ip, chain, key):
        eventually(lambda: answer(traefik, ns) == 200, timeout=60, what="200 via Traefik")
        gw = client.get(f"{GW}/namespaces/{ns}/gateways/gw")
        route = client.get(f"{GW}/namespaces/{ns}/httproutes/web")
        policy = client.get(f"{GW}/namespaces/{ns}/backendtlspolicies/web")
        assert conditions(gw)["Accepted"] == "True", gw.get("status")
        assert conditions(route, "parents") == {"Accepted": "True", "ResolvedRefs": "True"}
        policy_conditions = conditions(policy, "ancestors")
        assert policy_conditions["Accepted"] == "True", policy.get("status")
        assert policy_conditions["ResolvedRefs"] == "True", policy.get("status")

        # The signer's anchor leaves the selection: the ConfigMap follows, Traefik no
        # longer trusts the backend.
        foreign = normalize_bundle(generate_ca("foreign").cert.public_bytes(Encoding.PEM))
        foreign_signer = f"{SIGNER.split('/')[0]}/foreign"
        foreign_name = bundle_name(foreign_signer, foreign)
        client.create(
            CTB,
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "ClusterTrustBundle",
                "metadata": {"name": foreign_name},
                "spec": {"signerName": foreign_signer, "trustBundle": foreign},
            },
        )
        try:
            client.patch(
                f"/api/v1/namespaces/{ns}/configmaps/web-ca",
                {"metadata": {"annotations": {ANNOTATION: json.dumps({"name": foreign_name})}}},
            )
            eventually(lambda: ca_crt(client, ns) == foreign, timeout=30, what="foreign ca.crt")
            code = eventually(
                lambda: (c := answer(traefik, ns)) >= 500 and c,
                timeout=30,
                what="5xx via Traefik",
            )
            assert 500 <= code < 600
        finally:
            delete_quietly(client, f"{CTB}/{foreign_name.replace(':', '%3A')}")


@pytest.mark.usefixtures("managed_signer", "traefik")
def test_v1_7_crds_accept_the_stable_cluster_trust_bundle_by_name(
    cluster_client: Client, node_namespace: str
) -> None:
    """GEP-5075 in Gateway API v1.7.0's experimental CRDs: BackendTLSPolicy and Gateway
    frontend validation reference a ClusterTrustBundle by name; ours is the stable one,
    and it holds what the signer publishes."""
    client, ns = cluster_client, node_namespace
    ref = {
        "group": "certificates.k8s.io",
        "kind": "ClusterTrustBundle",
        "name": stable_bundle_name(SIGNER),
    }
    policy = client.create(
        f"{GW}/namespaces/{ns}/backendtlspolicies",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "BackendTLSPolicy",
            "metadata": {"name": "by-name"},
            "spec": {
                "targetRefs": [{"group": "", "kind": "Service", "name": "web"}],
                "validation": {"caCertificateRefs": [ref], "hostname": f"web.{ns}.svc"},
            },
        },
    )
    gateway = client.create(
        f"{GW}/namespaces/{ns}/gateways",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "mtls"},
            "spec": {
                "gatewayClassName": "example.com/no-controller",
                "listeners": [
                    {
                        "name": "https",
                        "protocol": "HTTPS",
                        "port": 443,
                        "tls": {"certificateRefs": [{"name": "gateway-cert"}]},
                    }
                ],
                "tls": {"frontend": {"default": {"validation": {"caCertificateRefs": [ref]}}}},
            },
        },
    )
    assert policy["spec"]["validation"]["caCertificateRefs"] == [ref]
    frontend = gateway["spec"]["tls"]["frontend"]["default"]["validation"]
    assert frontend["caCertificateRefs"] == [ref]
    assert stable_anchors(client) == anchors_of(signer_bundle(client))


@pytest.mark.usefixtures("managed_signer", "injector")
def test_an_accelerated_managed_rotation_fails_no_request_through_traefik(
    cluster: Cluster,
    cluster_client: Client,
    node_namespace: str,
    traefik: Traefik,
    class_name: str,
) -> None:
    client, ns = cluster_client, node_namespace
    kubeconfig: Path = cluster.plane.kubeconfig
    cluster_ip = backend_service(client, ns, "web", "web")  # first: the signer waits for it
    chain, key = serve_web_0(cluster, client, ns)
    trust_config_map(client, ns)
    eventually(lambda: ca_crt(client, ns) == signer_bundle(client), timeout=30, what="ca.crt")
    route_through(client, ns, traefik, class_name, "web", "web-ca")
    old = stable_anchors(client)
    with backend(cluster_ip, chain, key) as server:
        eventually(lambda: answer(traefik, ns) == 200, timeout=60, what="200 via Traefik")
        started = time.monotonic()
        steps: list[str] = []

        def step(what: str) -> None:
            steps.append(f"{time.strftime('%H:%M:%S')} {what}")

        with Requests(traefik.url("/ok"), route_host(ns), rate=10) as requests:
            step("rotate")
            rotated = ca_cli(
                kubeconfig, "rotate", "--signer-namespace=kube-system", f"--secret-name={SECRET}"
            )
            assert rotated.returncode == 0, rotated.stderr
            eventually(
                lambda: phase(client, SECRET_PATH) == "Retiring", timeout=90, what="the swap"
            )
            step("swapped")
            both = stable_anchors(client)
            assert old < both and len(both) == 2
            # The kubelet's next certificate comes from the new CA: a new Pod of the
            # Service, whose files the backend now serves.
            new_chain, new_key = serve_web_0(cluster, client, ns, "web-1")
            leaf = x509.load_pem_x509_certificates(new_chain)[0]
            assert leaf.issuer != x509.load_pem_x509_certificates(chain)[0].issuer
            server.use_certificate(new_chain, new_key)
            step("serving the new certificate")
            time.sleep(3)
            move_retire_time_to_the_past(client, SECRET_PATH)
            eventually(lambda: stable_anchors(client) == both - old, timeout=60, what="retire")
            step("retired")
            eventually(
                lambda: ca_crt(client, ns) == signer_bundle(client),
                timeout=30,
                what="ca.crt without the old root",
            )
            time.sleep(5)  # Traefik has reloaded the ConfigMap (0.2-2 s) and kept answering
    print(
        f"gateway rotation: {time.monotonic() - started:.0f}s at 10/s through Traefik: "
        f"{requests.ok} ok, {len(requests.failed)} failed {dict(requests.codes)}"
    )
    assert requests.failed == [], (requests.failed[:5], steps)
    assert requests.ok > 100
