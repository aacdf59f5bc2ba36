"""Installing with a managed CA from an empty namespace: `config/managed`
(kustomize) and the chart with `managedCA.enabled=true`, nothing prepared by hand; the
Deployment's Pod on a hollow node, the signer run on exactly what its Pod got (its
ServiceAccount token, in-cluster, with only the shipped RBAC); the first certificate is
issued to a workload Pod; `helm uninstall` leaves the CA Secret, which the chart never
owned."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.cluster import Cluster
from controlplane.workload import BUNDLE_FILE, CHAIN_FILE
from kube.client import ApiError, Client, is_not_found
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.integration.chart_harness import CHART, CONFIG, helm, kustomize
from tests.integration.manager_process import eventually
from tests.integration.nodes import create_service, running_files, serving_pod
from tests.integration.shipped import (
    DEPLOYMENT,
    NS,
    ShippedSigner,
    deploy_objects,
    running_pods,
    undeploy,
    wait_namespace_gone,
)
from tests.unit.deploy.kustomize import find

SIGNER = "kubernetes.io/service-serving"
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{DEFAULT_SECRET_NAME}"


@pytest.fixture
def empty_namespace(cluster_client: Client) -> Iterator[None]:
    """No installation and no bundle published for the signer: from nothing. Bundles an
    earlier install left (cluster-scoped, they outlive an uninstall) would make the first
    CA an adopting bootstrap, which waits the propagation delay (10 min) before signing."""
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)
    ctbs = "/apis/certificates.k8s.io/v1/clustertrustbundles"
    for bundle in cluster_client.get(ctbs, {"fieldSelector": f"spec.signerName={SIGNER}"})["items"]:
        try:
            cluster_client.delete(f"{ctbs}/{bundle['metadata']['name']}")
        except ApiError as err:
            if not is_not_found(err):
                raise
    yield
    undeploy(cluster_client)


def _secret(client: Client) -> dict[str, Any] | None:
    try:
        return client.get(SECRET_PATH)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise


def _first_certificate(
    cluster: Cluster, client: Client, namespace: str, started: float, log: Path
) -> float:
    """A workload Pod gets a certificate that chains to the published managed CA; returns
    seconds since `started`."""
    create_service(client, namespace, "web", {"app": "web"})
    serving_pod(cluster, client, namespace, "web-0", app="web", signer_name=SIGNER)
    _, files = running_files(cluster, client, namespace, "web-0")
    elapsed = time.monotonic() - started
    secret = _secret(client)
    assert secret is not None, "the signer made its CA Secret"
    assert files.exists(CHAIN_FILE) and files.exists(BUNDLE_FILE)
    ca = base64.b64decode(secret["data"]["ca.crt"])
    held = pem_fingerprints(files.read(BUNDLE_FILE))
    assert pem_fingerprints(ca)[0] in held, log.read_text()[-2000:]
    return elapsed


@pytest.mark.usefixtures("empty_namespace")
def test_config_managed_installs_from_nothing_and_issues(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    # docs/managed-ca.md: the namespace (config/namespace), then config/managed.
    objects = kustomize(CONFIG / "namespace") + kustomize(CONFIG / "managed")
    find(objects, "Deployment", DEPLOYMENT)["spec"]["replicas"] = 1
    started = time.monotonic()
    [pod] = deploy_objects(cluster, cluster_client, objects)
    assert not any("secret" in v for v in pod.pod["spec"]["volumes"]), "no Secret volume"
    signer = ShippedSigner(cluster, pod, tmp_path / "signer.log")
    try:
        elapsed = _first_certificate(
            cluster, cluster_client, node_namespace, started, tmp_path / "signer.log"
        )
        print(f"config/managed: apply to first issued certificate {elapsed:.1f}s")
        forbidden = [line for line in signer.log_lines() if "forbidden" in line.lower()]
        assert not forbidden, forbidden[:3]
    finally:
        assert signer.stop() == 0


@pytest.mark.usefixtures("empty_namespace")
def test_helm_managed_installs_from_nothing_and_uninstall_keeps_the_ca(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    kubeconfig = str(cluster.plane.kubeconfig)
    installed = helm(
        "install",
        DEPLOYMENT,
        str(CHART),
        "--namespace",
        NS,
        "--create-namespace",
        "--take-ownership",
        "--set",
        "managedCA.enabled=true",
        "--set",
        "replicaCount=1",
        "--kubeconfig",
        kubeconfig,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    deployment = cluster_client.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{DEPLOYMENT}")
    [pod] = running_pods(cluster, cluster_client, deployment)
    signer = ShippedSigner(cluster, pod, tmp_path / "signer.log")
    try:
        elapsed = _first_certificate(
            cluster, cluster_client, node_namespace, started, tmp_path / "signer.log"
        )
        print(f"helm managedCA.enabled: install to first issued certificate {elapsed:.1f}s")
    finally:
        assert signer.stop() == 0
    ca = _secret(cluster_client)
    uninstalled = helm("uninstall", DEPLOYMENT, "--namespace", NS, "--kubeconfig", kubeconfig)
    assert uninstalled.returncode == 0, uninstalled.stderr
    assert eventually(
        lambda: not cluster_client.get(f"/apis/apps/v1/namespaces/{NS}/deployments")["items"], 30
    ), "the release is gone"
    kept = _secret(cluster_client)
    assert ca is not None and kept is not None
    assert kept["data"] == ca["data"], "helm uninstall kept the CA"
