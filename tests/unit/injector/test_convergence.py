"""Consumer convergence as a signal, without a server: per-object
states and per-kind counts, what a restarted injector still knows (from the annotation it
wrote beside its output, never by parsing), and the convergence report Lease of the
contract (docs/reference.md §11)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, cast

from prometheus_client import CollectorRegistry

from injector.controller import Caches, InjectorController
from injector.kinds import VALIDATING_WEBHOOK, to_target
from injector.targets import INJECTED_ANNOTATION, injected_note
from kube.client import ApiError, Client
from kube.leases import LeaseRef
from tests.unit import pki
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import b64, ctb, pem, webhook_config
from tests.unit.injector.harness import Events, FakeClient, controller, target_cache
from trust import convergence
from trust.bundle import fingerprints, normalize_bundle

KIND = "ValidatingWebhookConfiguration"


def fp(name: str) -> str:
    return next(iter(fingerprints(normalize_bundle(pem(name)))))


def written_for(roots: list[str], *, selector: str | None = None, edited: str | None = None) -> Any:
    """A configuration as our write of `roots` left it (value and annotation), or with
    its second caBundle `edited` since."""
    bundle = normalize_bundle("".join(pem(r) for r in roots))
    value = b64(bundle)
    raw = webhook_config(ca_bundles=(value, value if edited is None else edited))
    expiry = min(pki.ca(r).cert.not_valid_after_utc.timestamp() for r in roots)
    raw["metadata"]["annotations"][INJECTED_ANNOTATION] = injected_note(
        value, fingerprints(bundle), expiry
    )
    if selector is not None:
        raw["metadata"]["annotations"]["service-serving-signer/ca-bundle-from"] = selector
    return to_target(VALIDATING_WEBHOOK, raw)


def lead(ctrl: InjectorController) -> None:
    """Start leading, then the informer's adds of every cached bundle (as a real
    informer replays them to the handler)."""
    ctrl.progress.begin()
    for bundle in ctrl.bundles.list():
        for on_add, _, _ in cast(FakeCache[Any], ctrl.bundles).handlers:
            assert on_add is not None
            on_add(bundle)


def test_after_a_restart_an_empty_selection_keeps_its_expiry_and_is_counted() -> None:
    target = written_for(["a"], selector=json.dumps({"name": "gone"}))
    ctrl, client, _, _ = controller([target], [ctb("b1", ["a"])])  # a fresh process
    ctrl.sync(target.key)
    assert client.patches == []
    expiry = ctrl.metrics.registry.get_sample_value("cabundle_injector_anchor_expiry_seconds")
    assert expiry == int(pki.ca("a").cert.not_valid_after_utc.timestamp())
    assert ctrl.metrics.objects(KIND, "empty") == 1
    assert ctrl.metrics.objects(KIND, "managed") == 1


def test_content_changed_since_our_write_is_not_known_to_hold_anything() -> None:
    edited = written_for(["a"], selector=json.dumps({"name": "gone"}), edited=b64("edited"))
    ctrl, _, _, _ = controller([edited], [])
    ctrl.sync(edited.key)
    [status] = ctrl.statuses()
    assert status.state == "empty" and status.holding == frozenset()
    expiry = ctrl.metrics.registry.get_sample_value("cabundle_injector_anchor_expiry_seconds")
    assert expiry is not None and math.isnan(expiry)


def test_the_report_counts_selecting_holding_and_blocked_per_anchor() -> None:
    first = written_for(["a"])
    stale = dataclasses.replace(written_for(["a"]), name="stale")
    conflicting = dataclasses.replace(written_for(["a"]), name="conflicting", others=("argo",))
    bundles = [ctb("b1", ["a", "b"])]
    ctrl, _, _, _ = controller([first, stale, conflicting], bundles, FakeClient(ApiError(500, "x")))
    lead(ctrl)
    for target in (first, stale, conflicting):
        ctrl.sync(target.key)  # the writes fail (once: under the bound): those two stay stale
    report = convergence.parse(ctrl.report_value())
    # Everyone selects a and b; all hold a (our last write); none holds b; the
    # conflicting one is blocked (its owner's to fix) but cluster-scoped, so it is not
    # excused: it holds the gate like the stale ones.
    assert report.anchors[fp("a")] == convergence.AnchorCounts(3, 3, 0)
    assert report.anchors[fp("b")] == convergence.AnchorCounts(3, 0, 0)
    row = report.kinds[KIND]
    assert (row.managed, row.current, row.stale, row.blocked) == (3, 0, 2, 1)
    assert [(lag.name, lag.state) for lag in row.lagging] == [
        ("conflicting", "blocked"),
        (first.name, "stale"),
        ("stale", "stale"),
    ]
    assert "argo" in (row.lagging[0].reason or "")
    # A failed write is classified, not raised: the view is complete, and the stale ones
    # (and the cluster-scoped blocked one) hold b back.
    assert report.complete and report.observed == {fp("a"), fp("b")}
    assert convergence.converged(report, fp("a")) and not convergence.converged(report, fp("b"))
    assert ctrl.metrics.objects(KIND, "conflicting") == 1
    assert ctrl.metrics.objects("ConfigMap", "managed") == 0  # every kind starts at 0


class LeaseClient:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.writes: list[str] = []

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        if self.lease is None:
            raise ApiError(404, "NotFound")
        return json.loads(json.dumps(self.lease))

    def create(self, path: str, body: Any, **_: Any) -> Any:
        self.writes.append(f"POST {path}")
        self.lease = body
        return body

    def replace(self, path: str, body: Any, **_: Any) -> Any:
        self.writes.append(f"PUT {path}")
        self.lease = body
        return body


def test_the_report_lease_is_created_then_renewed_by_our_identity() -> None:
    client = LeaseClient()
    target = written_for(["a"])
    targets = target_cache()
    targets.put(target)
    ctrl = InjectorController(
        cast(Client, client),
        Caches(
            {KIND: targets},
            FakeCache(
                [ctb("b1", ["a"]), ctb("elsewhere", ["b"], signer="example.com/other")],
                key=lambda b: b["metadata"]["name"],
            ),
        ),
        Events(),
        registry=CollectorRegistry(),
        report=LeaseRef("ns", "service-serving-signer-injector-convergence"),
        identity="pod-1",
    )
    lead(ctrl)
    ctrl.sync(target.key)
    ctrl.write_report()
    ctrl.write_report()
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert client.writes == [
        f"POST {path}",
        f"PUT {path}/service-serving-signer-injector-convergence",
    ]
    assert client.lease is not None
    assert client.lease["spec"]["holderIdentity"] == "pod-1"
    assert client.lease["spec"]["renewTime"].endswith("Z")
    report = convergence.parse(
        client.lease["metadata"]["annotations"][convergence.REPORT_ANNOTATION]
    )
    assert report.anchors[fp("a")] == convergence.AnchorCounts(1, 1, 0)
    # Every signer's bundles are observed: an anchor nothing selects converges.
    assert report.observed == {fp("a"), fp("b")}
    assert convergence.converged(report, fp("a")) and convergence.converged(report, fp("b"))
