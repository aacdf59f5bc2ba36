"""The injector's pure parts for ConfigMaps and for giving fields back: the records,
the decisions and the apply bodies (no server)."""

from __future__ import annotations

import base64
import copy
import json
import logging
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from injector import decide as decisions
from injector.configmaps import (
    CA_KEY,
    LABEL,
    MARK_LABEL,
    TRUSTSTORE_ANNOTATION,
    TRUSTSTORE_PASSWORD_ANNOTATION,
    departed_record,
    patch_ops,
    to_target,
    written,
)
from injector.controller import SELECTION_INDEX, Caches, InjectorController
from injector.kinds import VALIDATING_WEBHOOK, path_of
from injector.kinds import to_target as to_webhook_target
from injector.targets import ANNOTATION, FIELD_MANAGER, Handover, release_ops, value_digest
from kube.client import ApiError, Client
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import SELECT_ALL, apply_json_patch, ctb, pem
from trust.bundle import anchor_ders, normalize_bundle, parse_anchors
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


OURS = {"manager": FIELD_MANAGER, "operation": "Update"}


# records ------------------------------------------------------------------------------


def test_config_map_record_keeps_the_digest_of_ca_crt_and_the_key_has_its_namespace() -> None:
    target = to_target(config_map(data={CA_KEY: "x", "app.conf": "y" * 10_000}))
    assert [s.digest for s in target.slots] == [value_digest("x")]
    assert target.key == "ConfigMap/apps/trust"
    assert path_of(target) == "/api/v1/namespaces/apps/configmaps/trust"
    assert target.truststore is None and target.not_applicable is None


def test_a_managed_fields_entry_of_ours_marks_the_record_managed() -> None:
    assert to_target(config_map(managers=[OURS])).managed
    assert not to_target(
        config_map(managers=[{"manager": "kubectl", "operation": "Apply"}])
    ).managed
    # An apply entry of ours (written before the injector used JSON patches) is ours too.
    legacy = {"manager": FIELD_MANAGER, "operation": "Apply"}
    assert to_target(config_map(managers=[legacy])).owned == ((0, "Apply"),)


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
    assert patch_ops(to_target(config_map(data={"app.conf": "x"})), decision.bundle, "n") == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
        {"op": "add", "path": "/data/ca.crt", "value": decision.bundle},
        {
            "op": "add",
            "path": "/metadata/annotations/service-serving-signer~1injected",
            "value": "n",
        },
        {
            "op": "add",
            "path": "/metadata/labels/service-serving-signer~1ca-injected",
            "value": "true",
        },
    ]


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


STORE_ANNOTATIONS = {
    ANNOTATION: SELECT_ALL,
    TRUSTSTORE_ANNOTATION: "truststore.p12",
    TRUSTSTORE_PASSWORD_ANNOTATION: "changeit",
}


def written_by_us(bundle: str) -> dict[str, Any]:
    """A ConfigMap as our write leaves it (data, binaryData and the digest annotation)."""
    out = written(to_target(config_map(STORE_ANNOTATIONS)), bundle, "changeit")
    raw = config_map(
        {**STORE_ANNOTATIONS, **out["annotations"]},
        data=out["data"],
        binary=out["binaryData"],
    )
    return raw


def test_truststore_is_current_by_the_digests_we_wrote_beside_it() -> None:
    bundle = normalize_bundle(pem("a") + pem("b"))
    bundles = [ctb("b", ["a", "b"])]
    fresh = written_by_us(bundle)
    assert isinstance(decisions.decide(to_target(fresh), bundles), decisions.UpToDate)
    written = base64.b64decode(fresh["binaryData"]["truststore.p12"])
    assert truststore_anchors(written, "changeit") == anchor_ders(bundle)
    assert fresh["data"] == {CA_KEY: bundle}

    # The selection gained an anchor, or the password changed: the digest of the inputs differs.
    fewer = to_target(written_by_us(pem("a")))
    assert isinstance(decisions.decide(fewer, bundles), decisions.Inject)
    repassworded = written_by_us(bundle)
    repassworded["metadata"]["annotations"][TRUSTSTORE_PASSWORD_ANNOTATION] = "other"
    assert isinstance(decisions.decide(to_target(repassworded), bundles), decisions.Inject)


