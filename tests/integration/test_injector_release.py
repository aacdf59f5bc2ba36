"""A GitOps owner and the injector on one object (issue 22 item 1), against the real
kube-apiserver with a real server-side-apply field manager `gitops`: once the owner
removes the annotation the injector releases every field it owned, so the owner's next
apply can remove a webhook, switch a CRD's conversion to None or make an APIService
local (each was a 422 while the injector kept owning the list item and the caBundle);
and an owner who co-owns the caBundle before removing the annotation keeps it."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from injector.targets import FIELD_MANAGER
from kube.client import ApiError, Client
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


def test_owner_removes_a_webhook_after_the_injector_released_it(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=2)
    with RunningInjector(client) as injector:
        apply(client, VWC_PATH, name, body)
        expected = [b64(issuer.bundle())] * 2
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == expected, timeout=30)
        # While the injector owns the entry (annotation present) the owner cannot drop
        # it by apply: the entry survives with only the injector's fields, and is invalid.
        one = without_annotation(body)
        one["webhooks"] = one["webhooks"][:1]
        with pytest.raises(ApiError) as refused:
            apply(client, VWC_PATH, name, {**one, "metadata": body["metadata"]})
        assert refused.value.status == 422 and "sideEffects" in str(refused.value)

        inject_then_release(client, VWC_PATH, body, expected)
        stored = apply(client, VWC_PATH, name, one)
        assert [w["name"] for w in stored["webhooks"]] == [one["webhooks"][0]["name"]]
        kind = "ValidatingWebhookConfiguration"
        eventually(lambda: injector.controller.metrics.count(kind, "released") >= 1)


def test_owner_who_co_owns_the_ca_bundle_first_keeps_it_after_the_release(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    expected = b64(issuer.bundle())
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=2)
    with RunningInjector(client):
        apply(client, VWC_PATH, name, body)
        eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected] * 2)
        # The documented order: 1. put the injected value into your own configuration
        # (same value: shared ownership, no conflict, no force) ...
        owned = copy.deepcopy(body)
        for webhook in owned["webhooks"]:
            webhook["clientConfig"]["caBundle"] = expected
        apply(client, VWC_PATH, name, owned)
        # ... 2. then remove the annotation; the release leaves what the owner co-owns.
        apply(client, VWC_PATH, name, without_annotation(owned))
        released = eventually(
            lambda: (
                (o := client.get(f"{VWC_PATH}/{name}")) and FIELD_MANAGER not in managers(o) and o
            ),
            timeout=30,
        )
        assert ca_bundles(released) == [expected] * 2


def test_a_release_without_co_ownership_removes_the_injected_ca_bundle(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    name = f"gitops-{uuid.uuid4().hex[:8]}"
    cleanup.append((VWC_PATH, name))
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=1)
    with RunningInjector(client):
        released = inject_then_release(client, VWC_PATH, body, [b64(issuer.bundle())])
    # Nobody else owned it: server-side apply removes a field its only manager stops
    # applying. The owner's configuration is now the whole truth about the object.
    assert ca_bundles(released) == [""]


def test_owner_switches_a_crd_to_no_conversion_after_the_injector_released_it(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    body = conversion_crd(group, namespace, issuer.selector())
    name = body["metadata"]["name"]
    cleanup.append((CRD_PATH, name))
    with RunningInjector(client):
        inject_then_release(client, CRD_PATH, body, [b64(issuer.bundle())])
        none = without_annotation(body)
        none["spec"]["conversion"] = {"strategy": "None"}
        stored = apply(client, CRD_PATH, name, none)
        assert stored["spec"]["conversion"] == {"strategy": "None"}


def test_owner_makes_an_apiservice_local_after_the_injector_released_it(
    client: Client, namespace: str, issuer: Issuer, cleanup: list[tuple[str, str]]
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    name = f"v1alpha1.{group}"
    cleanup.append((APISERVICE_PATH, name))
    body = api_service(group, namespace, issuer.selector())
    with RunningInjector(client):
        inject_then_release(client, APISERVICE_PATH, body, [b64(issuer.bundle())])
        local = without_annotation(body)
        del local["spec"]["service"]
        stored = apply(client, APISERVICE_PATH, name, local)
        assert "service" not in stored["spec"] and "caBundle" not in stored["spec"]


def test_an_object_deleted_before_its_release_is_not_re_created(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    """The release apply carries the object's uid: kube-apiserver refuses to create from
    it, so a release racing a delete cannot leave an empty configuration behind."""
    from injector.targets import VALIDATING_WEBHOOK, release_body, to_target

    name = f"gone-{uuid.uuid4().hex[:8]}"
    created = client.create(VWC_PATH, validating_webhook(name, namespace, "absent", None))
    target = to_target(VALIDATING_WEBHOOK, created)
    delete_quietly(client, VWC_PATH, name)
    with pytest.raises(Exception) as refused:
        client.patch(
            target.path,
            release_body(target),
            patch_type=APPLY,
            params={"fieldManager": FIELD_MANAGER},
        )
    assert "uid mismatch" in str(refused.value)
    assert not [o for o in client.get(VWC_PATH)["items"] if o["metadata"]["name"] == name]
