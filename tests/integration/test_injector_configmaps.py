"""ConfigMaps as the injector's fourth target, against the real kube-apiserver:
a labelled ConfigMap gets `ca.crt` (and a PKCS#12 truststore key on request); drift is
restored; a rotation goes old → old+new → new; an empty selection keeps the content and
says why; removing the label stops management and releases every field we owned; a
ConfigMap deleted under the injector is not re-created."""

from __future__ import annotations

import base64
import functools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from injector.configmaps import (
    CA_KEY,
    LABEL,
    TRUSTSTORE_ANNOTATION,
    TRUSTSTORE_PASSWORD_ANNOTATION,
)
from injector.decide import REASON_EMPTY, REASON_INVALID_SELECTOR, REASON_REFUSED
from injector.targets import ANNOTATION, FIELD_MANAGER, INJECTED_ANNOTATION, MARK_LABEL
from kube.client import Client, is_not_found
from kube.leases import LeaseRef
from tests.integration.injector_harness import RunningInjector
from tests.integration.publisher_harness import create_ctb, ctb_path, ctb_version, delete_ctb
from tests.integration.signer_harness import eventually
from trust import convergence
from trust.bundle import anchor_ders, bundle_name, fingerprints, normalize_bundle
from trust.ca import generate_ca
from trust.truststore import truststore_anchors


