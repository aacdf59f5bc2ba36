"""The injector's sync against seeded caches and a recording client (no server): what
is written, when nothing is, and which Events say why. The pure records and decisions
are in test_decide.py."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any, cast

import pytest

from injector import decide as decisions
from injector.controller import (
    FIELD_MANAGER,
    JSON_PATCH,
    InjectorController,
)
from injector.kinds import API_SERVICE, MUTATING_WEBHOOK, VALIDATING_WEBHOOK, patch_ops, to_target
from injector.targets import injected_note
from kube.client import ApiError
from kube.controller import Requeue
from tests.unit import pki
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import (
    BAD_ANNOTATIONS,
    api_service,
    b64,
    ctb,
    pem,
    webhook_config,
)
from tests.unit.injector.harness import FakeClient, controller
from trust.bundle import fingerprints, normalize_bundle

# the sync, against seeded caches ------------------------------------------------------


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


def test_an_api_error_is_contained_to_its_key_counted_and_looked_at_again_after_a_back_off() -> (
    None
):
    """A write failing with any API status is not raised to the loop (whose retries would
    keep the key from ever counting as synced): the key is `stale` (it holds what it
    selects), counted `failed`, and requeued after `FAILURE_FIRST`."""
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, _, events, _ = controller(
        [target], [ctb("b1", ["a"])], FakeClient(ApiError(503, "Service Unavailable"))
    )
    assert ctrl.sync(target.key) == Requeue(decisions.FAILURE_FIRST)
    ctrl.queue.add(target.key)
    assert ctrl.loop.process_next_work_item()
    assert loop_errors(ctrl) == 0
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "failed") == 1
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "injected") == 0
    assert status_of(ctrl).state == "stale" and not status_of(ctrl).blocked
    assert events.events == []  # an Event once the failures block it
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


# a `name` selector on a hash-named bundle ------------------------------------------------

HASH_NAMED = "kubernetes.io:service-serving:0123456789abcdef01234567"
STABLE_NAMED = "kubernetes.io:service-serving:trust-anchors"


def test_name_selector_on_a_hash_named_bundle_injects_and_warns_to_name_the_stable_one() -> None:
    """A hash-named bundle is deleted at the next rotation; the selection then resolves
    empty and the old caBundle is kept for ever. Said while it still works."""
    annotation = json.dumps({"name": HASH_NAMED})
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    bundles = [ctb(HASH_NAMED, ["a"]), ctb(STABLE_NAMED, ["a"])]
    ctrl, client, events, _ = controller([target], bundles)
    ctrl.sync(target.key)
    assert len(client.patches) == 1
    [(type_, _, reason, note)] = events.events
    assert (type_, reason) == ("Warning", decisions.REASON_HASH_NAMED)
    assert STABLE_NAMED in note


def test_the_stable_name_is_advised_only_for_a_hash_named_bundle_that_has_a_stable_twin() -> None:
    """kube-controller-manager's own hash-named bundles
    (`kubernetes.io:kube-apiserver-serving:<24 hex>`) have no `:trust-anchors` twin: the
    advice is to select by signerName, never a name nobody publishes."""
    kcm = "kubernetes.io:kube-apiserver-serving:0123456789abcdef01234567"
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=json.dumps({"name": kcm})))
    ctrl, _, events, _ = controller([target], [ctb(kcm, ["a"])])
    ctrl.sync(target.key)
    [(_, _, reason, note)] = events.events
    assert reason == decisions.REASON_HASH_NAMED
    assert "trust-anchors" not in note and "by signerName" in note


def test_name_selector_on_a_gone_hash_named_bundle_names_the_stable_one() -> None:
    annotation = json.dumps({"name": HASH_NAMED})
    target = to_target(
        VALIDATING_WEBHOOK, webhook_config(annotation=annotation, ca_bundles=("QQ==", "QQ=="))
    )
    ctrl, _, events, _ = controller([target], [ctb("b1", ["a"]), ctb(STABLE_NAMED, ["a"])])
    ctrl.sync(target.key)
    [(_, _, reason, note)] = events.events
    assert reason == decisions.REASON_EMPTY and STABLE_NAMED in note


def test_name_selector_on_the_stable_bundle_is_quiet() -> None:
    annotation = json.dumps({"name": STABLE_NAMED})
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    ctrl, client, events, _ = controller([target], [ctb(STABLE_NAMED, ["a"])])
    ctrl.sync(target.key)
    assert len(client.patches) == 1 and events.events == []


# what a write that does not land leaves behind -----------------------------------------

REFUSED = ApiError(
    422,
    "Invalid",
    {"message": "denied by policy", "details": {"causes": [{"field": "webhooks"}]}},
)
KIND = "ValidatingWebhookConfiguration"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def status_of(ctrl: InjectorController) -> Any:
    [status] = ctrl.statuses()
    return status


def test_a_refused_write_is_blocked_with_the_apis_reason_and_held_for_a_doubling_back_off() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    clock = Clock()
    ctrl, client, events, _ = controller(
        [target], [ctb("b1", ["a"])], FakeClient(REFUSED), clock=clock
    )
    ctrl.sync(target.key)
    assert len(client.patches) == 1
    [(type_, _, reason, note)] = events.events
    assert (type_, reason) == ("Warning", decisions.REASON_REFUSED)
    assert "denied by policy" in note
    assert status_of(ctrl).state == "stale" and "denied by policy" in status_of(ctrl).blocked
    assert ctrl.metrics.count(KIND, "refused") == 1
    assert ctrl.metrics.count(KIND, "injected") == 0
    # Held, unsent, until the back-off (REFUSAL_FIRST) ends; the sync asks to look again then.
    clock.now += decisions.REFUSAL_FIRST - 1
    assert ctrl.sync(target.key) == Requeue(1.0)
    assert len(client.patches) == 1 and "denied by policy" in status_of(ctrl).blocked
    clock.now += 1
    ctrl.sync(target.key)
    assert len(client.patches) == 2
    # Refused again, the same write: the back-off doubles.
    clock.now += 2 * decisions.REFUSAL_FIRST - 1
    ctrl.sync(target.key)
    assert len(client.patches) == 2
    clock.now += 1
    client.error = None
    ctrl.sync(target.key)
    assert len(client.patches) == 3
    assert status_of(ctrl).state == "current" and not status_of(ctrl).blocked
    assert ctrl.metrics.count(KIND, "injected") == 1
    # Written: nothing of the refusal is kept, the next sync writes at once.
    ctrl.sync(target.key)
    assert len(client.patches) == 4


def test_a_write_whose_guard_failed_leaves_the_object_stale_and_unblocked() -> None:
    """A failed `test` guard (the object changed since the cache saw it) is an early
    failure: `stale`, no Event, looked at again after the failure back-off."""
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    guard = ApiError(422, "Invalid", {"message": "the test failed", "details": {}})
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])], FakeClient(guard))
    assert ctrl.sync(target.key) == Requeue(decisions.FAILURE_FIRST)
    assert len(client.patches) == 1
    assert events.events == []
    assert status_of(ctrl).state == "stale" and not status_of(ctrl).blocked
    assert ctrl.metrics.count(KIND, "refused") == 0
    assert ctrl.metrics.count(KIND, "injected") == 0


def test_a_field_retaken_after_our_write_is_left_alone_for_a_doubling_back_off() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    clock = Clock()
    ctrl, client, events, caches = controller([target], [ctb("b1", ["a"])], clock=clock)
    retaken = dataclasses.replace(target, taker="helm")
    for retakes in (1, 2):
        caches[KIND].items["hooks"] = target
        ctrl.sync(target.key)  # our write lands
        caches[KIND].items["hooks"] = retaken
        delay = decisions.CONTEST_FIRST * 2 ** (retakes - 1)
        assert ctrl.sync(target.key) == Requeue(delay)
        assert len(client.patches) == retakes
        assert status_of(ctrl).state == "conflicting"
        assert status_of(ctrl).blocked == "contested by helm"
        assert ctrl.metrics.count(KIND, "contested") == retakes
        clock.now += delay
    [(_, _, reason, note)] = events.events  # at the second retake, not the first
    assert reason == decisions.REASON_CONTESTED and "helm" in note
