"""Every outcome of every object is classified, in bounded time: nothing a tenant writes
or an API answers makes a sync raise, hold the convergence report incomplete, or hold a
rotation through a namespaced object (the classification table of docs/inject.md).

The tests drive the controller over seeded caches, as the loop would: each sync's
`Requeue` is honoured by advancing a fake clock past it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

import pytest

from injector import decide as decisions
from injector.configmaps import to_target as config_map_target
from injector.controller import SELECTION_INDEX, InjectorController
from injector.kinds import API_SERVICE, CRD, VALIDATING_WEBHOOK, to_target
from injector.targets import INJECTED_ANNOTATION, Target, injected_note, value_digest
from kube.client import ApiError
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import api_service, crd, ctb, pem, webhook_config
from tests.unit.injector.harness import FakeClient, controller, selection
from trust import convergence
from trust.bundle import fingerprints, normalize_bundle

STABLE = "kubernetes.io:service-serving:trust-anchors"
HASHED_NEW = "kubernetes.io:service-serving:0123456789abcdef01234567"
KIND = VALIDATING_WEBHOOK.kind
TENANT_KEY = "ConfigMap/tenant/web-ca"


def fp(name: str) -> str:
    return next(iter(fingerprints(normalize_bundle(pem(name)))))


def versioned(bundle: Any, rv: str) -> Any:
    bundle = json.loads(json.dumps(bundle))
    bundle["metadata"]["resourceVersion"] = rv
    return bundle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lead(ctrl: InjectorController) -> None:
    """Start leading, then the informer's adds of every cached bundle."""
    ctrl.progress.begin()
    for bundle in ctrl.bundles.list():
        ctrl._on_bundle(bundle)


def drain(ctrl: InjectorController) -> list[str]:
    """Run every queued key once (what the workers would do), in queue order."""
    done = []
    while len(ctrl.queue) > 0:
        key, _ = ctrl.queue.get()
        assert key is not None
        ctrl.sync(key)
        ctrl.queue.done(key)
        done.append(key)
    return done


def tenant_raw(annotation: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web-ca",
            "namespace": "tenant",
            "uid": "u1",
            "resourceVersion": "5",
            "labels": {"service-serving-signer/inject-ca-bundle": "true"},
            "annotations": {"service-serving-signer/ca-bundle-from": annotation},
        },
        "data": {"x": "y"},
        **extra,
    }


def with_config_maps(ctrl: InjectorController, *targets: Target) -> FakeCache[Target]:
    """A ConfigMap cache whose indexer behaves as kube.informer's (one that raises is
    logged and indexes nothing)."""

    def indexed(target: Target) -> list[str]:
        try:
            return selection(target)
        except Exception:
            return []

    cms: FakeCache[Target] = FakeCache(
        key=lambda t: f"{t.namespace}/{t.name}", indexers={SELECTION_INDEX: indexed}
    )
    for t in targets:
        cms.put(t)
    ctrl.caches = dict(ctrl.caches) | {"ConfigMap": cms}
    return cms


def settle_until_quiet(ctrl: InjectorController, key: str, clock: Clock, times: int) -> int:
    """Sync `key` as the loop would `times` times, each after the back-off its last sync
    asked for; how many syncs asked to be looked at again."""
    requeued = 0
    for _ in range(times):
        requeue = ctrl.sync(key)
        if requeue is not None and requeue.after is not None:
            requeued += 1
            clock.now += requeue.after
    return requeued


# --- what a tenant writes -----------------------------------------------------------------


HOSTILE_SELECTORS = [
    pytest.param("[" * 4000, id="4000-brackets"),
    pytest.param("{" * 4000, id="4000-braces"),
    pytest.param('{"a":' * 900 + "1" + "}" * 900, id="deep-objects"),
    pytest.param('["\\ud800"]', id="lone-surrogate"),
    pytest.param("\x00\xff\ufffe", id="control-and-non-characters"),
    pytest.param('{"signerName": "' + "x" * 4090 + '"', id="cut-at-the-bound"),
    pytest.param("9" * 4000, id="a-huge-number"),
    pytest.param("1e999999", id="an-infinite-number"),
]


