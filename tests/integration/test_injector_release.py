"""A GitOps owner and the injector on one object (issues 22 and 30), against the real
kube-apiserver with a real server-side-apply field manager `gitops` (what `kubectl apply
--server-side --field-manager=gitops` sends): the injector's test-guarded JSON patches own
only caBundle leaves, so the owner renames and removes webhooks while the annotation is
on, and removes the annotation and a webhook in one apply; the release drops only the
injector's managedFields entry, so every caBundle stays; and an owner whose own
configuration sets caBundle is not forced over (Event naming it)."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from injector.decide import REASON_CONFLICT
from injector.targets import FIELD_MANAGER
from kube.client import Client
from tests.integration.injector_harness import (
    APISERVICE_PATH,
    CRD_PATH,
    VWC_PATH,
    Issuer,
    RunningInjector,
    api_service,
    b64,
    ca_bundles,
    delete_quietly,
    events_about,
    validating_webhook,
)
from tests.integration.signer_harness import eventually
from tests.integration.test_injector_apis import conversion_crd

pytestmark = pytest.mark.integration

APPLY = "application/apply-patch+yaml"
OWNER = "gitops"


@pytest.fixture
def issuer(client: Client) -> Iterator[Issuer]:
    with Issuer(client) as running:
        yield running


@pytest.fixture
def cleanup(client: Client) -> Iterator[list[tuple[str, str]]]:
    created: list[tuple[str, str]] = []
    yield created
    for path, name in created:
        delete_quietly(client, path, name)


def apply(client: Client, path: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """What `kubectl apply --server-side --field-manager=gitops` sends."""
    return client.patch(f"{path}/{name}", body, patch_type=APPLY, params={"fieldManager": OWNER})


def managers(obj: dict[str, Any]) -> list[str]:
    return [entry["manager"] for entry in obj["metadata"].get("managedFields") or []]


def without_annotation(body: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(body)
    stripped["metadata"].pop("annotations", None)
    return stripped


def inject_then_release(
    client: Client, path: str, body: dict[str, Any], expected: list[str]
) -> dict[str, Any]:
    """The owner applies `body` (annotated), the injector fills every caBundle, the owner
    applies it without the annotation; returns the object once the injector has let go."""
    name = body["metadata"]["name"]
    apply(client, path, name, body)
    eventually(lambda: ca_bundles(client.get(f"{path}/{name}")) == expected, timeout=30)
    assert FIELD_MANAGER in managers(client.get(f"{path}/{name}"))
    apply(client, path, name, without_annotation(body))
    released: dict[str, Any] = eventually(
        lambda: (o := client.get(f"{path}/{name}")) and FIELD_MANAGER not in managers(o) and o,
        timeout=30,
        what="the injector to release its fields",
    )
    return released


def ours(obj: dict[str, Any]) -> list[dict[str, Any]]:
    entries = obj["metadata"].get("managedFields") or []
    return [e for e in entries if e["manager"] == FIELD_MANAGER]


def test_owner_renames_and_removes_webhooks_while_annotated(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=3)
    expected = b64(issuer.bundle())
    with RunningInjector(client):
        apply(client, VWC_PATH, name, body)
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 3)
        # The injector's entry is an Update that owns each caBundle leaf and nothing else:
        # no `.` of a webhook entry, no `f:name` (what server-side apply's list keys owned).
        [entry] = ours(client.get(f"{VWC_PATH}/{name}"))
        assert entry["operation"] == "Update"
        for item in entry["fieldsV1"]["f:webhooks"].values():
            assert item == {"f:clientConfig": {"f:caBundle": {}}}
        # Rename the first webhook and remove the last, annotation still on.
        changed = copy.deepcopy(body)
        changed["webhooks"] = changed["webhooks"][:2]
        changed["webhooks"][0]["name"] = f"renamed.{name}.example.com"
        stored = apply(client, VWC_PATH, name, changed)
        names = [w["name"] for w in stored["webhooks"]]
        assert names == [w["name"] for w in changed["webhooks"]]
        # The renamed webhook is new to the injector: it fills it.
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 2)


def test_removing_the_annotation_and_a_webhook_in_one_apply_keeps_every_ca_bundle(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=2)
    expected = b64(issuer.bundle())
    with RunningInjector(client) as injector:
        apply(client, VWC_PATH, name, body)
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 2)
        one = without_annotation(body)
        one["webhooks"] = one["webhooks"][:1]
        stored = apply(client, VWC_PATH, name, one)
        assert [w["name"] for w in stored["webhooks"]] == [one["webhooks"][0]["name"]]
        released = eventually(
            lambda: (o := client.get(f"{VWC_PATH}/{name}")) and not ours(o) and o,
            timeout=30,
            what="the injector to drop its managedFields entry",
        )
        # The value stays: a failurePolicy: Fail webhook keeps working after the release.
        assert ca_bundles(released) == [expected]
        kind = "ValidatingWebhookConfiguration"
        eventually(lambda: injector.controller.metrics.count(kind, "released") >= 1)
        # The owner's configuration is the whole truth from now on: its next apply of the
        # same configuration changes nothing, and it may set caBundle without a conflict.
        owned = copy.deepcopy(one)
        owned["webhooks"][0]["clientConfig"]["caBundle"] = expected
        assert ca_bundles(apply(client, VWC_PATH, name, owned)) == [expected]


def test_a_ca_bundle_the_owner_applies_itself_is_not_forced_over(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=1)
    theirs = b64("their own bundle")
    body["webhooks"][0]["clientConfig"]["caBundle"] = theirs
    with RunningInjector(client) as injector:
        apply(client, VWC_PATH, name, body)
        kind = "ValidatingWebhookConfiguration"
        eventually(lambda: injector.controller.metrics.count(kind, "conflict") >= 1)
        events = eventually(lambda: events_about(client, name, REASON_CONFLICT), timeout=30)
        assert OWNER in events[0]["note"]
        # Nothing written: the owner's next apply succeeds without a conflict.
        assert ca_bundles(apply(client, VWC_PATH, name, body)) == [theirs]
        assert not ours(client.get(f"{VWC_PATH}/{name}"))


def test_owner_switches_a_crd_to_no_conversion_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    body = conversion_crd(group, namespace, issuer.selector())
    name = body["metadata"]["name"]
    cleanup.append((CRD_PATH, name))
    with RunningInjector(client):
        released = inject_then_release(client, CRD_PATH, body, [b64(issuer.bundle())])
        assert ca_bundles(released) == [b64(issuer.bundle())]
        none = without_annotation(body)
        none["spec"]["conversion"] = {"strategy": "None"}
        stored = apply(client, CRD_PATH, name, none)
        assert stored["spec"]["conversion"]["strategy"] == "None"


def test_owner_makes_an_apiservice_local_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    name = f"v1alpha1.{group}"
    cleanup.append((APISERVICE_PATH, name))
    body = api_service(group, namespace, issuer.selector())
    with RunningInjector(client):
        released = inject_then_release(client, APISERVICE_PATH, body, [b64(issuer.bundle())])
        # The caBundle stayed, owned by no one; a local APIService may not have one, so
        # the owner takes it (same value: no conflict) and then applies it away.
        assert ca_bundles(released) == [b64(issuer.bundle())]
        owned = without_annotation(body)
        owned["spec"]["caBundle"] = b64(issuer.bundle())
        apply(client, APISERVICE_PATH, name, owned)
        local = without_annotation(body)
        del local["spec"]["service"]
        stored = apply(client, APISERVICE_PATH, name, local)
        assert "service" not in stored["spec"] and "caBundle" not in stored["spec"]


def test_an_object_deleted_before_its_release_is_not_re_created(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    """The release patch tests the object's uid: a patch never creates, and a release
    racing a delete and re-create under the same name does not touch the new object."""
    from injector.targets import VALIDATING_WEBHOOK, release_ops, to_target

    name = f"gone-{uuid.uuid4().hex[:8]}"
    created = client.create(VWC_PATH, validating_webhook(name, namespace, "absent", None))
    target = to_target(VALIDATING_WEBHOOK, created)
    delete_quietly(client, VWC_PATH, name)
    client.create(VWC_PATH, validating_webhook(name, namespace, "absent", None))
    with pytest.raises(Exception) as refused:
        client.patch(
            target.path,
            release_ops(target),
            patch_type="application/json-patch+json",
            params={"fieldManager": FIELD_MANAGER},
        )
    assert "422" in str(refused.value)
    delete_quietly(client, VWC_PATH, name)