class Roots:
    """ClusterTrustBundles of a signer name unique to the test, written by hand: one per
    root, so a rotation is an add and a delete."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.signer = f"s{uuid.uuid4().hex[:8]}.example.com/roots"
        self.pems: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.versions: dict[str, str] = {}

    def selector(self) -> str:
        return json.dumps({"signerName": self.signer, "labelSelector": {}})

    def add(self, root: str) -> str:
        pem = normalize_bundle(
            generate_ca(f"configmap {root}").cert.public_bytes(Encoding.PEM).decode()
        )
        name = bundle_name(self.signer, pem)
        created = self.client.create(
            ctb_path(self.client),
            {
                "apiVersion": f"certificates.k8s.io/{ctb_version(self.client)}",
                "kind": "ClusterTrustBundle",
                "metadata": {"name": name},
                "spec": {"signerName": self.signer, "trustBundle": pem},
            },
        )
        self.pems[root], self.names[root] = pem, name
        self.versions[root] = str(created["metadata"]["resourceVersion"])
        return pem

    def remove(self, root: str) -> None:
        self.client.delete(f"{ctb_path(self.client)}/{self.names.pop(root)}")
        del self.pems[root]

    def bundle(self) -> str:
        return normalize_bundle("".join(self.pems.values()))

    def close(self) -> None:
        for root in list(self.names):
            self.remove(root)


@pytest.fixture
def roots(client: Client) -> Iterator[Roots]:
    made = Roots(client)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def injector(client: Client) -> Iterator[RunningInjector]:
    with RunningInjector(client) as running:
        yield running


def config_map_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


def create_config_map(
    client: Client,
    namespace: str,
    name: str,
    annotations: dict[str, str],
    *,
    labelled: bool = True,
    data: dict[str, str] | None = None,
) -> dict[str, Any]:
    created: dict[str, Any] = client.create(
        config_map_path(namespace),
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": {LABEL: "true"} if labelled else {},
                "annotations": annotations,
            },
            "data": data or {},
        },
    )
    return created


def ca_crt(client: Client, namespace: str, name: str) -> str:
    return str((client.get(config_map_path(namespace, name)).get("data") or {}).get(CA_KEY, ""))


def injected_config_map(client: Client, namespace: str, roots: Roots) -> None:
    """ConfigMap `trust` selecting one new root, once the injector has filled it."""
    roots.add("a")
    create_config_map(client, namespace, "trust", {ANNOTATION: roots.selector()})
    eventually(lambda: ca_crt(client, namespace, "trust") == roots.bundle(), timeout=30)


def managers(obj: dict[str, Any]) -> list[str]:
    return [m["manager"] for m in obj["metadata"].get("managedFields") or []]


def test_labelled_config_map_gets_ca_crt_and_drift_is_restored(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    roots.add("a")
    create_config_map(
        client, namespace, "trust", {ANNOTATION: roots.selector()}, data={"app.conf": "x=1"}
    )
    eventually(lambda: ca_crt(client, namespace, "trust") == roots.bundle(), timeout=30)
    stored = client.get(config_map_path(namespace, "trust"))
    assert stored["data"]["app.conf"] == "x=1"  # the user's keys are the user's
    ours = [m for m in stored["metadata"]["managedFields"] if m["manager"] == FIELD_MANAGER]
    assert ours and ours[0]["operation"] == "Update"
    assert ours[0]["fieldsV1"] == {
        "f:data": {"f:ca.crt": {}},
        "f:metadata": {
            "f:annotations": {"f:service-serving-signer/injected": {}},
            "f:labels": {"f:service-serving-signer/ca-injected": {}},
        },
    }

    # kubectl edit: an Update by another manager rewrites ca.crt; it is restored.
    stored["data"][CA_KEY] = "edited by hand\n"
    client.replace(config_map_path(namespace, "trust"), stored)
    eventually(lambda: ca_crt(client, namespace, "trust") == roots.bundle(), timeout=30)
    eventually(lambda: injector.controller.metrics.count("ConfigMap", "injected") >= 2)


def test_rotation_goes_old_then_old_and_new_then_new(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    old = roots.add("old")
    create_config_map(client, namespace, "trust", {ANNOTATION: roots.selector()})
    eventually(lambda: ca_crt(client, namespace, "trust") == old, timeout=30)
    new = roots.add("new")
    both = normalize_bundle(old + new)
    eventually(lambda: ca_crt(client, namespace, "trust") == both, timeout=30)
    roots.remove("old")
    eventually(lambda: ca_crt(client, namespace, "trust") == new, timeout=30)


def test_empty_selection_keeps_ca_crt_and_warns(
    client: Client, namespace: str, injector: RunningInjector
) -> None:
    kept = "-----BEGIN CERTIFICATE-----\nkept\n-----END CERTIFICATE-----\n"
    selector = json.dumps({"name": "nobody.example.com:none:0000"})
    created = create_config_map(
        client, namespace, "trust", {ANNOTATION: selector}, data={CA_KEY: kept}
    )

    def warned() -> list[dict[str, Any]]:
        items = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        return [
            e
            for e in items
            if e["regarding"].get("name") == "trust" and e.get("reason") == REASON_EMPTY
        ]

    events = eventually(warned, timeout=30)
    assert events[0]["type"] == "Warning" and "current ca.crt is kept" in events[0]["note"]
    assert events[0]["regarding"]["kind"] == "ConfigMap"
    stored = client.get(config_map_path(namespace, "trust"))
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert stored["data"][CA_KEY] == kept


def test_truststore_key_holds_the_same_anchors_for_a_jvm(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    roots.add("a")
    roots.add("b")
    annotations = {
        ANNOTATION: roots.selector(),
        TRUSTSTORE_ANNOTATION: "truststore.p12",
        TRUSTSTORE_PASSWORD_ANNOTATION: "changeit",
    }
    create_config_map(client, namespace, "trust", annotations)

    def store() -> frozenset[bytes] | None:
        binary = client.get(config_map_path(namespace, "trust")).get("binaryData") or {}
        if "truststore.p12" not in binary:
            return None
        return truststore_anchors(base64.b64decode(binary["truststore.p12"]), "changeit")

    eventually(lambda: store() == anchor_ders(roots.bundle()), timeout=30)
    assert ca_crt(client, namespace, "trust") == roots.bundle()
    # Current by content, not bytes: a re-sync writes nothing.
    before = client.get(config_map_path(namespace, "trust"))["metadata"]["resourceVersion"]
    injector.controller.sync(f"ConfigMap/{namespace}/trust")
    after = client.get(config_map_path(namespace, "trust"))["metadata"]["resourceVersion"]
    assert after == before


def test_removing_the_label_releases_our_fields_and_stops_management(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    injected_config_map(client, namespace, roots)
    client.patch(config_map_path(namespace, "trust"), {"metadata": {"labels": {LABEL: None}}})
    released = eventually(
        lambda: (
            (o := client.get(config_map_path(namespace, "trust")))
            and FIELD_MANAGER not in managers(o)
            and o
        ),
        timeout=30,
        what="the injector to release ca.crt",
    )
    # The release drops our managedFields entry, note and mark: ca.crt stays (a Gateway
    # reading it keeps working), and nothing writes it again.
    assert released["data"][CA_KEY] == roots.bundle()
    assert INJECTED_ANNOTATION not in (released["metadata"].get("annotations") or {})
    assert MARK_LABEL not in (released["metadata"].get("labels") or {})
    # Stops management: a new root re-drives nothing for the unlabelled ConfigMap.
    resource_version = released["metadata"]["resourceVersion"]
    roots.add("b")
    injector.delivered("bundles", roots.names["b"], roots.versions["b"])
    assert injector.controller.caches["ConfigMap"].get(f"{namespace}/trust") is None
    stored = client.get(config_map_path(namespace, "trust"))
    assert stored["metadata"]["resourceVersion"] == resource_version
    eventually(lambda: injector.controller.metrics.count("ConfigMap", "released") >= 1)


def test_unlabelled_config_maps_are_neither_cached_nor_written(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    roots.add("a")
    create_config_map(client, namespace, "plain", {ANNOTATION: roots.selector()}, labelled=False)
    create_config_map(client, namespace, "trust", {ANNOTATION: roots.selector()})
    eventually(lambda: ca_crt(client, namespace, "trust") == roots.bundle(), timeout=30)
    # Judged once the injector has handled its own write to `trust`, made after `plain`
    # was created: an event of `plain` would have come before it.
    written = client.get(config_map_path(namespace, "trust"))["metadata"]["resourceVersion"]
    injector.delivered("ConfigMap", f"{namespace}/trust", written)
    assert injector.controller.caches["ConfigMap"].get(f"{namespace}/plain") is None
    assert ca_crt(client, namespace, "plain") == ""


def test_a_config_map_deleted_under_the_injector_is_not_re_created(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    injected_config_map(client, namespace, roots)
    key = f"{namespace}/trust"
    record = injector.controller.caches["ConfigMap"].get(key)
    assert record is not None
    client.delete(config_map_path(namespace, "trust"))
    # Sync the stale record as a worker would have in the instant before the delete event.
    from injector.configmaps import patch_ops
    from injector.kinds import path_of

    with pytest.raises(Exception) as refused:
        client.patch(
            path_of(record),
            patch_ops(record, roots.bundle(), "{}"),
            patch_type="application/json-patch+json",
            params={"fieldManager": FIELD_MANAGER},
        )
    assert is_not_found(refused.value)
    missing = functools.partial(client.get, config_map_path(namespace, "trust"))
    with pytest.raises(Exception) as gone:
        missing()
    assert is_not_found(gone.value)


def test_a_label_removed_while_no_injector_ran_is_released_at_the_next_start(
    client: Client, namespace: str, roots: Roots
) -> None:
    with RunningInjector(client):
        injected_config_map(client, namespace, roots)
    # The injector is down; the owner removes the opt-in label.
    client.patch(config_map_path(namespace, "trust"), {"metadata": {"labels": {LABEL: None}}})
    with RunningInjector(client) as restarted:
        released = eventually(
            lambda: (
                (o := client.get(config_map_path(namespace, "trust")))
                and FIELD_MANAGER not in managers(o)
                and MARK_LABEL not in (o["metadata"].get("labels") or {})
                and o
            ),
            timeout=30,
            what="the sweep to release the departed ConfigMap",
        )
        assert released["data"][CA_KEY] == roots.bundle()  # the value stays
        eventually(lambda: restarted.controller.metrics.count("ConfigMap", "released") >= 1)


def test_a_write_the_api_refuses_is_an_event_not_a_retry(
    client: Client, namespace: str, roots: Roots, injector: RunningInjector
) -> None:
    """`..data` passes our key check but not the API's: 422 with causes. The owner's to
    fix: a Warning Event on the ConfigMap, `refused`, and no loop error."""
    roots.add("a")
    annotations = {ANNOTATION: roots.selector(), TRUSTSTORE_ANNOTATION: "..data"}
    create_config_map(client, namespace, "trust", annotations)

    def refused() -> list[Any]:
        events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        return [e for e in events if e.get("reason") == REASON_REFUSED]

    events = eventually(refused, timeout=30)
    assert "..data" in events[0]["note"]
    assert injector.controller.metrics.count("ConfigMap", "refused") >= 1
    errors = injector.registry.get_sample_value(
        "controller_sync_total", {"controller": "injector", "result": "error"}
    )
    assert not errors
    assert ca_crt(client, namespace, "trust") == ""


def test_a_tenants_nested_selector_annotation_does_not_stop_the_report_completing(
    client: Client, namespace: str
) -> None:
    """A labelled ConfigMap whose selector annotation is 4,000 '[' (a tenant's edit
    rights suffice) once made every sync of it raise, for ever: the report never became
    complete and the managed CA's swap waited, naming nothing. Now the annotation is
    `invalid` (selecting nothing) with a Warning Event on it — classified, not dropped
    from the cache unseen —, the well-behaved ConfigMap beside it is injected, the report
    completes and the anchor converges; the loop counts no error."""
    suffix = uuid.uuid4().hex[:8]
    signer = f"example.com/nested-{suffix}"
    bundle = normalize_bundle(
        generate_ca(f"nested {suffix}").cert.public_bytes(Encoding.PEM).decode()
    )
    [anchor] = fingerprints(bundle)
    ctb_name = f"example.com:nested-{suffix}:bundle"
    create_ctb(client, ctb_name, signer, bundle)
    selector = json.dumps({"signerName": signer, "labelSelector": {}})
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    for name, annotation in (("good", selector), ("nested", "[" * 4000)):
        client.create(
            path,
            {
                "metadata": {
                    "name": name,
                    "labels": {LABEL: "true"},
                    "annotations": {ANNOTATION: annotation},
                }
            },
        )
    try:
        with RunningInjector(client, report=LeaseRef(namespace, "nested-convergence")) as running:
            eventually(
                lambda: client.get(f"{path}/good").get("data", {}).get(CA_KEY),
                timeout=30,
                what="the well-behaved ConfigMap injected",
            )

            def converged() -> bool:
                report = convergence.parse(running.controller.report_value())
                return report.complete and convergence.converged(report, anchor)

            eventually(converged, timeout=30, what="the report complete and the anchor converged")

            def warned() -> list[dict[str, Any]]:
                events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
                return [
                    e
                    for e in events["items"]
                    if e["regarding"].get("name") == "nested"
                    and e.get("reason") == REASON_INVALID_SELECTOR
                ]

            [event] = eventually(warned, timeout=30, what="the nested one's Warning Event")
            assert event["type"] == "Warning"
            invalid = running.registry.get_sample_value(
                "cabundle_injector_sync_total", {"kind": "ConfigMap", "result": "invalid"}
            )
            errors = running.registry.get_sample_value(
                "controller_sync_total", {"controller": "injector", "result": "error"}
            )
            assert invalid and not errors
    finally:
        delete_ctb(client, ctb_name)
