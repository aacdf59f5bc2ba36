"""The opt-in ValidatingAdmissionPolicy component (config/injector-admission-policy,
issue 30): with it, the injector's ServiceAccount — a stolen token of it — may change only
what the injector writes: caBundle on opted-in webhook configurations (not their
services, rules or failure policy), and `ca.crt` (not other keys) on labelled ConfigMaps.
Against the real kube-apiserver, as that ServiceAccount."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import ControlPlane
from injector.targets import ANNOTATION
from kube.client import ApiError, Client
from tests.integration.identities import service_account_token
from tests.integration.injector_harness import VWC_PATH, b64, delete_quietly, validating_webhook
from tests.integration.manifests import apply as apply_manifest
from tests.integration.manifests import ensure_namespace
from tests.integration.signer_harness import eventually
from tests.integration.test_injector_rbac import NS, RBAC_KINDS, SA
from tests.unit.deploy.kustomize import CONFIG, render
from trust.consumers import LABEL

pytestmark = pytest.mark.integration

POLICY = CONFIG / "injector-admission-policy" / "policy.yaml"
JSON_PATCH = "application/json-patch+json"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PATHS = {
    "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings",
}


@pytest.fixture
def injector_client(
    control_plane: ControlPlane, client: Client, tmp_path: Path
) -> Iterator[Client]:
    """A client with the injector's ServiceAccount token and config/injector's RBAC, and
    the policy component installed (removed afterwards: it is cluster-wide)."""
    ensure_namespace(client, NS)
    for obj in render(CONFIG / "injector"):
        if obj["kind"] in RBAC_KINDS:
            apply_manifest(client, obj, dry_run=False, namespace=NS)
    policies = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]
    for obj in policies:
        client.create(PATHS[obj["kind"]], obj)
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "injector.kubeconfig", token=service_account_token(client, NS, SA)
    )
    try:
        yield Client.from_kubeconfig(str(kubeconfig))
    finally:
        for obj in reversed(policies):
            delete_quietly(client, PATHS[obj["kind"]], obj["metadata"]["name"])


def refused(write: Any) -> str:
    """The API's refusal of `write()` ("" when it succeeded)."""
    try:
        write()
    except ApiError as err:
        return str(err)
    return ""


def patch(client: Client, path: str, *ops: dict[str, Any]) -> Any:
    return client.patch(path, list(ops), patch_type=JSON_PATCH)


def test_the_injector_service_account_may_change_only_what_the_injector_writes(
    client: Client, injector_client: Client, namespace: str
) -> None:
    opted = f"policy-{uuid.uuid4().hex[:8]}"
    plain = f"policy-plain-{uuid.uuid4().hex[:8]}"
    selector = '{"signerName": "example.com/x", "labelSelector": {}}'
    client.create(VWC_PATH, validating_webhook(opted, namespace, "svc", selector))
    client.create(VWC_PATH, validating_webhook(plain, namespace, "svc", None))
    try:
        ca = "/webhooks/0/clientConfig/caBundle"
        service = "/webhooks/0/clientConfig/service/name"
        # The policy takes effect once kube-apiserver has loaded it.
        eventually(
            lambda: (
                "the injector may change only webhooks"
                in refused(
                    lambda: patch(
                        injector_client,
                        f"{VWC_PATH}/{opted}",
                        {"op": "replace", "path": service, "value": f"x{uuid.uuid4().hex[:6]}"},
                    )
                )
            ),
            timeout=30,
            what="the policy to refuse a changed webhook service",
        )
        # What the injector does is allowed: a caBundle on the opted-in configuration,
        # its own annotation, and dropping its managedFields entry.
        patch(
            injector_client,
            f"{VWC_PATH}/{opted}",
            {"op": "add", "path": ca, "value": b64("anchors")},
            {
                "op": "add",
                "path": "/metadata/annotations/service-serving-signer~1injected",
                "value": "{}",
            },
        )
        # A stolen token cannot widen the rules, fail open, or inject where not asked.
        for path, value in (
            ("/webhooks/0/failurePolicy", "Ignore"),
            ("/webhooks/0/rules/0/operations", ["*"]),
        ):
            assert "the injector may change only webhooks" in refused(
                lambda p=path, v=value: patch(
                    injector_client, f"{VWC_PATH}/{opted}", {"op": "replace", "path": p, "value": v}
                )
            )
        assert "only where service-serving-signer/ca-bundle-from asks" in refused(
            lambda: patch(
                injector_client, f"{VWC_PATH}/{plain}", {"op": "add", "path": ca, "value": b64("x")}
            )
        )
        assert "only its own annotations" in refused(
            lambda: patch(
                injector_client,
                f"{VWC_PATH}/{opted}",
                {"op": "remove", "path": f"/metadata/annotations/{ANNOTATION.replace('/', '~1')}"},
            )
        )
        # An administrator is not matched.
        patch(client, f"{VWC_PATH}/{opted}", {"op": "replace", "path": service, "value": "other"})
    finally:
        delete_quietly(client, VWC_PATH, opted)
        delete_quietly(client, VWC_PATH, plain)