@pytest.mark.parametrize("annotation", HOSTILE_SELECTORS)
def test_a_tenants_hostile_selector_is_invalid_with_a_warning_and_the_report_completes(
    annotation: str,
) -> None:
    """A labelled tenant ConfigMap whose selector annotation no parser can take (4,000
    `[` made `json.loads` raise RecursionError out of every sync, for ever) is `Invalid`
    with a Warning Event: it selects nothing, the report completes and names nothing."""
    bundle = versioned(ctb(STABLE, ["a"]), "10")
    hostile = config_map_target(tenant_raw(annotation))
    ctrl, client, events, _ = controller([], [bundle])
    with_config_maps(ctrl, hostile)
    lead(ctrl)
    assert ctrl.sync(TENANT_KEY) is None
    report = convergence.parse(ctrl.report_value())
    assert report.complete and convergence.converged(report, fp("a"))
    assert report.lagging() == [] and client.patches == []  # it holds nothing back
    [(_, _, reason, _)] = events.events
    assert reason == decisions.REASON_INVALID_SELECTOR
    assert ctrl.metrics.count("ConfigMap", "invalid") == 1


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(ApiError(413, "RequestEntityTooLarge", {"code": 413}), id="413"),
        pytest.param(ApiError(403, "Forbidden", {"message": "denied by kyverno"}), id="403"),
        pytest.param(ApiError(400, "BadRequest", {"message": "gatekeeper"}), id="400"),
        pytest.param(ApiError(500, "InternalError", {"message": "etcd"}), id="500"),
        pytest.param(ApiError(429, "TooManyRequests"), id="429"),
        pytest.param(ApiError(404, "NotFound", {"message": "a webhook's answer"}), id="404"),
        pytest.param(ApiError(409, "Conflict", {"message": "a webhook's answer"}), id="409"),
        pytest.param(TimeoutError("read timed out"), id="timeout"),
        pytest.param(ConnectionResetError("reset by peer"), id="connection-reset"),
        pytest.param(RuntimeError("anything else"), id="any-exception"),
    ],
)
def test_a_tenant_config_map_whose_write_keeps_failing_is_blocked_and_excused(
    error: Exception,
) -> None:
    """Whatever a tenant object's write fails with — any status (a 413 at etcd's limit, a
    400/403 from a policy webhook, a 500), a timeout, any exception — it is retried after
    a back-off, and from the `FAILURE_BOUND`-th failure in a row it is `blocked`: named
    with the error, a Warning Event, counted, and excused, so the rotation goes on."""
    tenant = config_map_target(tenant_raw(json.dumps({"name": STABLE})))
    s_old = versioned(ctb(STABLE, ["a"]), "10")
    clock = Clock()
    ctrl, client, events, _ = controller([], [s_old], FakeClient(cast(Any, error)), clock=clock)
    with_config_maps(ctrl, tenant)
    lead(ctrl)
    s_new = versioned(ctb(STABLE, ["a", "b"]), "12")
    cast(FakeCache[Any], ctrl.bundles).put(s_new)
    ctrl._on_bundle_update(s_old, s_new)
    ctrl.sync(TENANT_KEY)
    report = convergence.parse(ctrl.report_value())
    assert report.complete and not convergence.converged(report, fp("b"))  # not yet
    assert [(lag.name, lag.state) for _, lag in report.lagging()] == [("tenant/web-ca", "stale")]
    clock.now += decisions.FAILURE_FIRST
    settle_until_quiet(ctrl, TENANT_KEY, clock, decisions.FAILURE_BOUND - 1)
    report = convergence.parse(ctrl.report_value())
    assert convergence.converged(report, fp("b"))
    [(_, lag)] = report.lagging()
    assert lag.state == "blocked" and lag.excused and lag.name == "tenant/web-ca"
    assert len(client.patches) == decisions.FAILURE_BOUND
    assert [e[2] for e in events.events] == [decisions.REASON_FAILED]
    gone = isinstance(error, ApiError) and error.status in (404, 409)  # deleted, maybe
    expected = 0 if gone else decisions.FAILURE_BOUND
    assert ctrl.metrics.count("ConfigMap", "failed") == expected


def test_a_cluster_scoped_object_whose_write_keeps_failing_holds_and_is_named() -> None:
    """A webhook configuration is an admin's: a write of it that keeps failing blocks it
    (named, with the error) but it still holds the anchors it does not have."""
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    clock = Clock()
    failing = FakeClient(ApiError(403, "Forbidden", {"message": "denied"}))
    ctrl, _, _, _ = controller([target], [versioned(ctb("b1", ["a"]), "1")], failing, clock=clock)
    lead(ctrl)
    settle_until_quiet(ctrl, target.key, clock, decisions.FAILURE_BOUND)
    report = convergence.parse(ctrl.report_value())
    assert report.complete and not convergence.converged(report, fp("a"))
    [(kind, lag)] = report.holding()
    assert (kind, lag.name, lag.state) == (KIND, "hooks", "blocked")
    assert "denied" in (lag.reason or "")


