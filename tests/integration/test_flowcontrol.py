"""The opt-in API Priority and Fairness component (config/flowcontrol) on the real
kube-apiserver of every tested version: its objects pass server-side dry-run with strict
field validation, and once applied kube-apiserver classifies each of the signer's flows
as intended — read from the `X-Kubernetes-PF-FlowSchema-UID` and
`X-Kubernetes-PF-PriorityLevel-UID` headers it puts on every answer: its Lease requests
(get, create, update) into the bootstrap `leader-election` level, everything else into its
own level; without the component both go to `workload-low` (the bootstrap
`service-accounts` schema). The chart renders the same objects
(tests/integration/test_chart.py, every option on)."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from controlplane import ControlPlane
from kube.client import Client
from kube.leases import leases_path
from tests.integration.manager_process import eventually
from tests.integration.manifests import (
    apply,
    create_or_replace,
    ensure_namespace,
    object_path,
)
from tests.unit.deploy.kustomize import CONFIG, find, render

COMPONENT = render(CONFIG / "flowcontrol")
SCHEMA = find(COMPONENT, "FlowSchema", "service-serving-signer")
LEASES_SCHEMA = find(COMPONENT, "FlowSchema", "service-serving-signer-leader-election")
LEVEL = find(COMPONENT, "PriorityLevelConfiguration")
ACCOUNT = SCHEMA["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
FLOWCONTROL = "/apis/flowcontrol.apiserver.k8s.io/v1"


def classified(plane: ControlPlane, token: str, path: str) -> tuple[str, str]:
    """The (FlowSchema UID, priority level UID) kube-apiserver gave a GET of `path` by
    `token` (the answer's status does not matter: a 404 is classified too)."""
    context = ssl.create_default_context(cafile=str(plane.files["serving-ca.crt"]))
    request = urllib.request.Request(
        f"{plane.host}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            headers = answer.headers
    except urllib.error.HTTPError as err:
        headers = err.headers
    return (
        str(headers["X-Kubernetes-PF-FlowSchema-UID"]),
        str(headers["X-Kubernetes-PF-PriorityLevel-UID"]),
    )


def uid(client: Client, kind: str, name: str) -> str:
    return str(client.get(f"{FLOWCONTROL}/{kind}/{name}")["metadata"]["uid"])


def a_lease(namespace: str) -> str:
    return f"{leases_path(namespace)}/service-serving-signer"


@pytest.fixture
def token(plane_client: Client) -> str:
    """A token of the ServiceAccount the component names (config/rbac's)."""
    client = plane_client
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
def applied(plane_client: Client) -> Iterator[None]:
    for obj in (LEVEL, SCHEMA, LEASES_SCHEMA):
        apply(plane_client, obj, dry_run=False)
    try:
        yield
    finally:
        for obj in (LEASES_SCHEMA, SCHEMA, LEVEL):
            plane_client.delete(object_path(obj))


def test_the_component_passes_server_side_dry_run(plane_client: Client) -> None:
    for obj in COMPONENT:
        applied = apply(plane_client, obj, dry_run=True)
        assert applied["kind"] == obj["kind"]


def test_without_it_every_flow_of_the_signer_is_in_workload_low(
    plane: ControlPlane, plane_client: Client, token: str
) -> None:
    low = uid(plane_client, "prioritylevelconfigurations", "workload-low")
    for path in ("/api", a_lease(ACCOUNT["namespace"])):
        assert classified(plane, token, path)[1] == low


def test_with_it_leases_go_to_leader_election_and_the_rest_to_the_signers_level(
    plane: ControlPlane, plane_client: Client, token: str, applied: None
) -> None:
    ours = (
        uid(plane_client, "flowschemas", SCHEMA["metadata"]["name"]),
        uid(plane_client, "prioritylevelconfigurations", LEVEL["metadata"]["name"]),
    )
    leases = (
        uid(plane_client, "flowschemas", LEASES_SCHEMA["metadata"]["name"]),
        uid(plane_client, "prioritylevelconfigurations", "leader-election"),
    )
    lease = a_lease(ACCOUNT["namespace"])
    # kube-apiserver's APF configuration controller picks the new objects up on its own.
    assert eventually(lambda: classified(plane, token, lease) == leases, 30)
    assert eventually(lambda: classified(plane, token, "/api") == ours, 30)
    assert classified(plane, token, f"/api/v1/namespaces/{ACCOUNT['namespace']}/pods") == ours