def without_trusted_key_usage(bundle: str) -> bytes:
    """The anchors as plain certificate bags: keytool lists 0 entries in such a file."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    certs = parse_anchors(bundle)
    return pkcs12.serialize_key_and_certificates(
        None, None, None, certs, BestAvailableEncryption(b"changeit")
    )


@pytest.mark.parametrize(
    "replacement",
    ["garbage", "no-trusted-key-usage", "our-store-for-other-anchors"],
)
def test_truststore_bytes_changed_by_someone_else_are_rewritten(replacement: str) -> None:
    bundle = normalize_bundle(pem("a") + pem("b"))
    raw = written_by_us(bundle)
    data = {
        "garbage": b"garbage",
        "no-trusted-key-usage": without_trusted_key_usage(bundle),
        "our-store-for-other-anchors": java_truststore(normalize_bundle(pem("a")), "changeit"),
    }[replacement]
    raw["binaryData"]["truststore.p12"] = base64.b64encode(data).decode()
    assert isinstance(decisions.decide(to_target(raw), [ctb("b", ["a", "b"])]), decisions.Inject)


def test_the_record_never_parses_tenant_bytes_and_holds_no_content(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cryptography.hazmat.primitives.serialization import pkcs12

    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("tenant bytes parsed in the informer transform")

    monkeypatch.setattr(pkcs12, "load_pkcs12", refuse)
    megabyte = "A" * (1 << 20)
    raw = config_map(
        {**STORE_ANNOTATIONS, TRUSTSTORE_PASSWORD_ANNOTATION: "changeit"},
        data={CA_KEY: megabyte},
        binary={"truststore.p12": megabyte},
    )
    target = to_target(raw)
    assert len(repr(target)) < 2_000, "the record keeps digests, not the ConfigMap's content"
    assert isinstance(decisions.decide(target, [ctb("b", ["a"])]), decisions.Inject)


def test_an_oversized_annotation_is_not_cached_and_is_invalid() -> None:
    huge = json.dumps({"signerName": "example.com/x", "labelSelector": {"a": "b" * 200_000}})
    target = to_target(config_map({ANNOTATION: huge}))
    assert target.annotation is not None and len(target.annotation) <= 64
    decision = decisions.decide(target, [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Invalid) and "longer than" in decision.message


def test_an_oversized_truststore_password_is_not_applicable() -> None:
    raw = config_map({**STORE_ANNOTATIONS, TRUSTSTORE_PASSWORD_ANNOTATION: "p" * 5_000})
    target = to_target(raw)
    assert target.not_applicable is not None and "password" in target.not_applicable
    assert len(repr(target)) < 2_000


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


def test_release_removes_our_entry_only_and_is_guarded_by_the_uid() -> None:
    target = to_target(config_map(annotations={}, managers=[OURS]))
    assert release_ops(target) == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-1"},
        {"op": "test", "path": "/metadata/managedFields/0/manager", "value": FIELD_MANAGER},
        {"op": "remove", "path": "/metadata/managedFields/0"},
    ]


FLUX: Any = {
    "manager": "flux",
    "operation": "Apply",
    "fieldsV1": {
        "f:metadata": {"f:annotations": {"f:example.com/team": {}}},
        "f:data": {"f:mode": {}},
    },
}
OPS_ENTRY: Any = {"manager": "ops", "operation": "Update", "fieldsV1": {"f:data": {"f:ref": {}}}}
OURS_WITH_STORE: Any = {
    "manager": FIELD_MANAGER,
    "operation": "Update",
    "fieldsV1": {
        "f:data": {"f:ca.crt": {}},
        "f:binaryData": {"f:truststore.p12": {}},
        "f:metadata": {"f:labels": {f"f:{MARK_LABEL}": {}}},
    },
}


def departed_config_map(
    *managers: Any, annotations: dict[str, str] | None = None, data: Any = None
) -> dict[str, Any]:
    """A ConfigMap we wrote (`ca.crt`, a truststore, our mark) whose opt-in label went."""
    raw = config_map(
        annotations=annotations if annotations is not None else dict(STORE_ANNOTATIONS),
        data=data if data is not None else {"mode": "prod", "ref": "vault:x", CA_KEY: "pem"},
        binary={"truststore.p12": "c3RvcmU="},
        managers=[copy.deepcopy(m) for m in managers],
    )
    raw["metadata"]["labels"] = {MARK_LABEL: "true"}
    raw["metadata"]["resourceVersion"] = "41"
    return raw


def fields_of(obj: Any, manager: str) -> Any:
    [found] = [e for e in obj["metadata"]["managedFields"] if e["manager"] == manager]
    return found["fieldsV1"]


def test_a_released_config_maps_ca_crt_and_truststore_go_to_the_owner_of_its_data() -> None:
    """As a webhook's caBundle goes to whoever names its server, a released ConfigMap's
    `ca.crt` and truststore key go to the ConfigMap's owner — the entry owning its other
    data keys, a server-side apply's before an Update's — in the patch that removes ours:
    a GitOps owner's next apply then keeps or prunes them as its configuration says. No
    value changes; the other managers' entries are as they were."""
    raw = departed_config_map(OPS_ENTRY, FLUX, OURS_WITH_STORE)
    target = departed_record(raw)
    assert target.handover == (
        Handover(1, "flux", "Apply", ("f:data",), ("f:ca.crt",)),
        Handover(1, "flux", "Apply", (), ("f:binaryData", "f:truststore.p12")),
    )
    assert target.unowned == ()
    after = apply_json_patch(raw, release_ops(target))
    assert FIELD_MANAGER not in [e["manager"] for e in after["metadata"]["managedFields"]]
    assert fields_of(after, "flux") == {
        **FLUX["fieldsV1"],
        "f:data": {"f:mode": {}, "f:ca.crt": {}},
        "f:binaryData": {"f:truststore.p12": {}},
    }
    assert fields_of(after, "ops") == OPS_ENTRY["fieldsV1"]
    assert (after["data"], after["binaryData"]) == (raw["data"], raw["binaryData"])
    assert MARK_LABEL not in after["metadata"]["labels"]


