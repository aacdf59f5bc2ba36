"""Shipped manifests on the test plane: server-side apply with strict field validation,
namespaces, and schemaless stand-ins for the Prometheus Operator CRDs."""

from __future__ import annotations

import functools
from typing import Any

from kube.client import ApiError, Client, is_already_exists
from tests.integration.manager_process import eventually

# kind → (API path prefix, plural, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "ServiceMonitor": ("/apis/monitoring.coreos.com/v1", "servicemonitors", True),
    "PrometheusRule": ("/apis/monitoring.coreos.com/v1", "prometheusrules", True),
    "FlowSchema": ("/apis/flowcontrol.apiserver.k8s.io/v1", "flowschemas", False),
    "PriorityLevelConfiguration": (
        "/apis/flowcontrol.apiserver.k8s.io/v1",
        "prioritylevelconfigurations",
        False,
    ),
    "ValidatingAdmissionPolicy": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicies",
        False,
    ),
    "ValidatingAdmissionPolicyBinding": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingadmissionpolicybindings",
        False,
    ),
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


def create_or_replace(client: Client, collection: str, body: dict[str, Any]) -> None:
    """Create `body` in `collection`, or replace the object of that name (as of its
    current resourceVersion) that an earlier test left."""
    try:
        client.create(collection, body)
    except ApiError as err:
        if not is_already_exists(err):
            raise
        path = f"{collection}/{body['metadata']['name']}"
        version = client.get(path)["metadata"]["resourceVersion"]
        client.replace(path, {**body, "metadata": {**body["metadata"], "resourceVersion": version}})


def ensure_namespace(client: Client, name: str) -> None:
    try:
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except ApiError as err:
        if not is_already_exists(err):
            raise


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
