"""The convergence report against the real API server (the contract in
docs/reference.md §11): the injector's report Lease carries, per anchor,
how many annotated objects select it, hold it and are blocked, per kind the counts of
stale, empty, invalid and conflicting objects, and the bundles it saw; it is renewed on
every change."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kube.client import Client, is_not_found
from kube.leases import LeaseRef
from tests.integration.injector_harness import (
    VWC_PATH,
    Issuer,
    RunningInjector,
    delete_quietly,
    validating_webhook,
)
from tests.integration.signer_harness import eventually
from trust.bundle import fingerprints, normalize_bundle
from trust.convergence import REPORT_ANNOTATION

KIND = "ValidatingWebhookConfiguration"


@pytest.fixture
def issuer(client: Client) -> Iterator[Issuer]:
    with Issuer(client) as running:
        yield running


def lease(client: Client, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        )
    except Exception as err:
        if is_not_found(err):
            return None
        raise
    return found


def report_of(obj: dict[str, Any] | None) -> dict[str, Any]:
    if obj is None:
        return {}
    value = (obj["metadata"].get("annotations") or {}).get(REPORT_ANNOTATION)
    parsed: dict[str, Any] = json.loads(value) if value else {}
    return parsed


def test_the_report_lease_says_who_holds_the_anchor_and_is_renewed_on_change(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    [anchor] = fingerprints(normalize_bundle(issuer.bundle()))
    name = f"convergence-{uuid.uuid4().hex[:8]}"
    hooks = [f"{name}-a", f"{name}-b"]
    report = LeaseRef(namespace, "injector-convergence")
    try:
        client.create(
            VWC_PATH, validating_webhook(hooks[0], namespace, "absent", issuer.selector())
        )
        with RunningInjector(client, report=report, identity="injector-test-identity"):

            def holding(n: int) -> bool:
                row = report_of(lease(client, namespace, report.name)).get("anchors", {})
                return bool(row.get(anchor) == {"selecting": n, "holding": n, "blocked": 0})

            eventually(lambda: holding(1), timeout=30, what="the report: 1 holder")
            first = lease(client, namespace, report.name)
            assert first is not None
            assert first["spec"]["holderIdentity"] == "injector-test-identity"
            kinds = report_of(first)["kinds"][KIND]
            assert kinds["managed"] >= 1  # other tests' objects may share the cluster
            assert anchor in report_of(first)["observedAnchors"]
            assert report_of(first)["complete"] is True
            # A change is reported at once, with a new renewTime.
            client.create(
                VWC_PATH, validating_webhook(hooks[1], namespace, "absent", issuer.selector())
            )
            eventually(lambda: holding(2), timeout=30, what="the report: 2 holders")
            second = lease(client, namespace, report.name)
            assert second is not None
            assert second["spec"]["renewTime"] != first["spec"]["renewTime"]
    finally:
        for hook in hooks:
            delete_quietly(client, VWC_PATH, hook)


def test_after_a_restart_an_emptied_selection_is_still_counted_with_its_expiry(
    client: Client, namespace: str
) -> None:
    """Empty and invalid objects dropped out of the expiry gauge after a
    restart. The annotation written beside the caBundle says what it holds."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from tests.integration.publisher_harness import ctb_path, ctb_version
    from trust.bundle import bundle_name
    from trust.ca import generate_ca

    ca = generate_ca("restart root")
    pem = normalize_bundle(ca.cert.public_bytes(Encoding.PEM))
    signer = f"r{uuid.uuid4().hex[:8]}.example.com/roots"
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
    hook = f"restart-{uuid.uuid4().hex[:8]}"
    selector = json.dumps({"signerName": signer, "labelSelector": {}})
    client.create(VWC_PATH, validating_webhook(hook, namespace, "absent", selector))
    try:
        with RunningInjector(client) as first:
            eventually(lambda: first.controller.metrics.objects(KIND, "managed") >= 1)
            eventually(
                lambda: bool(
                    client.get(f"{VWC_PATH}/{hook}")["webhooks"][0]["clientConfig"].get("caBundle")
                ),
                timeout=30,
            )
        client.delete(f"{ctb_path(client)}/{ctb}")  # the selection is now empty
        [anchor] = fingerprints(pem)
        with RunningInjector(client) as restarted:
            metrics = restarted.controller.metrics

            def counted() -> bool:
                return any(
                    s.state == "empty" and s.holding == {anchor}
                    for s in restarted.controller.statuses()
                )

            # Counted empty, and known to still hold its anchor (no content parsed).
            eventually(counted, timeout=30, what="the emptied selection counted")
            assert metrics.objects(KIND, "empty") >= 1
            expiry = metrics.registry.get_sample_value("cabundle_injector_anchor_expiry_seconds")
            # The gauge is the earliest over every object; ours takes part in it.
            assert expiry is not None and expiry <= int(ca.cert.not_valid_after_utc.timestamp())
    finally:
        delete_quietly(client, VWC_PATH, hook)
