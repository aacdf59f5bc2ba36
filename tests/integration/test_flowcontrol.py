"""The opt-in API Priority and Fairness component (config/flowcontrol) on the real
kube-apiserver: its objects pass server-side dry-run with strict field validation, and
once applied, the signer's ServiceAccount's requests are classified into its level — read
from the `X-Kubernetes-PF-PriorityLevel-UID` header kube-apiserver puts on every answer —
where without it they go to `workload-low` (the bootstrap `service-accounts` schema). The
chart renders the same objects (tests/integration/test_chart.py, every option on)."""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Iterator

import pytest

from controlplane import ControlPlane
from kube.client import Client
from tests.integration.manager_process import eventually
from tests.integration.manifests import (
    apply,
    create_or_replace,
    ensure_namespace,
    object_path,
)
from tests.unit.deploy.kustomize import CONFIG, find, render

pytestmark = pytest.mark.integration

COMPONENT = render(CONFIG / "flowcontrol")
SCHEMA = find(COMPONENT, "FlowSchema")
LEVEL = find(COMPONENT, "PriorityLevelConfiguration")
ACCOUNT = SCHEMA["spec"]["rules"][0]["subjects"][0]["serviceAccount"]


def level_of_request(plane: ControlPlane, token: str) -> str:
    """The UID of the priority level kube-apiserver put a GET by `token` in."""
    context = ssl.create_default_context(cafile=str(plane.files["serving-ca.crt"]))
    request = urllib.request.Request(
        f"{plane.host}/api", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return str(answer.headers["X-Kubernetes-PF-PriorityLevel-UID"])


def level_uid(client: Client, name: str) -> str:
    path = f"/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/{name}"
    return str(client.get(path)["metadata"]["uid"])


@pytest.fixture
def token(client: Client) -> str:
    """A token of the ServiceAccount the component names (config/rbac's)."""
    ensure_namespace(client, ACCOUNT["namespace"])
    create_or_replace(
        client,
        f"/api/v1/namespaces/{ACCOUNT['namespace']}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT["name"]}},
    )
    issued = client.create(
        f"/api/v1/namespaces/{ACCOUNT['namespace']}/serviceaccounts/{ACCOUNT['name']}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(issued["status"]["token"])


@pytest.fixture
def applied(client: Client) -> Iterator[None]:
    for obj in (LEVEL, SCHEMA):
        apply(client, obj, dry_run=False)
    try:
        yield
    finally:
        for obj in (SCHEMA, LEVEL):
            client.delete(object_path(obj))


def test_the_component_passes_server_side_dry_run(client: Client) -> None:
    for obj in COMPONENT:
        applied = apply(client, obj, dry_run=True)
        assert applied["kind"] == obj["kind"]


def test_without_it_the_signer_is_in_workload_low(
    control_plane: ControlPlane, client: Client, token: str
) -> None:
    assert level_of_request(control_plane, token) == level_uid(client, "workload-low")


def test_with_it_the_signer_is_in_its_workload_high_level(
    control_plane: ControlPlane, client: Client, token: str, applied: None
) -> None:
    ours = level_uid(client, LEVEL["metadata"]["name"])
    # kube-apiserver's APF configuration controller picks the new objects up on its own.
    assert eventually(lambda: level_of_request(control_plane, token) == ours, 30)
    assert level_of_request(control_plane, token) != level_uid(client, "workload-low")