def test_a_blocked_tenant_object_rewritten_fast_is_not_written_at_its_pace() -> None:
    """Once its failures block an object, a change of it (a new resourceVersion) does not
    make the injector write again before the back-off ends."""
    raw = tenant_raw(json.dumps({"name": STABLE}))
    clock = Clock()
    failing = FakeClient(ApiError(500, "InternalError"))
    ctrl, client, _, _ = controller([], [versioned(ctb(STABLE, ["a"]), "1")], failing, clock=clock)
    cms = with_config_maps(ctrl, config_map_target(raw))
    lead(ctrl)
    settle_until_quiet(ctrl, TENANT_KEY, clock, decisions.FAILURE_BOUND - 1)
    ctrl.sync(TENANT_KEY)  # the bound: blocked, and in its back-off
    sent = len(client.patches)
    assert sent == decisions.FAILURE_BOUND
    for rv in range(6, 16):
        raw["metadata"]["resourceVersion"] = str(rv)
        cms.put(config_map_target(raw))
        ctrl.sync(TENANT_KEY)
    assert len(client.patches) == sent


def test_a_failed_guard_on_a_tenant_config_map_is_re_driven_by_the_tenants_next_write() -> None:
    """A labelled ConfigMap with no `data` gets `ca.crt` by adding the whole map, guarded
    by the cached resourceVersion; a tenant rewriting a label fast makes the guard fail.
    The tenant's next write re-drives the key (the record's other fields are unchanged),
    and the failures bound how long it holds the rotation."""
    raw = tenant_raw(json.dumps({"name": STABLE}))
    del raw["data"]
    raw["metadata"]["labels"]["tick"] = "1"
    tenant = config_map_target(raw)
    guard = ApiError(422, "Invalid", {"message": "the test failed", "details": {}})
    clock = Clock()
    ctrl, _, _, _ = controller(
        [], [versioned(ctb(STABLE, ["a"]), "10")], FakeClient(guard), clock=clock
    )
    with_config_maps(ctrl, tenant)
    lead(ctrl)
    drain(ctrl)
    raw["metadata"]["resourceVersion"], raw["metadata"]["labels"]["tick"] = "6", "2"
    ctrl._on_target_update(tenant, config_map_target(raw))  # the tenant's next write
    assert len(ctrl.queue) == 1
    clock.now += decisions.FAILURE_FIRST
    settle_until_quiet(ctrl, TENANT_KEY, clock, decisions.FAILURE_BOUND)
    report = convergence.parse(ctrl.report_value())
    assert convergence.converged(report, fp("a"))


def test_a_plan_that_raises_is_contained_to_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """A defect that makes planning one key raise is that key's: a Warning Event,
    `failed`, looked at again after a back-off, and every other key is synced as usual; a
    cluster-scoped key so failing keeps the report incomplete and is named there."""
    broken = to_target(VALIDATING_WEBHOOK, webhook_config("broken"))
    fine = to_target(VALIDATING_WEBHOOK, webhook_config("fine"))
    ctrl, client, events, _ = controller([broken, fine], [versioned(ctb("b1", ["a"]), "1")])
    real = decisions.decide

    def decide(target: Any, *args: Any, **kwargs: Any) -> Any:
        if target.name == broken.name:
            raise KeyError("a defect")
        return real(target, *args, **kwargs)

    monkeypatch.setattr(decisions, "decide", decide)
    lead(ctrl)
    requeue = ctrl.sync(broken.key)
    ctrl.sync(fine.key)
    assert requeue is not None and requeue.after == decisions.FAILURE_FIRST
    [(_, ref, reason, note)] = events.events
    assert (ref.name, reason) == ("broken", decisions.REASON_SYNC_FAILED) and "KeyError" in note
    assert ctrl.metrics.count(KIND, "failed") == 1
    assert len(client.patches) == 1  # the fine one's write
    report = convergence.parse(ctrl.report_value())
    assert not report.complete and report.pending == (broken.key,)


