"""config/injector against the real API server: with only the
component's RBAC applied, `service-serving-signer run --controllers=injector` (the real
CLI, no signing files) running as the injector's ServiceAccount injects a caBundle;
SubjectAccessReviews show it cannot read Secrets or do anything it does not need; the
component's manifests pass server-side dry-run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from injector.decide import REASON_INVALID_SELECTOR
from kube.client import Client
from tests.integration.identities import can, service_account_token
from tests.integration.injector_harness import (
    LEASE,
    NS,
    RBAC_KINDS,
    SA,
    SUBJECT,
    VWC_PATH,
    Issuer,
    b64,
    ca_bundles,
    delete_quietly,
    events_about,
    validating_webhook,
)
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.manifests import apply, ensure_namespace
from tests.unit.deploy.kustomize import CONFIG, render


@pytest.fixture(scope="module")
def injector_rbac(client: Client) -> None:
    ensure_namespace(client, NS)
    for obj in render(CONFIG / "injector"):
        if obj["kind"] in RBAC_KINDS:
            apply(client, obj, dry_run=False, namespace=NS)


@pytest.fixture
def vwc_name(client: Client) -> Iterator[str]:
    name = f"rbac-{uuid.uuid4().hex[:8]}"
    yield name
    delete_quietly(client, VWC_PATH, name)
    delete_quietly(client, VWC_PATH, f"{name}-bad")


@pytest.mark.usefixtures("injector_rbac")
def test_injects_as_its_service_account_with_only_its_rbac_and_no_signing_files(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path, vwc_name: str
) -> None:
    kubeconfig = control_plane.write_kubeconfig(
        tmp_path / "injector.kubeconfig", token=service_account_token(client, NS, SA)
    )
    with Issuer(client) as issuer:
        client.create(
            VWC_PATH, validating_webhook(vwc_name, namespace, "absent", issuer.selector())
        )
        # A bad annotation too: its Warning Event proves the Events permission.
        client.create(VWC_PATH, validating_webhook(f"{vwc_name}-bad", namespace, "absent", "{"))
        process = SignerProcess(  # no material flag: the injector needs none
            kubeconfig,
            None,
            tmp_path / "injector.log",
            "--controllers=injector",
            f"--leader-elect-resource-namespace={NS}",
            f"--leader-elect-resource-name={LEASE}",
            signer_name=None,
        )
        try:
            assert eventually(process.ready, 60), "\n".join(process.log_lines()[-20:])
            assert eventually(process.leading, 30), "\n".join(process.log_lines()[-20:])
            expected = b64(issuer.bundle())
            assert eventually(
                lambda: ca_bundles(client.get(f"{VWC_PATH}/{vwc_name}")) == [expected], 30
            ), "\n".join(process.log_lines()[-20:])
            assert eventually(
                lambda: bool(events_about(client, f"{vwc_name}-bad", REASON_INVALID_SELECTOR)), 30
            )
            injected = process.metric(
                "cabundle_injector_sync_total",
                'kind="ValidatingWebhookConfiguration",result="injected"',
            )
            assert injected is not None and injected >= 1
            # Only RBAC's refusals count: another test's namespace that is being deleted
            # also answers 403 to an Event, and that says nothing about this RBAC.
            forbidden = [
                line
                for line in process.log_lines()
                if "forbidden" in line.lower() and "being terminated" not in line
            ]
            assert not forbidden, forbidden[:3]
            assert not any(a.startswith("--service-serving-") for a in process.args)
        finally:
            assert process.stop() == 0


@pytest.mark.usefixtures("injector_rbac")
@pytest.mark.parametrize(
    ("verb", "resource", "attrs"),
    [
        ("get", "secrets", {"namespace": NS}),
        ("list", "secrets", {}),
        ("watch", "secrets", {"namespace": "kube-system"}),
        # It patches labelled ConfigMaps; it never creates, replaces or deletes one.
        ("create", "configmaps", {"namespace": NS}),
        ("update", "configmaps", {"namespace": "default"}),
        ("delete", "configmaps", {"namespace": "default"}),
        ("create", "validatingwebhookconfigurations", {"group": "admissionregistration.k8s.io"}),
        ("delete", "mutatingwebhookconfigurations", {"group": "admissionregistration.k8s.io"}),
        ("update", "validatingwebhookconfigurations", {"group": "admissionregistration.k8s.io"}),
        ("create", "apiservices", {"group": "apiregistration.k8s.io"}),
        ("delete", "customresourcedefinitions", {"group": "apiextensions.k8s.io"}),
        ("create", "clustertrustbundles", {"group": "certificates.k8s.io"}),
        ("update", "clustertrustbundles", {"group": "certificates.k8s.io"}),
        ("delete", "clustertrustbundles", {"group": "certificates.k8s.io"}),
        (
            "attest",
            "signers",
            {"group": "certificates.k8s.io", "name": "kubernetes.io/service-serving"},
        ),
        ("list", "podcertificaterequests", {"group": "certificates.k8s.io"}),
        ("get", "pods", {"namespace": "default"}),
        ("get", "leases", {"group": "coordination.k8s.io", "namespace": "kube-system"}),
        # Nothing of the signer's Leases, and no Lease it was not shipped with.
        ("create", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        ("update", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        ("list", "leases", {"group": "coordination.k8s.io", "namespace": NS}),
        (
            "update",
            "leases",
            {"group": "coordination.k8s.io", "namespace": NS, "name": "service-serving-signer"},
        ),
        (
            "update",
            "leases",
            {
                "group": "coordination.k8s.io",
                "namespace": NS,
                "name": "service-serving-signer-managed-ca-replica-0123456789ab",
            },
        ),
        (
            "delete",
            "leases",
            {"group": "coordination.k8s.io", "namespace": NS, "name": f"{LEASE}-convergence"},
        ),
        (
            "patch",
            "leases",
            {"group": "coordination.k8s.io", "namespace": NS, "name": LEASE},
        ),
    ],
)
def test_injector_cannot(client: Client, verb: str, resource: str, attrs: dict[str, Any]) -> None:
    assert not can(client, SUBJECT, verb, resource, **attrs)


@pytest.mark.usefixtures("injector_rbac")
@pytest.mark.parametrize(
    ("verb", "resource", "attrs"),
    [
        ("patch", "validatingwebhookconfigurations", {"group": "admissionregistration.k8s.io"}),
        ("watch", "mutatingwebhookconfigurations", {"group": "admissionregistration.k8s.io"}),
        ("patch", "apiservices", {"group": "apiregistration.k8s.io"}),
        ("patch", "customresourcedefinitions", {"group": "apiextensions.k8s.io"}),
        ("list", "clustertrustbundles", {"group": "certificates.k8s.io"}),
        ("watch", "configmaps", {}),
        ("patch", "configmaps", {"namespace": "default"}),
        ("create", "events", {"group": "events.k8s.io", "namespace": "default"}),
        ("update", "leases", {"group": "coordination.k8s.io", "namespace": NS, "name": LEASE}),
        (
            "update",
            "leases",
            {"group": "coordination.k8s.io", "namespace": NS, "name": f"{LEASE}-convergence"},
        ),
    ],
)
def test_injector_can(client: Client, verb: str, resource: str, attrs: dict[str, Any]) -> None:
    assert can(client, SUBJECT, verb, resource, **attrs)


def test_injector_component_passes_server_side_dry_run(client: Client) -> None:
    ensure_namespace(client, NS)
    objects = render(CONFIG / "injector")
    assert {o["kind"] for o in objects} >= RBAC_KINDS | {"Deployment", "PodDisruptionBudget"}
    for obj in objects:
        answer = apply(client, obj, dry_run=True, namespace=NS)
        assert answer["kind"] == obj["kind"]
