"""The publisher's opt-in unlinked ClusterTrustBundle (no spec.signerName) against the
real kube-apiserver: kept equal to the stable bundle through a rotation, deleted when the
opt-in is turned off; and config/unlinked-bundle-policy, which puts back the check the API
makes only for signer-linked bundles: who may not `attest` for the signer cannot create,
replace or delete it, who may can, and other colon-free names stay ordinary RBAC's."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import ControlPlane
from kube.client import ApiError, Client, is_not_found
from tests.integration.identities import service_account_token
from tests.integration.manifests import ensure_namespace
from tests.integration.publisher_harness import (
    RunningPublisher,
    bundles_of,
    ctb_path,
    ctb_version,
)
from tests.integration.signer_harness import eventually
from tests.unit.deploy.kustomize import CONFIG
from troubleshoot.leasehealth import BundleState, read_health
from trust.bundle import anchor_ders, stable_bundle_name, unlinked_bundle_name
from trust.ca import cert_pem, generate_ca, write_ca

POLICY = CONFIG / "unlinked-bundle-policy" / "policy.yaml"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
PATHS = {
    "ValidatingAdmissionPolicy": f"{ADMISSION}/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": f"{ADMISSION}/validatingadmissionpolicybindings",
}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SHIPPED_SIGNER = "kubernetes.io/service-serving"


@pytest.fixture
def signer_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}.example.com/serving"


def _get(client: Client, path: str) -> dict[str, Any] | None:
    try:
        return client.get(path)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise


def _delete(client: Client, path: str) -> None:
    try:
        client.delete(path)
    except ApiError as err:
        if not is_not_found(err):
            raise


def test_the_unlinked_bundle_follows_the_stable_one_and_goes_when_turned_off(
    plane_client: Client, tmp_path: Path, signer_name: str
) -> None:
    client = plane_client
    old, new = generate_ca("unlinked old"), generate_ca("unlinked new")
    write_ca(tmp_path, ca=old)
    unlinked = f"{ctb_path(client)}/{unlinked_bundle_name(signer_name)}"
    stable = f"{ctb_path(client)}/{stable_bundle_name(signer_name)}"

    def holds(path: str, *cas: Any) -> bool:
        obj = _get(client, path)
        want = anchor_ders(b"".join(cert_pem(ca.cert) for ca in cas).decode())
        return obj is not None and anchor_ders(obj["spec"]["trustBundle"]) == want

    publisher = RunningPublisher(client, tmp_path, signer_name, publish_unlinked=True).start()
    try:
        eventually(lambda: holds(unlinked, old), what="the unlinked bundle")
        obj = client.get(unlinked)
        assert "signerName" not in obj["spec"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "service-serving-signer"
        linked = {b["metadata"]["name"] for b in bundles_of(client, signer_name)}
        assert unlinked_bundle_name(signer_name) not in linked
        # A rotation's first step: the file gains the new root; both bundles follow.
        (tmp_path / "trust-bundle.pem").write_bytes(cert_pem(old.cert) + cert_pem(new.cert))
        eventually(lambda: holds(stable, old, new) and holds(unlinked, old, new), timeout=30)
        # `status` reads it by name from the real API server: named, lacking nothing.
        shown = _health_bundle(client, signer_name)
        assert shown.unlinked == unlinked_bundle_name(signer_name)
        assert shown.unlinked_lacks == ()
    finally:
        publisher.close()
    # Turned off: the unlinked bundle goes (it would otherwise keep a root removed later),
    # the signer's own bundles stay.
    publisher = RunningPublisher(client, tmp_path, signer_name).start()
    try:
        eventually(lambda: _get(client, unlinked) is None, timeout=30, what="its deletion")
        assert holds(stable, old, new)
        assert _health_bundle(client, signer_name).unlinked is None
    finally:
        publisher.close()
        for bundle in bundles_of(client, signer_name):
            _delete(client, f"{ctb_path(client)}/{bundle['metadata']['name']}")


def _health_bundle(client: Client, signer_name: str) -> BundleState:
    """The bundles as `status` shows them."""
    health = read_health(
        client,
        signer_name=signer_name,
        bundle_version=ctb_version(client),
        lease_namespace="default",
        lease_name="no-such-lease",
    )
    return health.bundle


def _policy_for(signer: str, suffix: str) -> list[dict[str, Any]]:
    """config/unlinked-bundle-policy/policy.yaml for `signer`, as the chart renders it."""
    text = POLICY.read_text()
    domain = signer.split("/")[0]
    text = text.replace(unlinked_bundle_name(SHIPPED_SIGNER), unlinked_bundle_name(signer))
    text = text.replace(SHIPPED_SIGNER, signer).replace("kubernetes.io/*", f"{domain}/*")
    text = text.replace("service-serving-signer-unlinked-bundle", f"unlinked-bundle-{suffix}")
    return [d for d in yaml.safe_load_all(text) if d]


def _refusal(write: Callable[[], Any]) -> str:
    try:
        write()
    except ApiError as err:
        return str(err)
    return ""


def test_only_who_may_attest_for_the_signer_writes_its_unlinked_bundle(
    plane: ControlPlane, plane_client: Client, tmp_path: Path, signer_name: str
) -> None:
    admin = plane_client
    suffix = uuid.uuid4().hex[:8]
    namespace = f"unlinked-{suffix}"
    ensure_namespace(admin, namespace)
    path = ctb_path(admin)
    name = unlinked_bundle_name(signer_name)
    pem = cert_pem(generate_ca("unlinked policy").cert).decode()
    other_pem = cert_pem(generate_ca("unlinked policy, another").cert).decode()
    version = path.split("/")[3]

    def bundle(bundle_name: str) -> dict[str, Any]:
        return {
            "apiVersion": f"certificates.k8s.io/{version}",
            "kind": "ClusterTrustBundle",
            "metadata": {"name": bundle_name},
            "spec": {"trustBundle": pem},
        }

    writes = {"apiGroups": ["certificates.k8s.io"], "resources": ["clustertrustbundles"]}
    writes["verbs"] = ["get", "create", "update", "delete"]
    attest = {
        "apiGroups": ["certificates.k8s.io"],
        "resources": ["signers"],
        "resourceNames": [signer_name],
        "verbs": ["attest"],
    }
    made: list[str] = []
    clients: dict[str, Client] = {}
    policies = _policy_for(signer_name, suffix)
    try:
        for who, rules in (("writer", [writes]), ("attester", [writes, attest])):
            role = f"unlinked-{who}-{suffix}"
            admin.create(
                f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": who}}
            )
            admin.create(f"{RBAC}/clusterroles", {"metadata": {"name": role}, "rules": rules})
            admin.create(
                f"{RBAC}/clusterrolebindings",
                {
                    "metadata": {"name": role},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": role,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": namespace}],
                },
            )
            made.append(role)
            kubeconfig = plane.write_kubeconfig(
                tmp_path / f"{who}.kubeconfig", token=service_account_token(admin, namespace, who)
            )
            clients[who] = Client.from_kubeconfig(str(kubeconfig))
        writer, attester = clients["writer"], clients["attester"]
        # Without the policy, RBAC on clustertrustbundles is all a bundle without a signer has.
        eventually(
            lambda: (
                not _refusal(lambda: writer.create(path, bundle(name), params={"dryRun": "All"}))
            )
        )
        for obj in policies:
            admin.create(PATHS[obj["kind"]], obj)
        eventually(
            lambda: (
                "ValidatingAdmissionPolicy"
                in _refusal(lambda: writer.create(path, bundle(name), params={"dryRun": "All"}))
            ),
            timeout=60,
            interval=0.25,
            what="the policy to be enforced",
        )
        refused = _refusal(lambda: writer.create(path, bundle(name)))
        assert "may write its unlinked ClusterTrustBundle" in refused, refused
        other = f"not-the-signers-{suffix}"
        assert not _refusal(lambda: writer.create(path, bundle(other), params={"dryRun": "All"}))
        created = attester.create(path, bundle(name))
        replaced = {**created, "spec": {"trustBundle": pem + other_pem}}
        assert "ValidatingAdmissionPolicy" in _refusal(
            lambda: writer.replace(f"{path}/{name}", replaced)
        )
        assert "ValidatingAdmissionPolicy" in _refusal(lambda: writer.delete(f"{path}/{name}"))
        attester.replace(f"{path}/{name}", replaced)
        attester.delete(f"{path}/{name}")
        assert _get(admin, f"{path}/{name}") is None
    finally:
        for obj in reversed(policies):
            _delete(admin, f"{PATHS[obj['kind']]}/{obj['metadata']['name']}")
        _delete(admin, f"{path}/{name}")
        for role in made:
            _delete(admin, f"{RBAC}/clusterrolebindings/{role}")
            _delete(admin, f"{RBAC}/clusterroles/{role}")
        _delete(admin, f"/api/v1/namespaces/{namespace}")