# --- what an object verifies ---------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(
            to_target(
                API_SERVICE,
                api_service(
                    service={"namespace": "kube-system", "name": "metrics-server"},
                    insecureSkipTLSVerify=True,
                ),
            ),
            id="apiservice-insecure-skip-tls-verify",
        ),
        pytest.param(to_target(API_SERVICE, api_service()), id="local-apiservice"),
        pytest.param(
            to_target(CRD, crd({"strategy": "None"})), id="crd-without-webhook-conversion"
        ),
        pytest.param(
            to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=())), id="no-webhooks"
        ),
    ],
)
def test_an_annotated_object_that_cannot_use_a_ca_bundle_selects_nothing_and_holds_nothing(
    target: Target,
) -> None:
    """An object that verifies no server against a caBundle (an APIService with
    insecureSkipTLSVerify or without a service, a CRD without webhook conversion, a
    webhook configuration with no webhooks) is `Invalid` with a Warning Event, and
    selects nothing: the swap cannot break it, so it does not wait for it."""
    if target.kind == CRD.kind:
        target = dataclasses.replace(target, annotation=json.dumps({"name": "b1"}))
    ctrl, client, events, _ = controller([target], [versioned(ctb("b1", ["a"]), "10")])
    lead(ctrl)
    ctrl.sync(target.key)
    report = convergence.parse(ctrl.report_value())
    assert client.patches == [] and report.holding() == []
    assert convergence.converged(report, fp("a"))
    assert [e[2] for e in events.events] == [decisions.REASON_NOT_APPLICABLE]


def test_an_immutable_tenant_config_map_still_selects_and_is_a_blocked_excused_holder() -> None:
    """An immutable ConfigMap still reads its `ca.crt`: it selects the anchors, blocked
    (its owner's to re-create) and, namespaced, excused."""
    raw = tenant_raw(json.dumps({"name": STABLE}), immutable=True)
    ctrl, _, _, _ = controller([], [versioned(ctb(STABLE, ["a"]), "10")])
    with_config_maps(ctrl, config_map_target(raw))
    lead(ctrl)
    ctrl.sync(TENANT_KEY)
    [status] = ctrl.statuses()
    assert status.selecting == {fp("a")} and status.blocked
    assert convergence.converged(convergence.parse(ctrl.report_value()), fp("a"))


# --- what the report says -----------------------------------------------------------------


def test_an_incomplete_report_names_the_keys_not_yet_synced() -> None:
    """Until every managed key is synced since the leader started, the report is
    incomplete and names (at most `MAX_LAGGING`, by key) the keys that keep it so."""
    targets = [to_target(VALIDATING_WEBHOOK, webhook_config(f"hooks-{i:02d}")) for i in range(12)]
    ctrl, _, _, _ = controller(targets, [versioned(ctb("b1", ["a"]), "1")])
    assert convergence.parse(ctrl.report_value()).pending == ("(not leading)",)
    lead(ctrl)
    ctrl.sync(targets[0].key)
    report = convergence.parse(ctrl.report_value())
    assert not report.complete
    assert report.pending == tuple(t.key for t in targets[1:11])
    for target in targets[1:]:
        ctrl.sync(target.key)
    report = convergence.parse(ctrl.report_value())
    assert report.complete and report.pending == ()
    assert "pending" not in json.loads(ctrl.report_value())


def test_a_new_anchor_is_not_observed_while_consumers_of_the_stable_bundle_are_queued() -> None:
    """At a stage the publisher creates the hash-named H(old+new), then replaces the stable
    bundle S. H is observed at once (nothing selects it), but the new anchor is also in S,
    whose consumers are still queued: an anchor is observed only when every cached bundle
    holding it is, so it does not converge before they are synced."""
    consumers = [
        to_target(
            VALIDATING_WEBHOOK,
            webhook_config(name=f"hooks-{i}", annotation=json.dumps({"name": STABLE})),
        )
        for i in range(3)
    ]
    s_old = versioned(ctb(STABLE, ["a"]), "10")
    ctrl, _, _, caches = controller(consumers, [s_old])
    lead(ctrl)
    drain(ctrl)
    value = value_digest(VALIDATING_WEBHOOK.value_of(normalize_bundle(pem("a"))))
    for c in consumers:  # as the watch shows them after our writes
        slots = tuple(dataclasses.replace(s, digest=value) for s in c.slots)
        caches[KIND].put(dataclasses.replace(c, slots=slots))
    drain(ctrl)
    assert convergence.parse(ctrl.report_value()).complete
    h_new = versioned(ctb(HASHED_NEW, ["a", "b"]), "11")
    s_new = versioned(ctb(STABLE, ["a", "b"]), "12")
    bundles = cast(FakeCache[Any], ctrl.bundles)
    bundles.put(h_new)
    ctrl._on_bundle(h_new)
    bundles.put(s_new)
    ctrl._on_bundle_update(s_old, s_new)
    assert len(ctrl.queue) == 3
    report = convergence.parse(ctrl.report_value())
    assert fp("b") not in report.observed and not convergence.converged(report, fp("b"))
    drain(ctrl)
    assert fp("b") in convergence.parse(ctrl.report_value()).observed


