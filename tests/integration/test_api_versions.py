"""What each tested kube-apiserver serves, and the real `run` finding it on its own
(`--pcr-api-version=auto`, the default; the publisher always picks the newest served):
1.37 and 1.38 serve PodCertificateRequest and ClusterTrustBundle as v1 (GA) and, on
request, v1beta1; 1.36 serves them only as v1beta1, behind the `PodCertificateRequest`,
`ClusterTrustBundle` and `ClusterTrustBundleProjection` gates. 1.38 with its
`PodCertificateMLDSA` gate on (as the test plane starts it) also takes the ML-DSA key
types in a Pod's `podCertificate` projection; older releases refuse them. The other
version-sensitive tests take the same `plane` fixture (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from controlplane.workload import cert_pod
from kube.client import ApiError, Client
from kube.discovery import served_version
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.signer_harness import condition, unique_signer_name, wait_terminal
from trust.bundle import stable_bundle_name
from trust.ca import write_ca

GROUP = "certificates.k8s.io"


def minor(version: str) -> int:
    return int(version.lstrip("v").split(".")[1])


def test_apiserver_is_the_release_it_was_built_as(plane: ControlPlane) -> None:
    assert plane.version == plane.kube_version


def test_serves_the_certificates_apis_of_its_release(
    plane: ControlPlane, plane_client: Client
) -> None:
    v1beta1 = {r["name"] for r in plane_client.get(f"/apis/{GROUP}/v1beta1")["resources"]}
    assert {"podcertificaterequests", "podcertificaterequests/status"} <= v1beta1
    assert "clustertrustbundles" in v1beta1
    newest = "v1" if minor(plane.kube_version) >= 37 else "v1beta1"
    for resource in ("podcertificaterequests", "clustertrustbundles"):
        assert served_version(plane_client, GROUP, resource, ["v1", "v1beta1"]) == newest


@pytest.mark.parametrize("key_type", ["MLDSA44", "MLDSA65", "MLDSA87"])
def test_a_pod_may_ask_for_an_ml_dsa_key_from_1_38_on(
    plane: ControlPlane, plane_client: Client, plane_namespace: str, key_type: str
) -> None:
    pod = cert_pod(
        "pq-0", plane_namespace, node=None, key_type=key_type, signer_name="example.com/pq"
    )
    path = f"/api/v1/namespaces/{plane_namespace}/pods"
    if minor(plane.kube_version) >= 38:
        created = plane_client.create(path, pod, {"dryRun": "All"})
        source = created["spec"]["volumes"][0]["projected"]["sources"][0]["podCertificate"]
        assert source["keyType"] == key_type
    else:
        with pytest.raises(ApiError) as refused:
            plane_client.create(path, pod, {"dryRun": "All"})
        assert refused.value.status == 422
        assert "keyType" in str(refused.value)


def test_run_finds_the_served_versions_then_publishes_and_issues(
    plane: ControlPlane,
    plane_client: Client,
    plane_namespace: str,
    plane_pcr_version: str,
    tmp_path: Path,
) -> None:
    write_ca(tmp_path / "ca")
    signer_name = unique_signer_name()
    proc = SignerProcess(
        plane.kubeconfig,
        tmp_path / "ca",
        tmp_path / "signer.log",
        "--leader-elect=false",
        signer_name=signer_name,
    )
    try:
        assert eventually(proc.ready, 60), "\n".join(proc.log_lines()[-20:])
        configured = {
            line["msg"]: line for line in proc.json_logs() if line["msg"].endswith(" configured")
        }
        newest = "v1" if minor(plane.kube_version) >= 37 else "v1beta1"
        assert configured["signer configured"]["podcertificaterequests"] == plane_pcr_version
        assert plane_pcr_version == newest
        assert configured["publisher configured"]["clustertrustbundles"] == newest

        def published() -> list[dict[str, Any]]:
            listed = plane_client.get(
                f"/apis/{GROUP}/{newest}/clustertrustbundles",
                {"fieldSelector": f"spec.signerName={signer_name}"},
            )
            return list(listed.get("items") or [])

        # The hash-named bundle and the stable one (reference.md §4), on either version.
        assert eventually(lambda: len(published()) == 2, 15)
        assert stable_bundle_name(signer_name) in {i["metadata"]["name"] for i in published()}

        kubelet = Kubelet(plane_client, signer_name)
        pod = kubelet.create_pod("web-0", plane_namespace, labels={"app": "web"})
        kubelet.create_service("web", plane_namespace, selector={"app": "web"})
        created, _ = kubelet.create_pcr(
            pod, annotations={"kubernetes.io/service-names": "web"}, version=newest
        )
        stored = wait_terminal(plane_client, created, newest, timeout=30)
        assert condition(stored)["type"] == "Issued"
    finally:
        assert proc.stop() == 0
