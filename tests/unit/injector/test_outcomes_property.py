"""Every outcome classified, by generation: generated tenant-writable objects (labels,
annotations of any length and nesting, data keys, managedFields shapes, immutability)
and generated API outcomes (every status the API server may answer, timeouts,
exceptions) go through the informer's transform, `targets.read`, `decide.plan`, the act
and the per-key bookkeeping (`controller.settle`), as the loop runs them (each `Requeue`
honoured on a fake clock). Whatever was generated:

* nothing raises (the transform, the plan, the sync);
* every key reaches a classification within `decide.FAILURE_BOUND` syncs of the same
  outcome: the report is complete, and a namespaced object no longer holds any anchor
  back (current, excused, or selecting nothing);
* a tenant's object never holds the report incomplete, and a cluster-scoped one that
  fails is named;
* a record stays within `RECORD_BYTES` however large what the tenant wrote.

`hack/knock-out-injector.py` removes each classification rule in turn and checks that
this file (with test_classification.py) fails without it."""

from __future__ import annotations

import json
import sys
from dataclasses import fields, is_dataclass
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from injector import decide as decisions
from injector.configmaps import LABEL, TRUSTSTORE_ANNOTATION, TRUSTSTORE_PASSWORD_ANNOTATION
from injector.configmaps import to_target as config_map_target
from injector.controller import SELECTION_INDEX, InjectorController
from injector.kinds import VALIDATING_WEBHOOK
from injector.targets import ANNOTATION, FIELD_MANAGER, INJECTED_ANNOTATION, Target
from kube.client import ApiError
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import ctb, pem, webhook_config
from tests.unit.injector.harness import controller, selection
from trust import convergence
from trust.bundle import fingerprints, normalize_bundle

STABLE = "kubernetes.io:service-serving:trust-anchors"
SIGNER = "kubernetes.io/service-serving"
RECORD_BYTES = 4096
"""The most a record may hold, counted generously (every string, tuple and bytes object
it reaches, shared ones included, by `sys.getsizeof`): names, digests, at most two field
managers, a bounded selector, a bounded note."""


# --- what a tenant writes -------------------------------------------------------------------

short = st.text(max_size=12)
any_text = st.one_of(
    st.text(max_size=300),
    st.integers(0, 6000).map(lambda n: "[" * n),
    st.integers(0, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.sampled_from(["\ud800", "\x00", "{", "1e999", "9" * 5000, "null", "[]", '""']),
)
valid_selector = st.one_of(
    st.just(json.dumps({"name": STABLE})),
    st.just(json.dumps({"signerName": SIGNER, "labelSelector": {}})),
    st.dictionaries(
        st.from_regex(r"[a-z]{1,8}", fullmatch=True),
        st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True),
        max_size=60,
    ).map(lambda m: json.dumps({"signerName": SIGNER, "labelSelector": {"matchLabels": m}})),
)
long_text = st.tuples(st.text(min_size=1, max_size=8), st.integers(500, 1300)).map(
    lambda t: (t[0] * t[1])[: t[1] * 4]
)
"""Text of a few thousand characters (hypothesis draws at most a few hundred)."""
selector_text = st.one_of(valid_selector, any_text, long_text)
fields_v1: Any = st.recursive(
    st.just({}),
    lambda inner: st.dictionaries(
        st.sampled_from(
            ["f:data", "f:ca.crt", "f:binaryData", "f:metadata", "f:annotations", "k:*", "x"]
        )
        | short,
        inner,
        max_size=4,
    ),
    max_leaves=12,
)
managed_entry = st.fixed_dictionaries(
    {
        "manager": st.sampled_from([FIELD_MANAGER, "flux", "kubectl", ""]) | st.text(max_size=300),
        "operation": st.sampled_from(["Apply", "Update", "Bogus"]),
    },
    optional={
        "fieldsV1": fields_v1 | st.just({"f:data": {"f:ca.crt": {}}}) | any_text,
        "subresource": st.sampled_from(["status", ""]),
    },
)


@st.composite
def tenant_config_map(draw: st.DrawFn) -> dict[str, Any]:
    """Half the time a well-formed labelled ConfigMap selecting the stable bundle (so the
    write and its generated outcomes are what is tested), else anything a tenant may write."""
    if draw(st.booleans()):
        return {
            "metadata": {
                "name": "web-ca",
                "namespace": "tenant",
                "uid": "u1",
                "resourceVersion": "5",
                "labels": {LABEL: "true"},
                "annotations": {ANNOTATION: json.dumps({"name": STABLE})},
            },
            "data": {"x": "y"},
        }
    annotations: dict[str, Any] = {}
    if draw(st.integers(0, 5)):  # mostly annotated; sometimes only labelled
        annotations[ANNOTATION] = draw(selector_text)
    if draw(st.booleans()):
        annotations[INJECTED_ANNOTATION] = draw(any_text | long_text)
    if draw(st.booleans()):
        annotations[TRUSTSTORE_ANNOTATION] = draw(st.sampled_from(["trust.p12", "ca.crt"]) | short)
        annotations[TRUSTSTORE_PASSWORD_ANNOTATION] = draw(st.text(max_size=1100))
    annotations.update(draw(st.dictionaries(short, any_text, max_size=3)))
    labels = {LABEL: "true", **draw(st.dictionaries(short, short, max_size=3))}
    raw: dict[str, Any] = {
        "metadata": {
            "name": "web-ca",
            "namespace": "tenant",
            "uid": "u1",
            "resourceVersion": draw(st.sampled_from(["5", "6", ""])),
            "labels": labels,
            "annotations": annotations,
            "managedFields": draw(st.lists(managed_entry, max_size=6)),
        },
    }
    if draw(st.booleans()):
        raw["data"] = draw(st.dictionaries(st.sampled_from(["ca.crt", "x"]) | short, any_text))
    if draw(st.booleans()):
        raw["immutable"] = draw(st.booleans())
    return raw


