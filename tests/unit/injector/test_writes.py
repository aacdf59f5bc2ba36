"""GitOps-safe writes, without a server: the injector writes a
test-guarded JSON patch that sets only caBundle leaves (an Update entry owns those leaves
and no list key), releases by removing only its own managedFields entries (the values
stay), never writes over a field another Apply manager owns (Event naming it, a
`conflict` count), and treats a write the API refuses as the object owner's to fix
(Event, `refused` count, no retry)."""

from __future__ import annotations

from typing import Any

from injector import configmaps
from injector import decide as decisions
from injector.kinds import API_SERVICE, CRD, VALIDATING_WEBHOOK, patch_ops, to_target
from injector.targets import FIELD_MANAGER, release_ops
from kube.client import ApiError
from kube.controller import Requeue
from tests.unit.injector.builders import api_service, b64, crd, ctb, pem, webhook_config
from tests.unit.injector.harness import FakeClient, controller
from tests.unit.injector.test_configmaps import config_map
from trust.bundle import normalize_bundle

GITOPS = {
    "manager": "gitops",
    "operation": "Apply",
    "fieldsV1": {
        "f:webhooks": {
            'k:{"name":"w0.example.com"}': {
                ".": {},
                "f:name": {},
                "f:clientConfig": {"f:service": {}},
            }
        }
    },
}


def with_managers(raw: dict[str, Any], *entries: dict[str, Any]) -> dict[str, Any]:
    raw["metadata"]["managedFields"] = list(entries)
    return raw


def test_webhook_patch_is_guarded_by_uid_and_names_and_sets_only_ca_bundles() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    assert patch_ops(target, "Q0E=", "n") == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-hooks"},
        {
            "op": "add",
            "path": "/metadata/annotations/service-serving-signer~1injected",
            "value": "n",
        },
        {"op": "test", "path": "/webhooks/0/name", "value": "w0.example.com"},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="},
        {"op": "test", "path": "/webhooks/1/name", "value": "w1.example.com"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": "Q0E="},
    ]


def test_apiservice_and_crd_patches_set_one_leaf() -> None:
    service = to_target(API_SERVICE, api_service(service={"namespace": "n", "name": "s"}))
    assert patch_ops(service, "Q0E=", "n")[2:] == [
        {"op": "add", "path": "/spec/caBundle", "value": "Q0E="}
    ]
    conversion = {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x"}}}
    definition = to_target(CRD, crd(conversion))
    assert patch_ops(definition, "Q0E=", "n")[2:] == [
        {"op": "test", "path": "/spec/conversion/strategy", "value": "Webhook"},
        {
            "op": "add",
            "path": "/spec/conversion/webhook/clientConfig/caBundle",
            "value": "Q0E=",
        },
    ]


def test_config_map_patch_adds_our_keys_into_existing_maps_only() -> None:
    bundle = normalize_bundle(pem("a"))
    has_data = configmaps.to_target(config_map(data={"app.conf": "x"}))
    ops = configmaps.patch_ops(has_data, bundle, "n")
    assert {"op": "add", "path": "/data/ca.crt", "value": bundle} in ops
    assert not any(op["path"] == "/data" for op in ops)
    # No data map yet: it is created whole, guarded by the resourceVersion the record saw
    # (so a map someone added meanwhile is never replaced).
    raw = config_map()
    del raw["data"]
    raw["metadata"]["resourceVersion"] = "42"
    ops = configmaps.patch_ops(configmaps.to_target(raw), bundle, "n")
    assert {"op": "test", "path": "/metadata/resourceVersion", "value": "42"} in ops
    assert {"op": "add", "path": "/data", "value": {"ca.crt": bundle}} in ops


def test_release_removes_only_our_managed_fields_entries_and_no_value() -> None:
    ours = {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": {}}
    legacy = {"manager": FIELD_MANAGER, "operation": "Apply", "fieldsV1": {}}
    raw = with_managers(webhook_config(annotation=None), ours, GITOPS, legacy)
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.managed
    ops = release_ops(target)
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-hooks"},
        {"op": "test", "path": "/metadata/managedFields/2/manager", "value": FIELD_MANAGER},
        {"op": "remove", "path": "/metadata/managedFields/2"},
        {"op": "test", "path": "/metadata/managedFields/0/manager", "value": FIELD_MANAGER},
        {"op": "remove", "path": "/metadata/managedFields/0"},
    ]
    assert all(op["path"].startswith("/metadata/") for op in ops)


def foreign_ca_bundle_owner() -> dict[str, Any]:
    return {
        "manager": "argocd-controller",
        "operation": "Apply",
        "fieldsV1": {
            "f:webhooks": {'k:{"name":"w1.example.com"}': {"f:clientConfig": {"f:caBundle": {}}}}
        },
    }


def test_a_ca_bundle_another_apply_manager_owns_is_not_written_and_is_reported() -> None:
    raw = with_managers(webhook_config(), GITOPS, foreign_ca_bundle_owner())
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.others == ("argocd-controller",)
    decision = decisions.decide(target, [ctb("b1", ["a"])])
    assert isinstance(decision, decisions.Conflict)
    ctrl, client, events, _ = controller([target], [ctb("b1", ["a"])])
    ctrl.sync(target.key)
    assert client.patches == []
    [(_, _, reason, note)] = events.events
    assert reason == decisions.REASON_CONFLICT and "argocd-controller" in note
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "conflict") == 1


