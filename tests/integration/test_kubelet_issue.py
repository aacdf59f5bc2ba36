"""Through the real kubelet (hollow nodes): for each of the six key
types a Pod with a `podCertificate` volume reaches Running, and the files the kubelet
wrote verify — the chain against the bundle the kubelet projected from our
ClusterTrustBundle, the key against the leaf, the SANs exactly the Service's names."""

from __future__ import annotations

import pytest
from cryptography import x509

from controlplane.cluster import Cluster
from controlplane.kubelet import KEY_TYPES, generate_key, pcr_manifest
from kube.client import Client
from tests.integration import nodes
from tests.integration.manager_process import SignerProcess
from trust.selector import resolve_selector

SIGNER = nodes.unique_signer_name()


signer = nodes.signer_fixture(SIGNER)


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_pod_runs_with_kubelet_written_key_and_chain_verifying_against_projected_bundle(
    cluster: Cluster,
    cluster_client: Client,
    signer: SignerProcess,
    node_namespace: str,
    key_type: str,
) -> None:
    ns = node_namespace
    nodes.create_service(cluster_client, ns, "web", {"app": "web"})
    nodes.serving_pod(
        cluster, cluster_client, ns, "web-0", app="web", signer_name=SIGNER, key_type=key_type
    )

    pod, files = nodes.running_files(cluster, cluster_client, ns, "web-0")

    assert pod["status"]["phase"] == "Running"
    chain = nodes.chain_of(files.chain)
    leaf = chain[0]
    assert nodes.key_matches(files.key, leaf)
    assert nodes.dns_sans(leaf) == nodes.service_sans("web", ns)
    assert leaf.subject == x509.Name([])
    nodes.verify_against_bundle(files.chain, files.bundle, nodes.service_sans("web", ns))
    published = resolve_selector(
        nodes.bundles(cluster_client, SIGNER), {"signerName": SIGNER, "labelSelector": {}}
    )
    assert files.bundle.decode() == published


def test_credential_bundle_holds_key_then_chain_that_verify(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    ns = node_namespace
    nodes.create_service(cluster_client, ns, "api", {"app": "api"})
    nodes.serving_pod(
        cluster,
        cluster_client,
        ns,
        "api-0",
        app="api",
        signer_name=SIGNER,
        node_index=1,
        credential_bundle=True,
    )

    _, files = nodes.running_files(cluster, cluster_client, ns, "api-0")

    bundle = files.credential_bundle
    assert bundle.startswith(b"-----BEGIN PRIVATE KEY-----")
    leaf = nodes.chain_of(bundle)[0]
    assert nodes.key_matches(bundle, leaf)
    assert nodes.dns_sans(leaf) == nodes.service_sans("api", ns)
    nodes.verify_against_bundle(bundle, files.bundle, nodes.service_sans("api", ns))


def test_kubelet_stand_in_writes_the_request_the_real_kubelet_writes(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    """`controlplane/kubelet.py` (used by the light-plane tests) against the real thing."""
    ns = node_namespace
    nodes.create_service(cluster_client, ns, "web", {"app": "web"})
    nodes.serving_pod(cluster, cluster_client, ns, "web-0", app="web", signer_name=SIGNER)
    pod, _ = nodes.running_files(cluster, cluster_client, ns, "web-0")
    [real] = nodes.pcrs_of(cluster_client, ns, "web-0")
    stand_in = pcr_manifest(
        pod,
        generate_key("ECDSAP256"),
        signer_name=SIGNER,
        annotations={"kubernetes.io/service-names": "web"},
        max_expiration_seconds=None,
    )

    assert stand_in["metadata"]["generateName"] == real["metadata"]["generateName"]
    assert stand_in["metadata"]["ownerReferences"] == real["metadata"]["ownerReferences"]
    for field in ("signerName", "podName", "podUID", "serviceAccountName", "nodeName"):
        assert stand_in["spec"][field] == real["spec"][field], field
    assert set(stand_in["spec"]) | {"maxExpirationSeconds"} == set(real["spec"])
