"""`run --metrics-secure` against the real API server: /metrics over TLS to a token the
API server authenticates and authorizes for get on /metrics (200), not to one it does
not authorize (403), nor without a token or with a made-up one (401) — as
kube-controller-manager serves its metrics; and config/metrics-secure's RBAC lets the
controller's ServiceAccount ask those questions."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import ControlPlane
from controlplane.process import SignerProcess
from kube.client import ApiError, Client, is_not_found
from tests.integration import identities
from tests.integration.manager_process import signer_with_a_new_ca
from tests.integration.manifests import apply, ensure_namespace
from tests.unit.deploy.kustomize import CONFIG, render

RBAC = "/apis/rbac.authorization.k8s.io/v1"
READER_ROLE = "service-serving-signer-metrics-reader"


def scrape(signer: SignerProcess, token: str | None) -> tuple[int, str, str | None]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the self-signed certificate made at start
    request = urllib.request.Request(f"https://{signer.host}:{signer.metrics_port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return resp.status, resp.read().decode(), None
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("WWW-Authenticate")


@pytest.fixture
def metrics_rbac(client: Client) -> Iterator[list[dict[str, object]]]:
    """config/metrics-secure's RBAC, applied as shipped; removed afterwards."""
    objects = [o for o in render(CONFIG / "metrics-secure") if o["kind"].startswith("Cluster")]
    for obj in objects:
        apply(client, obj, dry_run=False)
    yield objects
    for obj in objects:
        kind = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
        try:
            client.delete(f"{RBAC}/{kind}/{obj['metadata']['name']}")
        except ApiError as err:
            if not is_not_found(err):
                raise


def test_only_an_authorized_token_gets_the_metrics(
    control_plane: ControlPlane,
    client: Client,
    namespace: str,
    tmp_path: Path,
    metrics_rbac: list[dict[str, object]],
) -> None:
    for name in ("prometheus", "other"):
        client.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
    binding = f"metrics-reader-{uuid.uuid4().hex[:6]}"
    client.create(
        f"{RBAC}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": READER_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
        },
    )
    reader = identities.service_account_token(client, namespace, "prometheus")
    other = identities.service_account_token(client, namespace, "other")
    signer = signer_with_a_new_ca(
        control_plane,
        tmp_path,
        "--metrics-secure=true",
        f"--leader-elect-resource-namespace={namespace}",
    )
    try:
        signer.wait_ready(60)
        code, body, _ = scrape(signer, reader)
        assert code == 200, body
        assert "service_serving_ca_controller_requests_total" in body
        code, body, _ = scrape(signer, other)
        print(f"\nunauthorized: {code} {body.strip()}")
        assert code == 403, body
        assert f"system:serviceaccount:{namespace}:other" in body
        assert scrape(signer, None)[::2] == (401, "Bearer")
        assert scrape(signer, "made-up-token")[0] == 401
        # The health port stays plain HTTP for kubelet's probes.
        assert signer.get("/healthz")[0] == 200
    finally:
        signer.terminate()
        assert signer.wait() == 0
        client.delete(f"{RBAC}/clusterrolebindings/{binding}")


def test_config_metrics_secure_lets_the_controller_ask_and_nothing_more(
    client: Client, metrics_rbac: list[dict[str, object]]
) -> None:
    ensure_namespace(client, identities.PRODUCT_NAMESPACE)
    subject = identities.CONTROLLER_SUBJECT
    assert identities.can(client, subject, "create", "tokenreviews", group="authentication.k8s.io")
    assert identities.can(
        client, subject, "create", "subjectaccessreviews", group="authorization.k8s.io"
    )
    assert not identities.can(
        client, subject, "create", "localsubjectaccessreviews", group="authorization.k8s.io"
    )
    assert not identities.can(
        client, subject, "list", "tokenreviews", group="authentication.k8s.io"
    )