def test_a_map_added_to_the_owners_entry_is_guarded_by_the_resource_version() -> None:
    """Adding `f:binaryData` whole to an owner's entry that had none would replace one it
    gained since (its other keys then owned by nobody): the patch tests the
    resourceVersion the record was made from, and the next event re-plans it."""
    target = departed_record(departed_config_map(FLUX, OURS_WITH_STORE))
    ops = release_ops(target)
    assert {"op": "test", "path": "/metadata/resourceVersion", "value": "41"} in ops
    no_store = dict(OURS_WITH_STORE, fieldsV1={"f:data": {"f:ca.crt": {}}})
    plain = release_ops(departed_record(departed_config_map(FLUX, no_store)))
    assert not any(op["path"] == "/metadata/resourceVersion" for op in plain)


def test_an_owner_that_applied_only_metadata_takes_ca_crt() -> None:
    """The usual GitOps shape of an injected ConfigMap: the owner applies its labels and
    annotations and no data. With no entry owning a data key, the entry owning its
    metadata takes `ca.crt` (its `f:data` added), so its next apply without the opt-in
    label prunes `ca.crt` instead of leaving it owned by nobody."""
    flux = {
        "manager": "flux",
        "operation": "Apply",
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:example.com/team": {}}}},
    }
    ours = {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {"f:data": {"f:ca.crt": {}}},
    }
    raw = departed_config_map(flux, ours, annotations={}, data={CA_KEY: "pem"})
    target = departed_record(raw)
    assert target.handover == (Handover(0, "flux", "Apply", (), ("f:data", "f:ca.crt")),)
    after = apply_json_patch(raw, release_ops(target))
    assert fields_of(after, "flux")["f:data"] == {"f:ca.crt": {}}


def test_a_truststore_key_the_annotation_no_longer_names_is_left_unowned() -> None:
    """The admission policy admits handing over only the truststore key the annotation
    names (a stolen token must not hand an arbitrary binaryData key to a GitOps owner,
    whose next apply would delete it): a key no longer named stays, owned by nobody."""
    raw = departed_config_map(FLUX, OURS_WITH_STORE, annotations={})
    target = departed_record(raw)
    assert target.handover == (Handover(0, "flux", "Apply", ("f:data",), ("f:ca.crt",)),)
    assert target.unowned == ("binaryData[truststore.p12]",)


