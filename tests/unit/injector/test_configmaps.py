"""The injector's pure parts for ConfigMaps and for giving fields back: the records,
the decisions and the apply bodies (no server)."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from injector import decide as decisions
from injector.configmaps import (
    CA_KEY,
    LABEL,
    TRUSTSTORE_ANNOTATION,
    TRUSTSTORE_PASSWORD_ANNOTATION,
    apply_body,
    to_target,
)
from injector.controller import SELECTION_INDEX, Caches, InjectorController
from injector.targets import (
    ANNOTATION,
    FIELD_MANAGER,
    VALIDATING_WEBHOOK,
    release_body,
)
from injector.targets import to_target as to_webhook_target
from kube.client import ApiError, Client
from tests.unit.fakes import FakeCache
from tests.unit.injector.test_sync import SELECT_ALL, ctb, pem
from trust.bundle import anchor_ders, normalize_bundle
from trust.truststore import java_truststore, truststore_anchors


def config_map(
    annotations: dict[str, str] | None = None,
    data: dict[str, str] | None = None,
    binary: dict[str, str] | None = None,
    managers: list[dict[str, str]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "trust",
            "namespace": "apps",
            "uid": "uid-1",
            "labels": {LABEL: "true"},
            "annotations": {ANNOTATION: SELECT_ALL} if annotations is None else annotations,
            "managedFields": managers or [],
        },
        "data": data or {},
        "binaryData": binary or {},
        **extra,
    }


OURS = {"manager": FIELD_MANAGER, "operation": "Apply"}


# records ------------------------------------------------------------------------------


def test_config_map_record_keeps_ca_crt_and_the_queue_key_has_its_namespace() -> None:
    target = to_target(config_map(data={CA_KEY: "x", "app.conf": "y" * 10_000}))
    assert [s.ca_bundle for s in target.slots] == ["x"]
    assert target.key == "ConfigMap/apps/trust"
    assert target.path == "/api/v1/namespaces/apps/configmaps/trust"
    assert target.truststore is None and target.not_applicable is None


def test_a_managed_fields_entry_of_ours_marks_the_record_managed() -> None:
    assert to_target(config_map(managers=[OURS])).managed
    assert not to_target(
        config_map(managers=[{"manager": "kubectl", "operation": "Apply"}])
    ).managed
    # An Update entry under our name is not ours to release by apply.
    update = {"manager": FIELD_MANAGER, "operation": "Update"}
    assert not to_target(config_map(managers=[update])).managed


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (config_map(immutable=True), "immutable"),
        (
            config_map({ANNOTATION: SELECT_ALL, TRUSTSTORE_ANNOTATION: CA_KEY}),
            "not a ConfigMap key",
        ),
        (config_map({ANNOTATION: SELECT_ALL, TRUSTSTORE_ANNOTATION: "a/b"}), "not a ConfigMap key"),
    ],
    ids=["immutable", "truststore-is-ca-crt", "truststore-bad-key"],
)
def test_config_maps_that_cannot_be_written_say_why(raw: dict[str, Any], fragment: str) -> None:
    target = to_target(raw)
    assert target.not_applicable is not None and fragment in target.not_applicable
    decision = decisions.decide(target, [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Invalid)


# decisions ----------------------------------------------------------------------------


def test_ca_crt_gets_the_normalised_pem_itself() -> None:
    decision = decisions.decide(to_target(config_map()), [ctb("b1", ["a"]), ctb("b2", ["b"])])
    assert isinstance(decision, decisions.Inject)
    assert decision.ca_bundle == decision.bundle == normalize_bundle(pem("a") + pem("b"))
    body = apply_body(to_target(config_map()), decision.bundle)
    assert body == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trust", "namespace": "apps", "uid": "uid-1"},
        "data": {CA_KEY: decision.bundle},
    }


def test_ca_crt_up_to_date_then_drift_is_rewritten() -> None:
    bundle = normalize_bundle(pem("a"))
    current = to_target(config_map(data={CA_KEY: bundle}))
    assert isinstance(decisions.decide(current, [ctb("b", ["a"])]), decisions.UpToDate)
    drifted = to_target(config_map(data={CA_KEY: bundle + "# edited\n"}))
    assert isinstance(decisions.decide(drifted, [ctb("b", ["a"])]), decisions.Inject)


def test_empty_selection_keeps_ca_crt() -> None:
    raw = config_map({ANNOTATION: json.dumps({"name": "missing"})}, data={CA_KEY: "kept"})
    decision = decisions.decide(to_target(raw), [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Empty)
    assert "current ca.crt is kept" in decision.message


def test_truststore_is_current_by_its_anchors_not_its_bytes() -> None:
    bundle = normalize_bundle(pem("a") + pem("b"))
    annotations = {
        ANNOTATION: SELECT_ALL,
        TRUSTSTORE_ANNOTATION: "truststore.p12",
        TRUSTSTORE_PASSWORD_ANNOTATION: "changeit",
    }

    def with_store(data: bytes) -> Any:
        encoded = {"truststore.p12": base64.b64encode(data).decode()}
        return to_target(config_map(annotations, data={CA_KEY: bundle}, binary=encoded))

    bundles = [ctb("b", ["a", "b"])]
    fresh = with_store(java_truststore(bundle, "changeit"))
    assert fresh.truststore is not None and fresh.truststore.anchors == anchor_ders(bundle)
    assert isinstance(decisions.decide(fresh, bundles), decisions.UpToDate)
    for stale in (
        java_truststore(normalize_bundle(pem("a")), "changeit"),  # an anchor missing
        java_truststore(bundle, "other"),  # another password
        b"garbage",
    ):
        assert isinstance(decisions.decide(with_store(stale), bundles), decisions.Inject)

    body = apply_body(fresh, bundle)
    written = base64.b64decode(body["binaryData"]["truststore.p12"])
    assert truststore_anchors(written, "changeit") == anchor_ders(bundle)
    assert body["data"] == {CA_KEY: bundle}


# release -------------------------------------------------------------------------------


def test_removed_annotation_releases_only_what_we_still_own() -> None:
    ours = to_target(config_map(annotations={}, managers=[OURS]))
    assert decisions.decide(ours, [ctb("b", ["a"])]) == decisions.Release()
    theirs = to_target(config_map(annotations={}))
    assert decisions.decide(theirs, [ctb("b", ["a"])]) == decisions.Ignore()
    hooks = {
        "metadata": {"name": "hooks", "uid": "u-2", "managedFields": [OURS]},
        "webhooks": [{"name": "w0", "clientConfig": {"caBundle": "QQ=="}}],
    }
    assert decisions.decide(to_webhook_target(VALIDATING_WEBHOOK, hooks), []) == decisions.Release()


def test_release_body_sets_nothing_and_is_guarded_by_the_uid() -> None:
    target = to_target(config_map(annotations={}, managers=[OURS]))
    assert release_body(target) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trust", "namespace": "apps", "uid": "uid-1"},
    }
    hooks = to_webhook_target(VALIDATING_WEBHOOK, {"metadata": {"name": "h", "uid": "u"}})
    assert release_body(hooks) == {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "h", "uid": "u"},
    }


# the controller's release, over seeded caches ---------------------------------------------


class RecordingClient:
    """Records writes; `live` answers GETs (a 404 when absent)."""

    def __init__(self, live: dict[str, Any] | None = None) -> None:
        self.patches: list[tuple[str, Any, Any]] = []
        self.gets: list[str] = []
        self.live = live or {}

    def patch(self, path: str, body: Any, *, patch_type: str, params: Any, **_: Any) -> Any:
        assert patch_type == "application/apply-patch+yaml"
        self.patches.append((path, body, params))
        return {}

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        self.gets.append(path)
        if path not in self.live:
            raise ApiError(404, "NotFound")
        return self.live[path]


class NoEvents:
    def warning(self, *_: Any) -> None:
        raise AssertionError("no Warning Event expected")


def injector(client: RecordingClient, *targets: Any) -> tuple[InjectorController, Any]:
    caches: dict[str, FakeCache[Any]] = {
        kind: FakeCache(
            key=lambda t: t.key.split("/", 1)[1], indexers={SELECTION_INDEX: lambda t: []}
        )
        for kind in ("ValidatingWebhookConfiguration", "ConfigMap")
    }
    for target in targets:
        caches[target.kind].put(target)
    ctrl = InjectorController(
        cast(Client, client),
        Caches(caches, FakeCache([ctb("b", ["a"])], key=lambda b: b["metadata"]["name"])),
        NoEvents(),
        registry=CollectorRegistry(),
    )
    return ctrl, caches


def test_sync_releases_with_an_empty_apply_and_no_force() -> None:
    client = RecordingClient()
    hooks = {
        "metadata": {"name": "h", "uid": "u", "managedFields": [OURS]},
        "webhooks": [{"name": "w0", "clientConfig": {"caBundle": "QQ=="}}],
    }
    target = to_webhook_target(VALIDATING_WEBHOOK, hooks)
    ctrl, _ = injector(client, target)
    ctrl.sync(target.key)
    ((path, body, params),) = client.patches
    assert path == target.path and body == release_body(target)
    assert params == {"fieldManager": FIELD_MANAGER}  # nothing to force: it sets nothing
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "released") == 1


def leaves_the_watch(caches: dict[str, FakeCache[Any]], target: Any) -> None:
    """What the label-selected informer does when the label goes (or the object)."""
    del caches["ConfigMap"][f"{target.namespace}/{target.name}"]
    for _, _, on_delete in caches["ConfigMap"].handlers:
        assert on_delete is not None
        on_delete(target)


def test_a_config_map_that_lost_its_label_is_read_once_and_released() -> None:
    target = to_target(config_map(managers=[OURS]))
    unlabelled = config_map(managers=[OURS])
    unlabelled["metadata"]["labels"] = {}
    client = RecordingClient({target.path: unlabelled})
    ctrl, caches = injector(client, target)
    leaves_the_watch(caches, target)
    ctrl.sync(target.key)
    assert client.gets == [target.path]
    assert [body for _, body, _ in client.patches] == [release_body(target)]
    # A second sync of the key reads nothing more.
    ctrl.sync(target.key)
    assert client.gets == [target.path]


def test_a_config_map_really_deleted_is_not_released() -> None:
    target = to_target(config_map(managers=[OURS]))
    client = RecordingClient()
    ctrl, caches = injector(client, target)
    leaves_the_watch(caches, target)
    ctrl.sync(target.key)
    assert client.gets == [target.path] and client.patches == []