def test_an_update_manager_or_an_apply_manager_of_other_fields_is_no_conflict() -> None:
    update = {**foreign_ca_bundle_owner(), "operation": "Update", "manager": "kubectl-edit"}
    raw = with_managers(webhook_config(), GITOPS, update)
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.others == ()
    assert isinstance(decisions.decide(target, [ctb("b1", ["a"])]), decisions.Inject)


def test_config_map_keys_owned_by_another_apply_manager_conflict() -> None:
    owner = {
        "manager": "flux",
        "operation": "Apply",
        "fieldsV1": {"f:data": {"f:ca.crt": {}}},
    }
    target = configmaps.to_target(with_managers(config_map(), owner))
    assert target.others == ("flux",)
    assert isinstance(decisions.decide(target, [ctb("b1", ["a"])]), decisions.Conflict)


def test_a_failed_guard_is_not_an_error_it_is_looked_at_again_after_a_back_off() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    failed = ApiError(422, "Invalid", {"reason": "Invalid", "details": {}})
    ctrl, _, events, _ = controller([target], [ctb("b1", ["a"])], FakeClient(failed))
    assert ctrl.sync(target.key) == Requeue(decisions.FAILURE_FIRST)
    assert events.events == []


def test_a_write_the_api_refuses_is_an_event_on_the_object_not_a_retry() -> None:
    refused = ApiError(
        422,
        "Invalid",
        {
            "reason": "Invalid",
            "message": 'ConfigMap "trust" is invalid: []: Too long: '
            "must have at most 1048576 bytes",
            "details": {"causes": [{"reason": "FieldValueTooLong", "field": "[]"}]},
        },
    )
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    ctrl, _, events, _ = controller([target], [ctb("b1", ["a"])], FakeClient(refused))
    assert ctrl.sync(target.key) is None  # no raise: the loop does not retry it
    [(_, _, reason, note)] = events.events
    assert reason == decisions.REASON_REFUSED and "at most 1048576 bytes" in note
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "refused") == 1


REFUSED = ApiError(
    422,
    "Invalid",
    {"reason": "Invalid", "details": {"causes": [{"reason": "FieldValueInvalid"}]}},
)


def test_a_refused_write_is_not_sent_again_until_the_object_or_the_bundle_changes() -> None:
    """The resync re-drives every key, a bundle event every selecting object: the refusal
    is remembered by the object's resourceVersion and what was written, and the object
    stays blocked in the report meanwhile — no PATCH and no Event again."""
    raw = webhook_config()
    raw["metadata"]["resourceVersion"] = "7"
    target = to_target(VALIDATING_WEBHOOK, raw)
    ctrl, client, events, caches = controller([target], [ctb("b1", ["a"])], FakeClient(REFUSED))
    for _ in range(3):
        for key in ctrl.resync():
            ctrl.sync(key)
    assert len(client.patches) == 1 and len(events.events) == 1
    [status] = ctrl.statuses()
    assert status.state == "stale" and status.blocked
    assert ctrl.metrics.count("ValidatingWebhookConfiguration", "refused") == 1

    raw["metadata"]["resourceVersion"] = "8"  # the owner changed it
    caches[VALIDATING_WEBHOOK.kind].put(to_target(VALIDATING_WEBHOOK, raw))
    ctrl.sync(target.key)
    assert len(client.patches) == 2

    ctrl.bundles.items.clear()  # type: ignore[attr-defined]
    ctrl.bundles.put(ctb("b2", ["a", "b"]))  # type: ignore[attr-defined]
    ctrl.sync(target.key)  # the same object, another bundle: tried again
    assert len(client.patches) == 3


