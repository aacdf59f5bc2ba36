"""Other writers of the fields the injector keeps, against the real kube-apiserver: the
rows of the GitOps matrix in docs/inject.md that are not server-side apply (those are in
test_injector_release.py). A writer whose Update retakes the field after each write of
ours — a second injector (cert-manager's cainjector), client-side apply (`kubectl apply`,
Helm 3, Argo CD's default sync) — is not fought: the injector backs off per object and a
Warning Event names it. A replace that drops the field is repaired at once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from injector.decide import REASON_CONTESTED
from kube.client import ApiError, Client
from tests.integration.injector_harness import (
    VWC_PATH,
    Issuer,
    RunningInjector,
    b64,
    ca_bundles,
    delete_quietly,
    events_about,
    validating_webhook,
)
from tests.integration.signer_harness import eventually

KIND = "ValidatingWebhookConfiguration"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@pytest.fixture
def issuer(client: Client) -> Iterator[Issuer]:
    with Issuer(client) as running:
        yield running


@pytest.fixture
def hook(client: Client, namespace: str, issuer: Issuer) -> Iterator[str]:
    name = f"writers-{uuid.uuid4().hex[:8]}"
    client.create(VWC_PATH, validating_webhook(name, namespace, "absent", issuer.selector()))
    yield name
    delete_quietly(client, VWC_PATH, name)


def client_side_apply(client: Client, name: str, value: str, manager: str) -> None:
    """What `kubectl apply` (client-side) and Helm 3 send: the whole object with the
    manifest's caBundle and the last-applied annotation, as an Update by `manager`."""
    live = client.get(f"{VWC_PATH}/{name}")
    for webhook in live["webhooks"]:
        webhook["clientConfig"]["caBundle"] = value
    manifest = {"apiVersion": live["apiVersion"], "kind": KIND, "webhooks": live["webhooks"]}
    live["metadata"].setdefault("annotations", {})[LAST_APPLIED] = json.dumps(manifest)
    live["metadata"].pop("managedFields", None)
    try:
        client.replace(f"{VWC_PATH}/{name}", live, params={"fieldManager": manager})
    except ApiError as err:
        if err.status != 409:  # the injector wrote meanwhile: read again next round
            raise


def fight(client: Client, injector: RunningInjector, name: str, write: Any) -> tuple[int, int]:
    """The other writer puts its value back whenever ours is there (a reconciler at full
    speed) until the injector says who keeps retaking the field: (its writes, the
    injector's writes meanwhile)."""
    before = injector.controller.metrics.count(KIND, "injected")
    writes = 0

    def contested() -> bool:
        nonlocal writes
        if ca_bundles(client.get(f"{VWC_PATH}/{name}"))[0] == OURS[name]:
            write()
            writes += 1
        return bool(events_about(client, name, REASON_CONTESTED))

    eventually(contested, timeout=90, what="the injector to name the other writer")
    return writes, int(injector.controller.metrics.count(KIND, "injected") - before)


OURS: dict[str, str] = {}


def test_a_client_side_apply_that_sets_ca_bundle_is_not_fought(
    client: Client, issuer: Issuer, hook: str
) -> None:
    """`kubectl apply` / Helm 3 / Argo CD's default sync of a manifest carrying caBundle,
    re-applied whenever it drifts (self-heal)."""
    theirs = b64("their placeholder")
    with RunningInjector(client) as injector:
        OURS[hook] = b64(issuer.bundle())
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{hook}"))[0] == OURS[hook])
        writes, ours = fight(
            client,
            injector,
            hook,
            lambda: client_side_apply(client, hook, theirs, "kubectl-client-side-apply"),
        )
        assert ours <= 3, f"{ours} writes of ours against {writes} of theirs"
        events = eventually(lambda: events_about(client, hook, REASON_CONTESTED), timeout=30)
        assert "kubectl-client-side-apply" in events[0]["note"]
        assert injector.controller.metrics.count(KIND, "contested") >= 1


def test_a_second_injector_is_not_fought_at_client_speed(
    client: Client, issuer: Issuer, hook: str
) -> None:
    """A second injector writing its own bundle to the same field (cert-manager's
    cainjector left on during a migration: a JSON patch, an Update by `cainjector`)."""
    theirs = b64("another injector's bundle")
    ops = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": theirs}]
    with RunningInjector(client) as injector:
        OURS[hook] = b64(issuer.bundle())
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{hook}"))[0] == OURS[hook])
        writes, ours = fight(
            client,
            injector,
            hook,
            lambda: client.patch(
                f"{VWC_PATH}/{hook}",
                ops,
                patch_type="application/json-patch+json",
                params={"fieldManager": "cainjector"},
            ),
        )
        assert ours <= 3, f"{ours} writes of ours against {writes} of the other injector"
        events = eventually(lambda: events_about(client, hook, REASON_CONTESTED), timeout=30)
        assert "cainjector" in events[0]["note"]


def test_a_replace_that_drops_ca_bundle_is_repaired_at_once(
    client: Client, issuer: Issuer, hook: str
) -> None:
    """`kubectl replace` / Argo CD `Replace=true` of a manifest without caBundle: the
    field goes (a failurePolicy: Fail webhook refuses calls until it is back); nobody else
    owns it, so it is no contest: the injector writes it back on the event."""
    with RunningInjector(client) as injector:
        wanted = b64(issuer.bundle())
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{hook}")) == [wanted])
        for _ in range(3):
            live: Any = client.get(f"{VWC_PATH}/{hook}")
            for webhook in live["webhooks"]:
                webhook["clientConfig"].pop("caBundle", None)
            live["metadata"].pop("managedFields", None)
            client.replace(f"{VWC_PATH}/{hook}", live, params={"fieldManager": "kubectl-replace"})
            repaired = eventually(
                lambda: (o := client.get(f"{VWC_PATH}/{hook}")) and ca_bundles(o) == [wanted] and o
            )
        # Judged once the injector has handled the event of its own repair too.
        injector.delivered(KIND, hook, repaired["metadata"]["resourceVersion"])
        assert events_about(client, hook, REASON_CONTESTED) == []
        assert injector.controller.metrics.count(KIND, "contested") == 0
