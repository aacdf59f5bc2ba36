"""Through the 1.38 kubelet: on a cluster of Kubernetes 1.38
(`binaries.NEXT_VERSION`: kube-apiserver with `PodCertificateMLDSA` on, its
kube-controller-manager, and a hollow kubelet built on 1.38's kubelet packages), a Pod
whose projected volume asks for `keyType: MLDSA65` reaches Running: the kubelet generated
the ML-DSA-65 key, sent its request, our signer issued it, and the files the kubelet wrote
verify — the key against the leaf, the chain against the bundle the kubelet projected
from our ClusterTrustBundle (cryptography's X.509 verifier), the SANs the Service's names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import mldsa

from controlplane import binaries
from controlplane.cluster import Cluster
from controlplane.workload import wait_service_account
from kube.client import Client
from tests.conftest import create_test_namespace
from tests.integration import nodes
from tests.integration.manager_process import SignerProcess

SIGNER = nodes.unique_signer_name()


@pytest.fixture(scope="module")
def cluster_138() -> Iterator[Cluster]:
    with Cluster.start(nodes=1, version=binaries.NEXT_VERSION) as started:
        yield started


@pytest.fixture(scope="module")
def signer_138(cluster_138: Cluster) -> Iterator[SignerProcess]:
    with nodes.cluster_signer(cluster_138, SIGNER) as proc:
        yield proc


def test_the_cluster_runs_1_38_throughout(cluster_138: Cluster) -> None:
    client = cluster_138.plane.client()
    assert cluster_138.plane.version == binaries.NEXT_VERSION
    node = client.get(f"/api/v1/nodes/{cluster_138.nodes[0].name}")
    assert node["status"]["nodeInfo"]["kubeletVersion"] == binaries.NEXT_VERSION


def test_kubelet_writes_an_ml_dsa_65_key_and_a_chain_that_verifies_against_the_bundle(
    cluster_138: Cluster, signer_138: SignerProcess, request: pytest.FixtureRequest
) -> None:
    client: Client = cluster_138.plane.client()
    ns = create_test_namespace(client, request)
    wait_service_account(client, ns)
    nodes.create_service(client, ns, "web", {"app": "web"})
    nodes.serving_pod(
        cluster_138, client, ns, "web-0", app="web", signer_name=SIGNER, key_type="MLDSA65"
    )

    pod, files = nodes.running_files(cluster_138, client, ns, "web-0")

    assert pod["status"]["phase"] == "Running"
    key = serialization.load_pem_private_key(files.key, password=None)
    assert isinstance(key, mldsa.MLDSA65PrivateKey)
    leaf = nodes.chain_of(files.chain)[0]
    assert isinstance(leaf.public_key(), mldsa.MLDSA65PublicKey)
    assert nodes.key_matches(files.key, leaf)
    assert nodes.dns_sans(leaf) == nodes.service_sans("web", ns)
    nodes.verify_against_bundle(files.chain, files.bundle, nodes.service_sans("web", ns))
    [pcr] = nodes.pcrs_of(client, ns, "web-0")
    assert nodes.condition_of_type(pcr, "Issued") is not None