def test_a_released_config_map_nobody_else_owns_keeps_ca_crt_unowned() -> None:
    """No other entry (but a subresource's) can take `ca.crt`: it stays, owned by nobody,
    as before; only our entry and the mark go."""
    status: Any = {"manager": "x", "operation": "Update", "subresource": "status", "fieldsV1": {}}
    ours = {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {"f:data": {"f:ca.crt": {}}},
    }
    target = departed_record(departed_config_map(status, ours, annotations={}))
    assert (target.handover, target.unowned) == ((), ("data[ca.crt]",))
    ops = release_ops(target)
    assert not any("fieldsV1" in op["path"] or "/data" in op["path"] for op in ops)


def test_a_labelled_config_map_whose_annotation_went_hands_ca_crt_over_too() -> None:
    """The opt-in annotation removed, the label kept: released the same way."""
    ours: Any = {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {"f:data": {"f:ca.crt": {}}},
    }
    raw = config_map(annotations={}, data={"mode": "prod", CA_KEY: "x"}, managers=[FLUX, ours])
    target = to_target(raw)
    assert decisions.decide(target, [ctb("b", ["a"])]) == decisions.Release()
    assert target.handover == (Handover(0, "flux", "Apply", ("f:data",), ("f:ca.crt",)),)
    after = apply_json_patch(raw, release_ops(target))
    assert "f:ca.crt" in fields_of(after, "flux")["f:data"]


# the controller's release, over seeded caches ---------------------------------------------


class RecordingClient:
    """Records writes; `live` answers GETs (a 404 when absent)."""

    def __init__(self, live: dict[str, Any] | None = None) -> None:
        self.patches: list[tuple[str, Any, Any]] = []
        self.gets: list[str] = []
        self.live = live or {}

    def patch(self, path: str, body: Any, *, patch_type: str, params: Any, **_: Any) -> Any:
        assert patch_type == "application/json-patch+json"
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


def injector(
    client: RecordingClient, *targets: Any, departed: FakeCache[Any] | None = None
) -> tuple[InjectorController, Any]:
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
        Caches(
            caches,
            FakeCache([ctb("b", ["a"])], key=lambda b: b["metadata"]["name"]),
            {"ConfigMap": departed} if departed is not None else {},
        ),
        NoEvents(),
        registry=CollectorRegistry(),
    )
    return ctrl, caches


def test_sync_releases_by_removing_our_entry_without_force() -> None:
    client = RecordingClient()
    hooks = {
        "metadata": {"name": "h", "uid": "u", "managedFields": [OURS]},
        "webhooks": [{"name": "w0", "clientConfig": {"caBundle": "QQ=="}}],
    }
    target = to_webhook_target(VALIDATING_WEBHOOK, hooks)
    ctrl, _ = injector(client, target)
    ctrl.sync(target.key)
    ((path, body, params),) = client.patches
    assert path == path_of(target) and body == release_ops(target)
    assert params == {"fieldManager": FIELD_MANAGER}
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "released") == 1


def leaves_the_watch(caches: dict[str, FakeCache[Any]], target: Any) -> None:
    """What the label-selected informer does when the label goes (or the object)."""
    del caches["ConfigMap"][f"{target.namespace}/{target.name}"]
    for _, _, on_delete in caches["ConfigMap"].handlers:
        assert on_delete is not None
        on_delete(target)


def departed_cache(*raws: dict[str, Any]) -> FakeCache[Any]:
    """The informer of ConfigMaps bearing our mark without the opt-in label."""
    return FakeCache(
        [departed_record(raw) for raw in raws], key=lambda t: f"{t.namespace}/{t.name}"
    )


def test_a_config_map_that_lost_its_label_is_released_reading_nothing() -> None:
    """The label goes: the label-selected informer drops it, the departed informer (our
    mark without the opt-in label) has its record; the release needs no read."""
    target = to_target(config_map(managers=[OURS]))
    unlabelled = config_map(managers=[OURS])
    unlabelled["metadata"]["labels"] = {MARK_LABEL: "true"}
    client = RecordingClient()
    ctrl, caches = injector(client, target, departed=departed_cache(unlabelled))
    leaves_the_watch(caches, target)
    ctrl.sync(target.key)
    [(path, body, _)] = client.patches
    assert client.gets == [] and path == path_of(target)
    assert body[-2:] == [
        {
            "op": "test",
            "path": "/metadata/labels/service-serving-signer~1ca-injected",
            "value": "true",
        },
        {"op": "remove", "path": "/metadata/labels/service-serving-signer~1ca-injected"},
    ]
    assert {"op": "remove", "path": "/metadata/managedFields/0"} in body