# --- what the API answers --------------------------------------------------------------------

STATUSES = [400, 401, 403, 404, 405, 408, 409, 410, 413, 415, 422, 429, 500, 502, 503, 504]


@st.composite
def outcome(draw: st.DrawFn) -> Exception | None:
    """None: the patch lands; else what it raises."""
    kind = draw(st.sampled_from(["ok", "status", "causes", "exception"]))
    if kind == "ok":
        return None
    if kind == "causes":
        return ApiError(422, "Invalid", {"details": {"causes": [{"reason": "FieldValueInvalid"}]}})
    if kind == "exception":
        return draw(
            st.sampled_from(
                [TimeoutError("timed out"), ConnectionResetError("reset"), ValueError("bad")]
            )
        )
    return ApiError(draw(st.sampled_from(STATUSES)), "Error", {"message": draw(short)})


class ScriptedClient:
    """Each patch gets the next generated outcome; the last one repeats (persistent)."""

    def __init__(self, outcomes: list[Exception | None]) -> None:
        self.outcomes = outcomes
        self.patches = 0

    def patch(self, path: str, body: Any, **_: Any) -> Any:
        answer = self.outcomes[min(self.patches, len(self.outcomes) - 1)]
        self.patches += 1
        if answer is not None:
            raise answer
        return {}

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        return {"metadata": {"annotations": {}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fp(name: str) -> str:
    return next(iter(fingerprints(normalize_bundle(pem(name)))))


def record_bytes(value: Any, seen: set[int] | None = None) -> int:
    """What a record reaches, by `sys.getsizeof` (each object once)."""
    seen = set() if seen is None else seen
    if id(value) in seen or value is None or isinstance(value, bool | int | float):
        return 0
    seen.add(id(value))
    size = sys.getsizeof(value)
    if is_dataclass(value):
        return size + sum(record_bytes(getattr(value, f.name), seen) for f in fields(value))
    if isinstance(value, tuple | frozenset | list):
        return size + sum(record_bytes(item, seen) for item in value)
    return size


def run(ctrl: InjectorController, key: str, clock: Clock, syncs: int) -> None:
    """`syncs` syncs of `key` as the loop makes them: each after its `Requeue`."""
    for _ in range(syncs):
        requeue = ctrl.sync(key)
        clock.now += requeue.after if requeue is not None and requeue.after else 1.0


def config_map_controller(
    target: Target, outcomes: list[Exception | None], clock: Clock
) -> InjectorController:
    bundle = ctb(STABLE, ["a", "b"])
    bundle["metadata"]["resourceVersion"] = "1"
    ctrl, _, _, _ = controller([], [bundle], cast(Any, ScriptedClient(outcomes)), clock=clock)
    cms: FakeCache[Target] = FakeCache(
        [target], key=lambda t: f"{t.namespace}/{t.name}", indexers={SELECTION_INDEX: selection}
    )
    ctrl.caches = dict(ctrl.caches) | {"ConfigMap": cms}
    ctrl.progress.begin()
    ctrl._on_bundle(bundle)
    return ctrl


SETTINGS = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@SETTINGS
@given(raw=tenant_config_map(), outcomes=st.lists(outcome(), min_size=1, max_size=6))
def test_a_tenant_object_is_classified_within_the_bound_and_never_holds_the_report(
    raw: dict[str, Any], outcomes: list[Exception | None]
) -> None:
    target = config_map_target(raw)  # never raises, whatever the tenant wrote
    assert record_bytes(target) <= RECORD_BYTES
    clock = Clock()
    ctrl = config_map_controller(target, outcomes, clock)
    # The cache keeps the record as generated (no watch shows our writes), so each sync
    # may write again: the last outcome, repeated, is what the key settles on.
    run(ctrl, target.key, clock, len(outcomes) + decisions.FAILURE_BOUND)
    report = convergence.parse(ctrl.report_value())
    assert report.complete and report.pending == ()
    assert report.holding() == []
    assert convergence.converged(report, fp("a")) and convergence.converged(report, fp("b"))


@SETTINGS
@given(
    annotation=selector_text,
    webhooks=st.integers(0, 3),
    outcomes=st.lists(outcome(), min_size=1, max_size=6),
)
def test_a_cluster_scoped_object_is_classified_within_the_bound_and_named_while_it_holds(
    annotation: str, webhooks: int, outcomes: list[Exception | None]
) -> None:
    raw = webhook_config(annotation=annotation, ca_bundles=("",) * webhooks)
    target = VALIDATING_WEBHOOK.to_target(raw)
    assert record_bytes(target) <= RECORD_BYTES
    clock = Clock()
    bundle = ctb(STABLE, ["a"])
    bundle["metadata"]["resourceVersion"] = "1"
    ctrl, _, _, _ = controller([target], [bundle], cast(Any, ScriptedClient(outcomes)), clock=clock)
    ctrl.progress.begin()
    ctrl._on_bundle(bundle)
    run(ctrl, target.key, clock, len(outcomes) + decisions.FAILURE_BOUND)
    report = convergence.parse(ctrl.report_value())
    assert report.complete  # classified: a failing write does not keep it unsynced
    [status] = ctrl.statuses()
    holds_back = bool(status.selecting - status.holding) and status.state != "current"
    assert holds_back == (not convergence.converged(report, fp("a")))
    if holds_back:  # held: then named, blocked with why once the bound is reached
        [(_, lag)] = report.holding()
        assert lag.name == "hooks"
        assert lag.state == "blocked" or status.blocked is None
