"""The injector's records, decisions and sync, against seeded caches and a recording
client (no server): what is written, when nothing is, and which Events say why."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client import CollectorRegistry

from injector import decide as decisions
from injector.controller import (
    FIELD_MANAGER,
    JSON_PATCH,
    SELECTION_INDEX,
    Caches,
    InjectorController,
    bundle_record,
)
from injector.convergence import fingerprints
from injector.targets import (
    ANNOTATION,
    API_SERVICE,
    CRD,
    MUTATING_WEBHOOK,
    VALIDATING_WEBHOOK,
    Target,
    injected_note,
    patch_ops,
    to_target,
    value_digest,
)
from kube.client import ApiError, Client
from kube.events import ObjectRef
from tests.unit import pki
from tests.unit.fakes import FakeCache
from trust.bundle import normalize_bundle
from trust.selector import parse_selector_json

SIGNER = "kubernetes.io/service-serving"
SELECT_ALL = json.dumps({"signerName": SIGNER, "labelSelector": {}})


def pem(name: str) -> str:
    return pki.ca(name).cert.public_bytes(Encoding.PEM).decode()


def ctb(name: str, roots: list[str], *, signer: str = SIGNER, labels: Any = None) -> Any:
    return bundle_record(
        {
            "metadata": {"name": name, "labels": labels or {}, "uid": "u", "managedFields": []},
            "spec": {"signerName": signer, "trustBundle": "".join(pem(r) for r in roots)},
        }
    )


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def webhook_config(
    name: str = "hooks",
    annotation: str | None = SELECT_ALL,
    ca_bundles: tuple[str, ...] = ("", ""),
    kind: str = "ValidatingWebhookConfiguration",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}"}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation, "other": "x"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "webhooks": [
            {
                "name": f"w{i}.example.com",
                "clientConfig": {"service": {"namespace": "ns", "name": "svc"}, "caBundle": ca},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "rules": [{"operations": ["CREATE"]}],
            }
            for i, ca in enumerate(ca_bundles)
        ],
    }


def api_service(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "v1.example.com", "uid": "u", "annotations": {ANNOTATION: SELECT_ALL}},
        "spec": {"group": "example.com", "version": "v1", "groupPriorityMinimum": 1, **spec},
    }


def crd(conversion: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "things.example.com", "uid": "u", "annotations": {ANNOTATION: "{}"}},
        "spec": {"group": "example.com", "versions": [{"name": "v1", "schema": {"huge": 1}}]}
        | ({"conversion": conversion} if conversion is not None else {}),
    }


# records and apply bodies -------------------------------------------------------------


def test_webhook_record_keeps_only_names_and_digests_of_ca_bundles() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=("QQ==", "")))
    assert target.annotation == SELECT_ALL
    assert [(s.webhook, s.digest) for s in target.slots] == [
        ("w0.example.com", value_digest("QQ==")),
        ("w1.example.com", value_digest("")),
    ]
    assert target.not_applicable is None
    assert target.key == "ValidatingWebhookConfiguration/hooks"


@pytest.mark.parametrize(
    ("kind", "raw", "fragment"),
    [
        (API_SERVICE, api_service(), "local APIService"),
        (
            API_SERVICE,
            api_service(service={"name": "s", "namespace": "n"}, insecureSkipTLSVerify=True),
            "insecureSkipTLSVerify",
        ),
        (CRD, crd(None), "conversion.strategy"),
        (CRD, crd({"strategy": "None"}), "conversion.strategy"),
        (VALIDATING_WEBHOOK, webhook_config(ca_bundles=()), "no webhooks"),
    ],
    ids=["local-apiservice", "insecure-apiservice", "crd-no-conversion", "crd-none", "no-hooks"],
)
def test_objects_that_cannot_carry_a_ca_bundle_say_why(kind: Any, raw: Any, fragment: str) -> None:
    target = to_target(kind, raw)
    assert target.not_applicable is not None and fragment in target.not_applicable
    decision = decisions.decide(
        Target(**{**target.__dict__, "annotation": SELECT_ALL}), [ctb("b", ["a"])]
    )
    assert isinstance(decision, decisions.Invalid)
    assert decision.reason == decisions.REASON_NOT_APPLICABLE


# decisions ----------------------------------------------------------------------------


def test_decide_unifies_every_selected_bundle_into_every_slot() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    bundles = [ctb("b1", ["a", "b"]), ctb("b2", ["b", "c"]), ctb("o", ["d"], signer="x.io/y")]
    decision = decisions.decide(target, bundles)
    assert isinstance(decision, decisions.Inject)
    assert decision.sources == 2
    assert decision.bundle == normalize_bundle(pem("a") + pem("b") + pem("c"))
    assert base64.b64decode(decision.ca_bundle).decode() == decision.bundle


def test_decide_up_to_date_when_every_slot_matches() -> None:
    bundle = normalize_bundle(pem("a"))
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=(b64(bundle), b64(bundle))))
    assert isinstance(decisions.decide(target, [ctb("b", ["a"])]), decisions.UpToDate)


def test_decide_rewrites_when_one_slot_drifted() -> None:
    bundle = normalize_bundle(pem("a"))
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=(b64(bundle), b64(pem("b")))))
    assert isinstance(decisions.decide(target, [ctb("b", ["a"])]), decisions.Inject)


def test_decide_ignores_objects_without_the_annotation() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=None))
    assert decisions.decide(target, [ctb("b", ["a"])]) == decisions.Ignore()


BAD_ANNOTATIONS = [
    ("{signerName: x}", "not valid JSON"),
    ('{"name": "b", "signerName": "kubernetes.io/service-serving"}', "not both"),
    ('{"name": "b", "labelSelector": {}}', "exclusive with labelSelector"),
    ('{"labelSelector": {}}', "labelSelector requires signerName"),
    ('{"signerName": "kubernetes.io/service-serving", "labelSelectr": {}}', "unknown field"),
    (
        '{"signerName": "kubernetes.io/service-serving", "labelSelector": '
        '{"matchExpressions": [{"key": "a", "operator": "Near"}]}}',
        "unknown operator",
    ),
]


@pytest.mark.parametrize(("annotation", "fragment"), BAD_ANNOTATIONS)
def test_decide_bad_annotation_is_invalid_with_the_problem(annotation: str, fragment: str) -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    decision = decisions.decide(target, [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Invalid)
    assert decision.reason == decisions.REASON_INVALID_SELECTOR
    assert fragment in decision.message and ANNOTATION in decision.message


@pytest.mark.parametrize(
    "annotation",
    [
        json.dumps({"signerName": SIGNER}),
        json.dumps({"signerName": SIGNER, "labelSelector": {"matchLabels": {"x": "y"}}}),
        json.dumps({"name": "missing"}),
    ],
    ids=["nil-label-selector", "no-label-match", "no-such-name"],
)
def test_decide_empty_selection_keeps_current(annotation: str) -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    decision = decisions.decide(target, [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Empty)
    assert "current caBundle is kept" in decision.message


def test_selection_index_values_match_bundle_keys() -> None:
    by_name = decisions.selection_keys(parse_selector_json('{"name": "b1"}'))
    by_signer = decisions.selection_keys(parse_selector_json(SELECT_ALL))
    keys = decisions.bundle_keys(ctb("b1", ["a"]))
    assert set(by_name) <= set(keys) and set(by_signer) <= set(keys)
    assert decisions.bundle_keys(ctb("b2", ["a"], signer="x.io/y")) == ["name:b2", "signer:x.io/y"]


# the sync, against seeded caches ------------------------------------------------------


def selection(target: Target) -> list[str]:
    selector = decisions.selector_of(target)
    return decisions.selection_keys(selector) if selector is not None else []


def target_cache() -> FakeCache[Target]:
    return FakeCache(key=lambda target: target.name, indexers={SELECTION_INDEX: selection})


class FakeClient:
    def __init__(self, error: ApiError | None = None) -> None:
        self.patches: list[tuple[str, Any, str, Any]] = []
        self.error = error

    def patch(self, path: str, body: Any, *, patch_type: str, params: Any, **_: Any) -> Any:
        self.patches.append((path, body, patch_type, params))
        if self.error is not None:
            raise self.error
        return {}

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        return {"items": []}  # the departed-ConfigMap sweep's LIST: none


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, ObjectRef, str, str]] = []

    def warning(self, regarding: ObjectRef, reason: str, note: str, action: str) -> None:
        self.events.append(("Warning", regarding, reason, note))


def controller(
    targets: list[Target], bundles: list[Any], client: FakeClient | None = None, **kw: Any
) -> tuple[InjectorController, FakeClient, Events, dict[str, FakeCache[Target]]]:
    fake = client or FakeClient()
    events = Events()
    caches = {
        k.kind: target_cache() for k in (VALIDATING_WEBHOOK, MUTATING_WEBHOOK, API_SERVICE, CRD)
    }
    for target in targets:
        caches[target.kind].put(target)
    ctrl = InjectorController(
        cast(Client, fake),
        Caches(caches, FakeCache(bundles, key=lambda b: str(b["metadata"]["name"]), **kw)),
        events,
        registry=CollectorRegistry(),
    )
    return ctrl, fake, events, caches


def test_sync_applies_under_own_field_manager_without_an_event() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    [(path, body, patch_type, params)] = client.patches
    assert path == "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/hooks"
    assert patch_type == JSON_PATCH
    assert params == {"fieldManager": FIELD_MANAGER}
    value = b64(normalize_bundle(pem("a")))
    expires = pki.ca("a").cert.not_valid_after_utc.timestamp()
    note = injected_note(value, fingerprints(normalize_bundle(pem("a"))), expires)
    assert body == patch_ops(target, value, note)
    assert events.events == []
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "injected") == 1
    expiry = ctrl.metrics.registry.get_sample_value("cabundle_injector_anchor_expiry_seconds")
    assert expiry == pki.ca("a").cert.not_valid_after_utc.timestamp()


def test_sync_writes_nothing_when_current() -> None:
    bundle = b64(normalize_bundle(pem("a")))
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=(bundle, bundle)))
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    assert client.patches == [] and events.events == []
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "unchanged") == 1


@pytest.mark.parametrize(("annotation", "fragment"), BAD_ANNOTATIONS)
def test_sync_bad_annotation_warns_and_writes_nothing(annotation: str, fragment: str) -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    assert client.patches == []
    [(type_, ref, reason, note)] = events.events
    assert (type_, ref.name, reason) == ("Warning", "hooks", decisions.REASON_INVALID_SELECTOR)
    assert (ref.kind, ref.namespace, ref.uid) == ("ValidatingWebhookConfiguration", "", "uid-hooks")
    assert fragment in note
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "invalid") == 1


def test_sync_empty_selection_warns_and_keeps_current() -> None:
    target = to_target(
        VALIDATING_WEBHOOK,
        webhook_config(annotation='{"name": "gone"}', ca_bundles=("QQ==", "QQ==")),
    )
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    assert client.patches == []
    assert [(e[0], e[2]) for e in events.events] == [("Warning", decisions.REASON_EMPTY)]
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "empty") == 1


def test_sync_ignores_unannotated_and_missing_objects() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=None))
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    ctrl.sync("APIService/v1.nothing.example.com")
    assert client.patches == [] and events.events == []
    assert sum(ctrl.metrics.count(k, "unchanged") for k in ctrl.caches) == 0


def test_no_sync_before_the_bundle_cache_has_synced() -> None:
    """Deciding from an empty bundle cache would be deciding from nothing: the loop starts
    the workers only once every cache has synced."""
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, client, _, _ = controller([target], [ctb("b1", ["a"])], synced=False)
    assert not ctrl.has_synced()
    ctrl.queue.add(target.key)
    stop = threading.Event()
    thread = threading.Thread(target=ctrl.run, args=(stop,), daemon=True)
    thread.start()
    try:
        time.sleep(0.3)
        assert client.patches == []
        cast(FakeCache[Any], ctrl.bundles).synced = True
        deadline = time.monotonic() + 5
        while not client.patches and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(client.patches) == 1
    finally:
        stop.set()
        thread.join(5)


def loop_errors(ctrl: InjectorController) -> float | None:
    return ctrl.metrics.registry.get_sample_value(
        "controller_sync_total", {"controller": "injector", "result": "error"}
    )


def test_an_api_error_raises_for_the_loop_which_counts_and_retries_it() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, _, events, _ = controller(
        [target], [ctb("b1", ["a"])], FakeClient(ApiError(503, "Service Unavailable"))
    )
    with pytest.raises(ApiError):
        ctrl.sync(target.key)
    ctrl.queue.add(target.key)
    assert ctrl.loop.process_next_work_item()
    assert loop_errors(ctrl) == 1
    assert ctrl.queue.num_requeues(target.key) == 1
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "injected") == 0
    assert events.events == []
    ctrl.queue.shut_down()


def test_sync_object_deleted_meanwhile_is_not_an_error() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, _, _, _ = controller([target], [ctb("b1", ["a"])], FakeClient(ApiError(404, "Not Found")))
    ctrl.queue.add(target.key)
    assert ctrl.loop.process_next_work_item()
    assert loop_errors(ctrl) == 0
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "injected") == 0
    ctrl.queue.shut_down()


def test_bundle_event_requeues_only_objects_selecting_it() -> None:
    by_signer = to_target(VALIDATING_WEBHOOK, webhook_config("by-signer"))
    by_name = to_target(VALIDATING_WEBHOOK, webhook_config("by-name", '{"name": "b1"}'))
    other = to_target(VALIDATING_WEBHOOK, webhook_config("other", '{"name": "b2"}'))
    elsewhere = to_target(
        MUTATING_WEBHOOK,
        webhook_config("elsewhere", json.dumps({"signerName": "x.io/y", "labelSelector": {}})),
    )
    ctrl, _, _, _ = controller([by_signer, by_name, other, elsewhere], [])
    ctrl.enqueue_selecting(ctb("b1", ["a"]))
    queued = set()
    while len(ctrl.queue):
        key, _ = ctrl.queue.get()
        assert key is not None
        queued.add(key)
        ctrl.queue.done(key)
    assert queued == {by_signer.key, by_name.key}


def test_resync_covers_annotated_and_still_owned_objects_never_the_rest() -> None:
    annotated = to_target(API_SERVICE, api_service(service={"namespace": "n", "name": "s"}))
    plain = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=None))
    owned = dataclasses.replace(plain, name="owned", owned=((0, "Update"),))
    ctrl, _, _, _ = controller([annotated, plain, owned], [])
    assert sorted(ctrl.resync()) == [
        "APIService/v1.example.com",
        "ValidatingWebhookConfiguration/owned",
    ]


def test_a_released_object_is_released_once_not_on_every_resync() -> None:
    # The release drops our managedFields entry; the object's next record is unmanaged,
    # so a cluster's unannotated objects cost no apply per resync.
    owned = dataclasses.replace(
        to_target(VALIDATING_WEBHOOK, webhook_config(annotation=None)), owned=((0, "Update"),)
    )
    ctrl, client, _, caches = controller([owned], [])
    for _ in range(3):
        for key in ctrl.resync():
            ctrl.sync(key)
        caches["ValidatingWebhookConfiguration"].items["hooks"] = dataclasses.replace(
            owned, owned=()
        )
    assert len(client.patches) == 1


def test_deleted_object_leaves_the_expiry_gauge() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, _, _, caches = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    del caches["ValidatingWebhookConfiguration"].items["hooks"]
    ctrl.sync(target.key)
    value = ctrl.metrics.registry.get_sample_value("cabundle_injector_anchor_expiry_seconds")
    assert value is not None and value != value  # NaN: no caBundle kept


# a `name` selector on a hash-named bundle (issue 30) ---------------------------------

HASH_NAMED = "kubernetes.io:service-serving:0123456789abcdef01234567"
STABLE_NAMED = "kubernetes.io:service-serving:trust-anchors"


def test_name_selector_on_a_hash_named_bundle_injects_and_warns_to_name_the_stable_one() -> None:
    """A hash-named bundle is deleted at the next rotation; the selection then resolves
    empty and the old caBundle is kept for ever. Said while it still works."""
    annotation = json.dumps({"name": HASH_NAMED})
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    ctrl, client, events, _ = controller([target], [ctb(HASH_NAMED, ["a"])])
    ctrl.sync(target.key)
    assert len(client.patches) == 1
    [(type_, _, reason, note)] = events.events
    assert (type_, reason) == ("Warning", decisions.REASON_HASH_NAMED)
    assert STABLE_NAMED in note


def test_name_selector_on_a_gone_hash_named_bundle_names_the_stable_one() -> None:
    annotation = json.dumps({"name": HASH_NAMED})
    target = to_target(
        VALIDATING_WEBHOOK, webhook_config(annotation=annotation, ca_bundles=("QQ==", "QQ=="))
    )
    ctrl, _, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    [(_, _, reason, note)] = events.events
    assert reason == decisions.REASON_EMPTY and STABLE_NAMED in note


def test_name_selector_on_the_stable_bundle_is_quiet() -> None:
    annotation = json.dumps({"name": STABLE_NAMED})
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    ctrl, client, events, _ = controller([target], [ctb(STABLE_NAMED, ["a"])])
    ctrl.sync(target.key)
    assert len(client.patches) == 1 and events.events == []
