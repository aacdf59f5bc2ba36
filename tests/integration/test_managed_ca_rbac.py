"""The managed CA's RBAC against the real API server: with only config/rbac and the Role of
config/managed-ca, the controller running as its ServiceAccount bootstraps the CA (a
create), watches the one Secret by name (list/watch with fieldSelector metadata.name,
authorised by resourceNames), issues, and rotates through stage and swap (updates, the
replicas' Lease reports); and SubjectAccessReviews show what it still cannot do."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from controlplane.process import eventually
from kube.client import ApiError, Client, is_not_found
from managedca.material import DEFAULT_SECRET_NAME
from tests.integration import identities
from tests.integration.managed_ca_harness import phase
from tests.integration.manager_process import issue_one, signer_with_token, wait_issued
from tests.integration.manifests import apply, ensure_namespace
from tests.unit.deploy.kustomize import CONFIG, render

pytestmark = pytest.mark.integration

NS = identities.PRODUCT_NAMESPACE
SA = identities.CONTROLLER_SA
SUBJECT = identities.CONTROLLER_SUBJECT
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{DEFAULT_SECRET_NAME}"


@pytest.fixture(scope="module")
def managed_rbac_applied(client: Client) -> None:
    ensure_namespace(client, NS)
    for obj in [*render(CONFIG / "rbac"), *render(CONFIG / "managed-ca")]:
        apply(client, obj, dry_run=False, namespace=NS)


def _phase(client: Client) -> str | None:
    return phase(client, SECRET_PATH)


@pytest.mark.usefixtures("managed_rbac_applied")
def test_bootstraps_issues_and_rotates_as_its_service_account(
    control_plane: ControlPlane,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    tmp_path: Path,
) -> None:
    try:
        client.delete(SECRET_PATH)  # a CA left by an earlier test of this session
    except ApiError as err:
        if not is_not_found(err):
            raise
    # A bundle an earlier test published for this signer name would be adopted as a
    # previous root (phase Retiring, by design); this test starts from nothing.
    ctbs = "/apis/certificates.k8s.io/v1/clustertrustbundles"
    listed = client.get(ctbs, {"fieldSelector": "spec.signerName=kubernetes.io/service-serving"})
    for bundle in listed["items"]:
        client.delete(f"{ctbs}/{bundle['metadata']['name'].replace(':', '%3A')}")
    with signer_with_token(
        control_plane,
        identities.service_account_token(client, NS, SA),
        tmp_path,
        None,
        "--ca-mode=managed",
        f"--leader-elect-resource-namespace={NS}",
        "--leader-elect-resource-name=managed-rbac-test",
        "--managed-ca-propagation-delay=2s",
        "--managed-ca-allow-short-propagation-delay",
    ) as signer:
        assert eventually(lambda: _phase(client) == "Stable", 30), signer.log_lines()[-20:]
        kubelet.create_service("web", namespace, selector={"app": "web"})
        name = issue_one(kubelet, namespace, "web-0")
        assert wait_issued(client, namespace, name, 15), signer.log_lines()[-20:]

        client.patch(
            SECRET_PATH,
            {
                "metadata": {
                    "annotations": {
                        "service-serving-signer/ca-rotate-requested-at": ("2026-01-01T00:00:00Z")
                    }
                }
            },
        )
        assert eventually(lambda: _phase(client) == "Retiring", 30), signer.log_lines()[-20:]


@pytest.mark.usefixtures("managed_rbac_applied")
@pytest.mark.parametrize(
    ("verb", "resource", "kwargs"),
    [
        ("get", "secrets", {"namespace": NS, "name": "another"}),
        ("list", "secrets", {"namespace": NS}),
        ("watch", "secrets", {"namespace": NS}),
        ("update", "secrets", {"namespace": NS, "name": "service-serving-signer-ca"}),
        ("patch", "secrets", {"namespace": NS, "name": DEFAULT_SECRET_NAME}),
        ("delete", "secrets", {"namespace": NS, "name": DEFAULT_SECRET_NAME}),
        ("create", "secrets", {"namespace": "default"}),
        ("list", "leases", {"group": "coordination.k8s.io", "namespace": "kube-system"}),
    ],
)
def test_managed_ca_service_account_cannot(
    client: Client, verb: str, resource: str, kwargs: dict[str, str]
) -> None:
    assert not identities.can(client, SUBJECT, verb, resource, **kwargs)
