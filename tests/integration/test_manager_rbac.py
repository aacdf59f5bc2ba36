"""config/ against the real API server (issue 5, must-show 2): with only config/rbac
applied, the controller running as its ServiceAccount (token from the TokenRequest API)
issues certificates and publishes the bundle; SubjectAccessReviews show what it cannot
do; every manifest under config/ passes server-side dry-run."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from kube.client import ApiError, Client, is_already_exists
from signer.ca import write_ca
from tests.integration.manager_process import (
    PRODUCT_SIGNER,
    SignerProcess,
    eventually,
    issue_one,
    wait_issued,
)
from tests.unit.manager.kustomize import CONFIG, render

pytestmark = pytest.mark.integration

NS = "service-serving-signer"
SA_USER = f"system:serviceaccount:{NS}:service-serving-signer"
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"]

# kind → (API path prefix, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "ServiceMonitor": ("/apis/monitoring.coreos.com/v1", "servicemonitors", True),
    "PrometheusRule": ("/apis/monitoring.coreos.com/v1", "prometheusrules", True),
}


def object_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    prefix, plural, namespaced = RESOURCES[obj["kind"]]
    name = obj["metadata"]["name"]
    if namespaced:
        ns = namespace or obj["metadata"]["namespace"]
        return f"{prefix}/namespaces/{ns}/{plural}/{name}"
    return f"{prefix}/{plural}/{name}"


def apply(
    client: Client, obj: dict[str, Any], *, dry_run: bool, namespace: str | None = None
) -> dict[str, Any]:
    """Server-side apply (strict field validation), optionally as a dry run."""
    body = dict(obj)
    if namespace and RESOURCES[obj["kind"]][2]:
        body["metadata"] = {**obj["metadata"], "namespace": namespace}
    params = {"fieldManager": "test", "force": "true", "fieldValidation": "Strict"}
    if dry_run:
        params["dryRun"] = "All"
    return client.patch(
        object_path(body, namespace),
        body,
        patch_type="application/apply-patch+yaml",
        params=params,
    )


def ensure_namespace(client: Client, name: str) -> None:
    try:
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except ApiError as err:
        if not is_already_exists(err):
            raise


def can(
    client: Client,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str = "",
    name: str = "",
    subresource: str = "",
) -> bool:
    review = client.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": SA_USER,
                "groups": SA_GROUPS,
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    "namespace": namespace,
                    "name": name,
                    "subresource": subresource,
                },
            },
        },
    )
    return bool(review["status"].get("allowed"))


@pytest.fixture(scope="module")
def rbac_applied(client: Client) -> None:
    ensure_namespace(client, NS)
    for obj in render(CONFIG / "rbac"):
        apply(client, obj, dry_run=False, namespace=NS)


def service_account_token(client: Client) -> str:
    answer = client.create(
        f"/api/v1/namespaces/{NS}/serviceaccounts/service-serving-signer/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    return str(answer["status"]["token"])


@pytest.mark.usefixtures("rbac_applied")
def test_runs_as_its_service_account_with_only_config_rbac(
    control_plane: ControlPlane,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    tmp_path: Path,
) -> None:
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "sa.kubeconfig", token=service_account_token(client)
    )
    files = write_ca(tmp_path / "ca")
    signer = SignerProcess(
        kubeconfig,
        files.key.parent,
        tmp_path / "signer.log",
        f"--leader-elect-resource-namespace={NS}",
        "--leader-elect-resource-name=rbac-test",
    )
    try:
        assert eventually(signer.ready, 30), "\n".join(signer.log_lines()[-20:])
        assert eventually(signer.leading, 15)
        kubelet.create_service("web", namespace, selector={"app": "web"})
        name = issue_one(client, kubelet, namespace, "web-0")
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
        forbidden = [line for line in signer.log_lines() if "forbidden" in line.lower()]
        assert not forbidden, forbidden[:3]
    finally:
        assert signer.stop() == 0


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
    assert not can(client, verb, resource, **kwargs)


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
        ("update", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        ("delete", "clustertrustbundles", {"group": "certificates.k8s.io"}),
    ],
)
def test_service_account_can(
    client: Client, verb: str, resource: str, kwargs: dict[str, str]
) -> None:
    assert can(client, verb, resource, **kwargs)


MONITORING_CRDS = [("servicemonitors", "ServiceMonitor"), ("prometheusrules", "PrometheusRule")]


def ensure_monitoring_crds(client: Client) -> None:
    """Schemaless stand-ins for the Prometheus Operator CRDs (kind/metadata checked only)."""
    for plural, kind in MONITORING_CRDS:
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.monitoring.coreos.com"},
            "spec": {
                "group": "monitoring.coreos.com",
                "scope": "Namespaced",
                "names": {"plural": plural, "kind": kind, "singular": kind.lower()},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
        try:
            client.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except ApiError as err:
            if not is_already_exists(err):
                raise
    for plural, _ in MONITORING_CRDS:
        assert eventually(functools.partial(_served, client, plural), 20)


def _served(client: Client, plural: str) -> bool:
    try:
        client.get(f"/apis/monitoring.coreos.com/v1/{plural}")
    except ApiError:
        return False
    return True


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