def test_the_controllers_release_of_a_departed_config_map_hands_ca_crt_to_its_owner(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Over the departed informer's cache, the one release patch the controller sends
    adds `ca.crt` to the owner's entry; a ConfigMap with nobody to take it is released
    with a log line naming what stays owned by nobody."""
    raw = departed_config_map(FLUX, OURS_WITH_STORE)
    target = to_target(config_map(managers=[FLUX, OURS_WITH_STORE]))
    client = RecordingClient()
    ctrl, caches = injector(client, target, departed=departed_cache(raw))
    leaves_the_watch(caches, target)
    with caplog.at_level(logging.INFO, logger="injector.controller"):
        ctrl.sync(target.key)
    [(_, body, _)] = client.patches
    assert body == release_ops(departed_record(raw))
    assert "f:ca.crt" in fields_of(apply_json_patch(raw, body), "flux")["f:data"]
    assert not [r for r in caplog.records if "owned by no field manager" in r.getMessage()]
    ours = {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {"f:data": {"f:ca.crt": {}}},
    }
    lonely = departed_config_map(ours, annotations={})
    client = RecordingClient()
    ctrl, caches = injector(client, target, departed=departed_cache(lonely))
    leaves_the_watch(caches, target)
    with caplog.at_level(logging.INFO, logger="injector.controller"):
        ctrl.sync(target.key)
    assert client.patches
    [line] = [r.getMessage() for r in caplog.records if "owned by no field manager" in r.message]
    assert "data[ca.crt]" in line


def test_a_config_map_really_deleted_is_not_released() -> None:
    target = to_target(config_map(managers=[OURS]))
    client = RecordingClient()
    ctrl, caches = injector(client, target, departed=departed_cache())
    leaves_the_watch(caches, target)
    ctrl.sync(target.key)
    assert client.gets == [] and client.patches == []


def test_a_config_map_we_wrote_before_the_mark_existed_is_marked() -> None:
    """The mark is how a release is found: a current ConfigMap we own fields of without
    it is written once to carry it."""
    bundle = normalize_bundle(pem("a"))
    raw = config_map(managers=[OURS], data={CA_KEY: bundle})
    assert isinstance(decisions.decide(to_target(raw), [ctb("b", ["a"])]), decisions.Inject)
    raw["metadata"]["labels"][MARK_LABEL] = "true"
    assert isinstance(decisions.decide(to_target(raw), [ctb("b", ["a"])]), decisions.UpToDate)


def test_our_write_marks_a_config_map_once() -> None:
    target = to_target(config_map(data={"app.conf": "x"}))
    mark = {
        "op": "add",
        "path": "/metadata/labels/service-serving-signer~1ca-injected",
        "value": "true",
    }
    assert mark in patch_ops(target, normalize_bundle(pem("a")), "n")
    raw = config_map(data={"app.conf": "x"})
    raw["metadata"]["labels"][MARK_LABEL] = "true"
    assert mark not in patch_ops(to_target(raw), normalize_bundle(pem("a")), "n")


def test_a_truststore_write_reads_the_password_the_record_keeps_only_a_digest_of() -> None:
    raw = config_map(STORE_ANNOTATIONS)
    target = to_target(raw)
    assert "changeit" not in repr(target)
    client = RecordingClient({path_of(target): raw})
    ctrl, _ = injector(client, target)
    ctrl.sync(target.key)
    [(_, body, _)] = client.patches
    [store] = [op["value"] for op in body if op["path"] == "/binaryData"]
    assert truststore_anchors(base64.b64decode(store["truststore.p12"]), "changeit") == (
        anchor_ders(normalize_bundle(pem("a")))
    )


def test_a_password_changed_since_the_cache_saw_it_is_not_written_with() -> None:
    target = to_target(config_map(STORE_ANNOTATIONS))
    newer = config_map({**STORE_ANNOTATIONS, TRUSTSTORE_PASSWORD_ANNOTATION: "newer"})
    client = RecordingClient({path_of(target): newer})
    ctrl, _ = injector(client, target)
    ctrl.sync(target.key)  # the object's watch event brings the new password
    assert client.gets == [path_of(target)] and client.patches == []