def test_a_refused_write_is_tried_again_after_its_back_off_when_nothing_changed() -> None:
    """What refused it may be fixed outside the object (an admission policy removed, a
    webhook mended): the refusal holds the write for REFUSAL_FIRST, doubling to
    REFUSAL_MAX, and the sync asks to be woken then — never a write per resync."""
    raw = webhook_config()
    raw["metadata"]["resourceVersion"] = "7"
    target = to_target(VALIDATING_WEBHOOK, raw)
    now = [1000.0]
    ctrl, client, _, _ = controller(
        [target], [ctb("b1", ["a"])], FakeClient(REFUSED), clock=lambda: now[0]
    )
    ctrl.sync(target.key)
    assert len(client.patches) == 1
    wake = ctrl.sync(target.key)  # still held: woken when the back-off ends
    assert len(client.patches) == 1
    assert wake is not None and wake.after == decisions.REFUSAL_FIRST
    now[0] += decisions.REFUSAL_FIRST
    ctrl.sync(target.key)  # the same object, the same value: tried again
    assert len(client.patches) == 2
    now[0] += decisions.REFUSAL_FIRST  # refused again: the back-off doubled
    ctrl.sync(target.key)
    assert len(client.patches) == 2
    now[0] += decisions.REFUSAL_FIRST
    ctrl.sync(target.key)
    assert len(client.patches) == 3


def retaken(theirs: str, rv: int, manager: str = "cainjector") -> Any:
    """The webhook configuration after another controller's Update wrote its caBundle."""
    raw = webhook_config(ca_bundles=(theirs,))
    raw["metadata"]["resourceVersion"] = str(rv)
    raw["metadata"]["managedFields"] = [
        {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": {"f:metadata": {}}},
        {
            "manager": manager,
            "operation": "Update",
            "fieldsV1": {
                "f:webhooks": {
                    'k:{"name":"w0.example.com"}': {"f:clientConfig": {"f:caBundle": {}}}
                }
            },
        },
    ]
    return to_target(VALIDATING_WEBHOOK, raw)


def test_a_ca_bundle_another_controller_keeps_rewriting_is_not_fought_over() -> None:
    """An Update-operation writer of the same leaf (cert-manager's cainjector, client-side
    apply, Helm 3, a script) retakes it after each write of ours: the injector backs off
    per object (exponential from 5 s, at most 5 minutes), says once who keeps retaking it,
    and counts each retake — it never writes at the other's speed."""
    theirs = b64(normalize_bundle(pem("z")))
    clock = [1000.0]
    ctrl, client, events, caches = controller([], [ctb("b1", ["a"])], clock=lambda: clock[0])
    key = f"{VALIDATING_WEBHOOK.kind}/hooks"
    delays = []
    for i in range(20):
        caches[VALIDATING_WEBHOOK.kind].put(retaken(theirs, i))  # their write, our watch
        requeue = ctrl.sync(key)
        delays.append(requeue.after if requeue is not None else None)
        clock[0] += 0.05  # client speed: 20 rewrites a second
    assert len(client.patches) <= 3, f"{len(client.patches)} PATCHes for 20 rewrites"
    assert ctrl.metrics.count(VALIDATING_WEBHOOK.kind, "contested") >= 1
    # Waiting out each back-off, the writes go on at most at 5 s, 10 s, 20 s ... 300 s.
    written = []
    for i in range(20, 40):
        clock[0] += 301
        before = len(client.patches)
        caches[VALIDATING_WEBHOOK.kind].put(retaken(theirs, i))
        ctrl.sync(key)
        written.append(len(client.patches) - before)
    assert sum(written) <= 10
    [(_, _, _, note)] = [e for e in events.events if e[2] == decisions.REASON_CONTESTED]
    assert "cainjector" in note  # once, naming the other manager
    [status] = ctrl.statuses()
    assert status.state == "conflicting" and status.blocked


def test_a_single_hand_edit_is_repaired_without_a_warning() -> None:
    theirs = b64(normalize_bundle(pem("z")))
    clock = [1000.0]
    ctrl, client, events, caches = controller([], [ctb("b1", ["a"])], clock=lambda: clock[0])
    key = f"{VALIDATING_WEBHOOK.kind}/hooks"
    caches[VALIDATING_WEBHOOK.kind].put(to_target(VALIDATING_WEBHOOK, webhook_config()))
    ctrl.sync(key)
    caches[VALIDATING_WEBHOOK.kind].put(retaken(theirs, 2, "kubectl-edit"))
    requeue = ctrl.sync(key)  # retaken once: a short pause, no Event
    assert requeue is not None and requeue.after is not None and requeue.after <= 5
    clock[0] += 5
    ctrl.sync(key)
    assert len(client.patches) == 2 and events.events == []