def test_on_config_maps_only_ca_crt_of_a_labelled_one(
    client: Client, injector_client: Client, namespace: str
) -> None:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    for name, labels in (("trust", {LABEL: "true"}), ("app", {})):
        client.create(
            base,
            {
                "metadata": {"name": name, "labels": labels},
                "data": {"ca.crt": "old", "app.conf": "x"},
            },
        )
    eventually(
        lambda: (
            "the injector may change only data[ca.crt]"
            in refused(
                lambda: patch(
                    injector_client,
                    f"{base}/trust",
                    {"op": "replace", "path": "/data/app.conf", "value": uuid.uuid4().hex},
                )
            )
        ),
        timeout=30,
        what="the policy to refuse another key",
    )
    patch(
        injector_client, f"{base}/trust", {"op": "replace", "path": "/data/ca.crt", "value": "new"}
    )
    assert client.get(f"{base}/trust")["data"] == {"ca.crt": "new", "app.conf": "x"}
    assert "only into ConfigMaps labelled" in refused(
        lambda: patch(
            injector_client,
            f"{base}/app",
            {"op": "replace", "path": "/data/ca.crt", "value": "new"},
        )
    )
    assert "only its own labels" in refused(
        lambda: patch(
            injector_client,
            f"{base}/trust",
            {"op": "add", "path": "/metadata/labels/team", "value": "attacker"},
        )
    )


def test_the_injector_works_under_the_policy(
    control_plane: ControlPlane,
    client: Client,
    injector_client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The component refuses nothing the injector itself does: first writes (caBundle,
    `ca.crt`, its annotation and mark label) and releases."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from tests.integration.manager_process import SignerProcess
    from tests.integration.test_publisher import ctb_path, ctb_version
    from trust.bundle import bundle_name, normalize_bundle
    from trust.ca import generate_ca

    signer = f"p{uuid.uuid4().hex[:8]}.example.com/roots"
    pem = normalize_bundle(generate_ca("policy root").cert.public_bytes(Encoding.PEM))
    ctb = bundle_name(signer, pem)
    client.create(
        ctb_path(client),
        {
            "apiVersion": f"certificates.k8s.io/{ctb_version(client)}",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": ctb},
            "spec": {"signerName": signer, "trustBundle": pem},
        },
    )
    selector = f'{{"signerName": "{signer}", "labelSelector": {{}}}}'
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    client.create(
        base,
        {
            "metadata": {
                "name": "trust",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: selector},
            },
            "data": {"app.conf": "x"},
        },
    )
    # After the ConfigMap: the webhook (failurePolicy Fail, no server) refuses creates.
    hook = f"policy-run-{uuid.uuid4().hex[:8]}"
    client.create(VWC_PATH, validating_webhook(hook, namespace, "svc", selector))
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "sa.kubeconfig", token=service_account_token(client, NS, SA)
    )
    process = SignerProcess(
        kubeconfig,
        None,
        tmp_path / "injector.log",
        "--controllers=injector",
        f"--leader-elect-resource-namespace={NS}",
        f"--leader-elect-resource-name=policy-{uuid.uuid4().hex[:6]}",
        signer_name=None,
    )
    try:
        eventually(
            lambda: (client.get(f"{base}/trust").get("data") or {}).get("ca.crt") == pem,
            timeout=60,
            what="ca.crt written under the policy",
        )
        eventually(
            lambda: (
                client.get(f"{VWC_PATH}/{hook}")["webhooks"][0]["clientConfig"].get("caBundle")
                == b64(pem)
            ),
            timeout=30,
            what="caBundle written under the policy",
        )
        # The release (label removed) passes the policy too.
        client.patch(f"{base}/trust", {"metadata": {"labels": {LABEL: None}}})
        eventually(
            lambda: (
                "service-serving-signer/ca-injected"
                not in (client.get(f"{base}/trust")["metadata"].get("labels") or {})
            ),
            timeout=30,
            what="the release under the policy",
        )
        denied = [line for line in process.log_lines() if "denied request" in line]
        assert not denied, denied[:3]
    finally:
        assert process.stop() == 0
        delete_quietly(client, VWC_PATH, hook)
        client.delete(f"{ctb_path(client)}/{ctb}")
