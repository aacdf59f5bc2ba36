"""The managed CA's RBAC against the real API server: with only config/rbac and the Role of
config/managed-ca, the controller running as its ServiceAccount bootstraps the CA (a
create), watches the one Secret by name (list/watch with fieldSelector metadata.name,
authorised by resourceNames), issues, and rotates through stage and swap (updates, the
replicas' Lease reports); SubjectAccessReviews show what it still cannot do; and no other
identity — the injector's ServiceAccount, a tenant's namespace admin — can write the
Leases the rotation's gates read (the leader Lease, the replicas' reports)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from controlplane.process import eventually
from kube.client import ApiError, Client, is_not_found
from managedca.material import DEFAULT_SECRET_NAME
from tests.integration import identities
from tests.integration.injector_harness import LEASE as INJECTOR_LEASE
from tests.integration.injector_harness import RBAC_KINDS as INJECTOR_KINDS
from tests.integration.injector_harness import SA as INJECTOR_SA
from tests.integration.managed_ca_harness import phase
from tests.integration.manager_process import issue_one, signer_with_token, wait_issued
from tests.integration.manifests import apply, ensure_namespace
from tests.unit.deploy.kustomize import CONFIG, render

NS = identities.PRODUCT_NAMESPACE
SA = identities.CONTROLLER_SA
SUBJECT = identities.CONTROLLER_SUBJECT
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{DEFAULT_SECRET_NAME}"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


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
    # A CA left by an earlier test of this session; and the injector's report Lease the
    # injector's own tests leave here (shipped, or written then stale): with it, the
    # rotation would rightly wait for an injector that no longer runs.
    for leftover in (SECRET_PATH, f"{LEASES}/service-serving-signer-injector-convergence"):
        try:
            client.delete(leftover)
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
        "--leader-elect-resource-name=service-serving-signer",
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
def test_managed_ca_service_account_may_only_read_the_file_mode_ca_secret(
    client: Client,
) -> None:
    """A move from file mode adopts the file-mode CA (managedca/adopt.py): get, by name;
    nothing else on it."""
    file_ca = {"namespace": NS, "name": "service-serving-signer-ca"}
    assert identities.can(client, SUBJECT, "get", "secrets", **file_ca)
    for verb in ("update", "patch", "delete"):
        assert not identities.can(client, SUBJECT, verb, "secrets", **file_ca)


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


REPORT = f"{DEFAULT_SECRET_NAME}-replica-0123456789ab"  # a replica's report's name


def _lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"service-serving-signer/managed-ca-report": DEFAULT_SECRET_NAME},
            "annotations": {"service-serving-signer/ready-to-sign": ""},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 2147483647},
    }


@pytest.fixture(scope="module")
def injector_applied(client: Client) -> None:
    ensure_namespace(client, NS)
    for obj in render(CONFIG / "injector"):
        if obj["kind"] in INJECTOR_KINDS:
            apply(client, obj, dry_run=False, namespace=NS)


@pytest.fixture(scope="module")
def tenant_admin(client: Client) -> Iterator[Client]:
    """A token of a ServiceAccount that is `admin` of its own namespace (a tenant)."""
    tenant = f"tenant-{uuid.uuid4().hex[:6]}"
    ensure_namespace(client, tenant)
    client.create(
        f"/api/v1/namespaces/{tenant}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "owner"}},
    )
    client.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{tenant}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "owner-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "owner", "namespace": tenant}],
        },
    )
    yield client.with_token(identities.service_account_token(client, tenant, "owner"))
    client.delete(f"/api/v1/namespaces/{tenant}")


def _refused(write: Any) -> bool:
    try:
        write()
    except ApiError as err:
        return err.status == 403
    return False


def _writes(as_: Client) -> dict[str, Any]:
    """Every way to change what the gates read: take the leader Lease, rewrite or plant a
    replica report (hide a replica, hold the swap for ever), delete one."""
    return {
        "create a report": lambda: as_.create(LEASES, _lease(REPORT, "forged")),
        "replace the leader Lease": lambda: as_.replace(
            f"{LEASES}/service-serving-signer", _lease("service-serving-signer", "forged")
        ),
        "patch the leader Lease": lambda: as_.patch(
            f"{LEASES}/service-serving-signer", {"spec": {"holderIdentity": "forged"}}
        ),
        "replace a report": lambda: as_.replace(f"{LEASES}/{REPORT}", _lease(REPORT, "forged")),
        "delete a report": lambda: as_.delete(f"{LEASES}/{REPORT}"),
    }


@pytest.mark.usefixtures("managed_rbac_applied", "injector_applied")
def test_the_injectors_token_cannot_write_the_signers_leases_only_its_own(
    client: Client,
) -> None:
    injector = client.with_token(identities.service_account_token(client, NS, INJECTOR_SA))
    refused = {what: _refused(write) for what, write in _writes(injector).items()}
    assert all(refused.values()), refused
    # The same token does write its own shipped Lease: the refusals are RBAC's.
    own = injector.get(f"{LEASES}/{INJECTOR_LEASE}-convergence")
    injector.replace(f"{LEASES}/{INJECTOR_LEASE}-convergence", own)
    assert _refused(lambda: injector.create(LEASES, _lease("injector-made", "x")))


@pytest.mark.usefixtures("managed_rbac_applied")
def test_a_tenants_namespace_admin_cannot_write_the_signers_leases(
    tenant_admin: Client,
) -> None:
    refused = {what: _refused(write) for what, write in _writes(tenant_admin).items()}
    assert all(refused.values()), refused
