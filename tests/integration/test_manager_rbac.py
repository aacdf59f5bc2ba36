"""config/ against the real API server: with only config/rbac
applied, the controller running as its ServiceAccount (token from the TokenRequest API)
issues certificates and publishes the bundle; SubjectAccessReviews show what it cannot
do; every manifest under config/ passes server-side dry-run."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from kube.client import Client
from tests.integration import identities
from tests.integration.manager_process import (
    PRODUCT_SIGNER,
    eventually,
    issue_one,
    signer_with_token,
    wait_issued,
)
from tests.integration.manifests import apply, ensure_monitoring_crds, ensure_namespace
from tests.unit.deploy.kustomize import CONFIG, render
from trust.ca import write_ca

NS = identities.PRODUCT_NAMESPACE
SA = identities.CONTROLLER_SA
SUBJECT = identities.CONTROLLER_SUBJECT


@pytest.fixture(scope="module")
def rbac_applied(client: Client) -> None:
    ensure_namespace(client, NS)
    for obj in render(CONFIG / "rbac"):
        apply(client, obj, dry_run=False, namespace=NS)


@pytest.mark.usefixtures("rbac_applied")
def test_runs_as_its_service_account_with_only_config_rbac(
    control_plane: ControlPlane,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    tmp_path: Path,
) -> None:
    files = write_ca(tmp_path / "ca")
    with signer_with_token(
        control_plane,
        identities.service_account_token(client, NS, SA),
        tmp_path,
        files.key.parent,
        f"--leader-elect-resource-namespace={NS}",
        "--leader-elect-resource-name=service-serving-signer",  # the Role names it
    ) as signer:
        assert eventually(signer.ready, 30), "\n".join(signer.log_lines()[-20:])
        assert eventually(signer.leading, 15)
        kubelet.create_service("web", namespace, selector={"app": "web"})
        name = issue_one(kubelet, namespace, "web-0")
        assert wait_issued(client, namespace, name, 15), "\n".join(signer.log_lines()[-20:])

        def published() -> bool:
            items = client.get(
                "/apis/certificates.k8s.io/v1/clustertrustbundles",
                {"fieldSelector": f"spec.signerName={PRODUCT_SIGNER}"},
            )["items"]
            bundle = files.trust_bundle.read_text().split("-----END CERTIFICATE-----")[0]
            body = bundle.split("-----BEGIN CERTIFICATE-----")[1].replace("\n", "")
            return any(body in i["spec"]["trustBundle"].replace("\n", "") for i in items)

        assert eventually(published, 15), "bundle published under the ServiceAccount"


# Each RBAC module's own SubjectAccessReview table.
@pytest.mark.usefixtures("rbac_applied")
@pytest.mark.parametrize(
    ("verb", "resource", "kwargs"),
    [
        ("get", "secrets", {"namespace": NS}),
        ("list", "secrets", {}),
        ("watch", "secrets", {"namespace": "kube-system"}),
        ("create", "pods", {"namespace": "default"}),
        ("update", "pods", {"namespace": "default"}),
        ("patch", "pods", {"namespace": "default"}),
        ("delete", "pods", {"namespace": "default"}),
        ("update", "services", {"namespace": "default"}),
        ("get", "leases", {"group": "coordination.k8s.io", "namespace": "kube-system"}),
        ("sign", "signers", {"group": "certificates.k8s.io", "name": "example.com/other"}),
        (
            "attest",
            "signers",
            {"group": "certificates.k8s.io", "name": "kubernetes.io/kubelet-serving"},
        ),
        (
            "update",
            "podcertificaterequests",
            {"group": "certificates.k8s.io", "namespace": "default"},
        ),
        ("create", "certificatesigningrequests", {"group": "certificates.k8s.io"}),
    ],
)
def test_service_account_cannot(
    client: Client, verb: str, resource: str, kwargs: dict[str, str]
) -> None:
    assert not identities.can(client, SUBJECT, verb, resource, **kwargs)


@pytest.mark.usefixtures("rbac_applied")
@pytest.mark.parametrize(
    ("verb", "resource", "kwargs"),
    [
        ("sign", "signers", {"group": "certificates.k8s.io", "name": PRODUCT_SIGNER}),
        ("attest", "signers", {"group": "certificates.k8s.io", "name": PRODUCT_SIGNER}),
        (
            "update",
            "podcertificaterequests",
            {"group": "certificates.k8s.io", "namespace": "default", "subresource": "status"},
        ),
        ("watch", "pods", {}),
        ("create", "events", {"group": "events.k8s.io", "namespace": "default"}),
        (
            "update",
            "leases",
            {"group": "coordination.k8s.io", "namespace": NS, "name": "service-serving-signer"},
        ),
        ("delete", "clustertrustbundles", {"group": "certificates.k8s.io"}),
    ],
)
def test_service_account_can(
    client: Client, verb: str, resource: str, kwargs: dict[str, str]
) -> None:
    assert identities.can(client, SUBJECT, verb, resource, **kwargs)


@pytest.mark.parametrize("directory", ["default", "prometheus", "samples"])
def test_every_manifest_passes_server_side_dry_run(
    client: Client, namespace: str, directory: str
) -> None:
    if directory == "prometheus":
        ensure_monitoring_crds(client)
    ensure_namespace(client, NS)
    objects = render(CONFIG / directory)
    assert objects
    target = namespace if directory == "samples" else None
    for obj in objects:
        answer = apply(client, obj, dry_run=True, namespace=target)
        assert answer["kind"] == obj["kind"]
