"""The injector against the real kube-apiserver, which is the TLS client that must trust
what is injected: a webhook failing TLS before injection and working after;
drift, deletion and annotation removal; the bad-input table."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from injector.controller import FIELD_MANAGER
from injector.decide import REASON_EMPTY, REASON_INVALID_SELECTOR
from injector.targets import value_digest
from kube.client import Client
from tests.integration.injector_harness import (
    VWC_PATH,
    Issuer,
    RunningInjector,
    b64,
    ca_bundles,
    config_map,
    delete_quietly,
    events_about,
    serve,
    validating_webhook,
)
from tests.integration.signer_harness import eventually
from tests.integration.webhook_server import REJECT_MESSAGE, WebhookServer


@pytest.fixture
def issuer(client: Client) -> Iterator[Issuer]:
    with Issuer(client) as running:
        yield running


@pytest.fixture
def hook(issuer: Issuer, namespace: str) -> Iterator[WebhookServer]:
    server = serve(issuer, namespace, "hook")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def vwc_names(client: Client) -> Iterator[list[str]]:
    """Names of ValidatingWebhookConfigurations to delete after the test."""
    names: list[str] = []
    yield names
    for name in names:
        delete_quietly(client, VWC_PATH, name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def vwc(client: Client, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = client.get(f"{VWC_PATH}/{name}")
    return obj


def wait_admission_failure(client: Client, namespace: str) -> str:
    """Poll until kube-apiserver has the webhook and a create fails; return the error."""
    names = iter(range(10_000))

    def failing() -> str | None:
        return config_map(client, namespace, f"probe-{next(names)}", reject=False)

    message: str = eventually(failing, timeout=30, interval=0.2, what="the webhook to be called")
    return message


def test_webhook_fails_tls_before_injection_and_is_called_after(
    client: Client, namespace: str, issuer: Issuer, hook: WebhookServer, vwc_names: list[str]
) -> None:
    name = unique("hook")
    vwc_names.append(name)
    client.create(VWC_PATH, validating_webhook(name, namespace, "hook", issuer.selector()))

    # Before: no caBundle, so kube-apiserver verifies our certificate against the system
    # roots and fails; failurePolicy Fail turns that into a failed create.
    before = wait_admission_failure(client, namespace)
    assert "failed calling webhook" in before and "x509" in before, before
    assert hook.admission_calls == 0

    with RunningInjector(client) as injector:
        expected = b64(issuer.bundle())
        eventually(lambda: ca_bundles(vwc(client, name)) == [expected], timeout=30)

        # After: kube-apiserver trusts the injected bundle and calls the webhook, which
        # allows plain ConfigMaps and rejects labelled ones with its own message.
        counter = iter(range(10_000))
        eventually(
            lambda: config_map(client, namespace, f"ok-{next(counter)}", reject=False) is None,
            timeout=30,
            interval=0.2,
            what="a create admitted by the webhook",
        )
        rejected = config_map(client, namespace, "rejected", reject=True)
        assert rejected is not None and REJECT_MESSAGE in rejected, rejected
        assert hook.admission_calls >= 2

        stored = vwc(client, name)
        owners = [m for m in stored["metadata"]["managedFields"] if m["manager"] == FIELD_MANAGER]
        assert owners and owners[0]["operation"] == "Update"
        owned = json.dumps(owners[0]["fieldsV1"])
        assert "caBundle" in owned and "rules" not in owned and "f:name" not in owned
        assert injector.controller.metrics.count("ValidatingWebhookConfiguration", "injected") >= 1


def test_every_webhook_of_a_configuration_gets_the_bundle(
    client: Client, namespace: str, issuer: Issuer, vwc_names: list[str]
) -> None:
    name = unique("multi")
    vwc_names.append(name)
    client.create(
        VWC_PATH, validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=3)
    )
    with RunningInjector(client) as injector:
        expected = b64(issuer.bundle())
        eventually(lambda: ca_bundles(vwc(client, name)) == [expected] * 3, timeout=30)
        # What the API server stored compares equal to what we wrote: a re-sync of the
        # stored object writes nothing (no hot loop).
        kind = "ValidatingWebhookConfiguration"
        digest = value_digest(expected)
        stored = vwc(client, name)
        assert [s for s in ca_bundles(stored)] == [expected] * 3
        injector.delivered(kind, name, stored["metadata"]["resourceVersion"])
        record = injector.controller.caches[kind].get(name)
        assert record is not None and [s.digest for s in record.slots] == [digest] * 3
        metrics = injector.controller.metrics
        injected, unchanged = metrics.count(kind, "injected"), metrics.count(kind, "unchanged")
        injector.controller.sync(f"{kind}/{name}")
        assert metrics.count(kind, "injected") == injected
        assert metrics.count(kind, "unchanged") == unchanged + 1


def test_mutating_webhook_configuration_gets_the_bundle_too(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    name = unique("mutating")
    body = validating_webhook(name, namespace, "absent", issuer.selector(), webhooks=2)
    body["kind"] = "MutatingWebhookConfiguration"
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    client.create(path, body)
    try:
        with RunningInjector(client) as injector:
            expected = b64(issuer.bundle())
            eventually(lambda: ca_bundles(client.get(f"{path}/{name}")) == [expected] * 2)
            # The write is visible before the injector's thread counts it.
            metrics = injector.controller.metrics
            eventually(lambda: metrics.count("MutatingWebhookConfiguration", "injected"))
    finally:
        delete_quietly(client, path, name)


def test_hand_edit_is_restored_and_bundle_changes_are_followed(
    client: Client, namespace: str, issuer: Issuer, vwc_names: list[str]
) -> None:
    name = unique("drift")
    vwc_names.append(name)
    client.create(VWC_PATH, validating_webhook(name, namespace, "absent", issuer.selector()))
    with RunningInjector(client):
        expected = b64(issuer.bundle())
        eventually(lambda: ca_bundles(vwc(client, name)) == [expected], timeout=30)

        # A caBundle edited by hand (kubectl edit: an Update by another manager).
        stored = vwc(client, name)
        stored["webhooks"][0]["clientConfig"]["caBundle"] = b64("garbage")
        client.replace(f"{VWC_PATH}/{name}", stored)
        eventually(lambda: ca_bundles(vwc(client, name)) == [expected], timeout=30)

        # The selected bundle deleted: the publisher re-creates it, the caBundle stays.
        (published,) = [issuer.publisher.published()]
        assert published is not None
        old_uid = published["metadata"]["uid"]
        delete_quietly(client, issuer.publisher.controller.path, published["metadata"]["name"])
        recreated = eventually(
            lambda: (p := issuer.publisher.published()) and p["metadata"]["uid"] != old_uid and p,
            timeout=30,
        )
        assert recreated["spec"]["trustBundle"] == issuer.bundle()
        assert ca_bundles(vwc(client, name)) == [expected]

        # The bundle's content changes (a second root added to the file): the publisher
        # replaces the object with a new name and the caBundle follows.
        from trust.ca import cert_pem, generate_ca

        second = generate_ca("injector second root")
        path = issuer.signer.bundle_path()
        path.write_bytes(path.read_bytes() + cert_pem(second.cert))
        eventually(lambda: len(issuer.signer.anchors()) == 2, timeout=30)
        followed = b64(issuer.bundle())
        eventually(lambda: ca_bundles(vwc(client, name)) == [followed], timeout=30)
        injected = x509.load_pem_x509_certificates(issuer.bundle().encode())
        assert {c.subject.rfc4514_string() for c in injected} >= {"CN=injector second root"}


def test_removing_the_annotation_leaves_the_object_alone(
    client: Client, namespace: str, issuer: Issuer, vwc_names: list[str]
) -> None:
    name = unique("release")
    vwc_names.append(name)
    client.create(VWC_PATH, validating_webhook(name, namespace, "absent", issuer.selector()))
    with RunningInjector(client) as injector:
        expected = b64(issuer.bundle())
        eventually(lambda: ca_bundles(vwc(client, name)) == [expected], timeout=30)
        stored = vwc(client, name)
        del stored["metadata"]["annotations"]
        stored["webhooks"][0]["clientConfig"]["caBundle"] = b64("mine now")
        replaced = client.replace(f"{VWC_PATH}/{name}", stored)
        kind = "ValidatingWebhookConfiguration"
        injector.delivered(kind, name, replaced["metadata"]["resourceVersion"])
        record = injector.controller.caches[kind].get(name)
        assert record is not None and record.annotation is None
        assert ca_bundles(vwc(client, name)) == [b64("mine now")]


BAD_INPUT = [
    ("malformed-json", "{signerName: kubernetes.io/service-serving}", "not valid JSON"),
    (
        "name-and-signer",
        '{"name": "x", "signerName": "kubernetes.io/service-serving"}',
        "not both",
    ),
    ("name-and-label-selector", '{"name": "x", "labelSelector": {}}', "exclusive"),
    ("label-selector-without-signer", '{"labelSelector": {}}', "requires signerName"),
    (
        "unknown-field",
        '{"signerName": "kubernetes.io/service-serving", "labelSelectors": {}}',
        "unknown field",
    ),
    (
        "invalid-label-selector",
        '{"signerName": "kubernetes.io/service-serving", "labelSelector": '
        '{"matchExpressions": [{"key": "tier", "operator": "Near", "values": ["x"]}]}}',
        "unknown operator",
    ),
]


def test_bad_annotations_change_nothing_and_say_why(
    client: Client, namespace: str, vwc_names: list[str]
) -> None:
    previous = b64("-----BEGIN CERTIFICATE-----\nkept\n-----END CERTIFICATE-----\n")
    created: dict[str, tuple[str, str]] = {}
    for case, annotation, fragment in BAD_INPUT:
        name = unique(f"bad-{case}")
        vwc_names.append(name)
        obj = client.create(
            VWC_PATH,
            validating_webhook(name, namespace, "absent", annotation, ca_bundle=previous),
        )
        created[name] = (obj["metadata"]["resourceVersion"], fragment)
    with RunningInjector(client) as injector:
        for name, (resource_version, fragment) in created.items():
            events = eventually(
                functools.partial(events_about, client, name, REASON_INVALID_SELECTOR), timeout=30
            )
            assert events[0]["type"] == "Warning"
            assert fragment in events[0]["note"], events[0]["note"]
            assert events[0]["regarding"]["kind"] == "ValidatingWebhookConfiguration"
            stored = vwc(client, name)
            assert stored["metadata"]["resourceVersion"] == resource_version
            assert ca_bundles(stored) == [previous]
        assert injector.controller.metrics.count(
            "ValidatingWebhookConfiguration", "invalid"
        ) >= len(BAD_INPUT)


def test_empty_selection_keeps_the_current_bundle_and_warns(
    client: Client, namespace: str, vwc_names: list[str]
) -> None:
    previous = b64("-----BEGIN CERTIFICATE-----\nkept\n-----END CERTIFICATE-----\n")
    selectors = {
        "nil-label-selector": {"signerName": "nobody.example.com/none"},
        "no-such-bundle": {"name": "kubernetes.io:service-serving:doesnotexist"},
        "no-match": {
            "signerName": "kubernetes.io/service-serving",
            "labelSelector": {"matchLabels": {"never": "matches"}},
        },
    }
    names = {}
    for case, selector in selectors.items():
        name = unique(f"empty-{case}")
        vwc_names.append(name)
        obj = client.create(
            VWC_PATH,
            validating_webhook(name, namespace, "absent", json.dumps(selector), ca_bundle=previous),
        )
        names[name] = obj["metadata"]["resourceVersion"]
    with RunningInjector(client):
        for name, resource_version in names.items():
            events = eventually(
                functools.partial(events_about, client, name, REASON_EMPTY), timeout=30
            )
            assert events[0]["type"] == "Warning"
            assert "current caBundle is kept" in events[0]["note"]
            stored = vwc(client, name)
            assert stored["metadata"]["resourceVersion"] == resource_version
            assert ca_bundles(stored) == [previous]