# --- other writers ------------------------------------------------------------------------


def test_a_hand_edit_long_after_the_last_is_repaired_after_the_first_back_off() -> None:
    """docs/inject.md: a single hand edit is repaired after the first back-off (5 s).
    Retakes count in a row only within `CONTEST_WINDOW` of each other: one edit a week,
    for months, is each repaired after 5 s, with no `CABundleContested` Warning."""
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    clock = Clock()
    ctrl, _, events, caches = controller([target], [ctb("b1", ["a"])], clock=clock)
    retaken = dataclasses.replace(target, taker="helm")
    delays = []
    for _ in range(8):
        caches[KIND].items["hooks"] = target
        ctrl.sync(target.key)  # our write lands
        clock.now += 7 * 86400  # a week of quiet
        caches[KIND].items["hooks"] = retaken  # one edit
        requeue = ctrl.sync(target.key)
        delays.append(requeue.after if requeue is not None and requeue.after else 0.0)
        clock.now += delays[-1]
    assert delays == [decisions.CONTEST_FIRST] * 8
    assert events.events == []


def test_a_fight_within_the_window_still_doubles_the_back_off() -> None:
    """Retakes within `CONTEST_WINDOW` of each other keep doubling (a second injector)."""
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    clock = Clock()
    ctrl, _, events, caches = controller([target], [ctb("b1", ["a"])], clock=clock)
    retaken = dataclasses.replace(target, taker="cainjector")
    delays = []
    for _ in range(4):
        caches[KIND].items["hooks"] = target
        ctrl.sync(target.key)
        caches[KIND].items["hooks"] = retaken
        requeue = ctrl.sync(target.key)
        delays.append(requeue.after if requeue is not None and requeue.after else 0.0)
        clock.now += delays[-1]
    assert delays == [decisions.CONTEST_FIRST * 2**i for i in range(4)]
    assert [e[2] for e in events.events] == [decisions.REASON_CONTESTED]


# --- an emptied selection --------------------------------------------------------------------


def test_an_emptied_selection_still_holding_the_old_root_holds_the_swap_and_is_named() -> None:
    """A webhook that selected a hash-named bundle the stage deleted is `Empty` (its old
    caBundle kept): it still selects every anchor of the bundles its held anchors are in
    now, so the new root does not converge while it holds only the old one; it is named,
    blocked with why."""
    from tests.unit.injector.test_convergence import written_for

    old_hashed = "kubernetes.io:service-serving:aaaaaaaaaaaaaaaaaaaaaaaa"
    target = written_for(["a"], selector=json.dumps({"name": old_hashed}))
    ctrl, client, _, _ = controller([target], [versioned(ctb(STABLE, ["a", "b"]), "12")])
    lead(ctrl)
    ctrl.sync(target.key)
    [status] = ctrl.statuses()
    report = convergence.parse(ctrl.report_value())
    assert status.state == "empty" and client.patches == []
    assert convergence.converged(report, fp("a")) and not convergence.converged(report, fp("b"))
    [(_, lag)] = report.holding()
    assert lag.name == "hooks" and lag.state == "blocked"


def test_a_tenants_emptied_selection_holding_the_old_root_is_excused() -> None:
    """The same for a tenant's ConfigMap: blocked by its owner's selector, so excused (a
    tenant cannot hold the rotation by selecting nothing)."""
    raw = tenant_raw(json.dumps({"name": "gone"}))
    bundle = normalize_bundle(pem("a"))
    raw["data"] = {"ca.crt": bundle}
    raw["metadata"]["annotations"][INJECTED_ANNOTATION] = injected_note(
        bundle, fingerprints(bundle), 2e9
    )
    ctrl, _, _, _ = controller([], [versioned(ctb(STABLE, ["a", "b"]), "12")])
    with_config_maps(ctrl, config_map_target(raw))
    lead(ctrl)
    ctrl.sync(TENANT_KEY)
    [status] = ctrl.statuses()
    assert status.state == "empty" and status.holding == {fp("a")} and status.blocked
    report = convergence.parse(ctrl.report_value())
    assert convergence.converged(report, fp("b")) and report.holding() == []
