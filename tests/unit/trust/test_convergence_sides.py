"""The convergence report end to end, without a server: what the injector writes
(`InjectorController.report_value`) read by the managed CA (`managedca.report.
injector_view`) and judged by its swap gate (`managedca.decide`). Adopted from the
2026-12-05 consumers review, where each failed."""

from __future__ import annotations

from typing import Any, cast

from prometheus_client import CollectorRegistry

from injector import decide as decisions
from injector.controller import SELECTION_INDEX, Caches, InjectorController
from injector.kinds import VALIDATING_WEBHOOK, to_target
from injector.targets import INJECTED_ANNOTATION, injected_note
from kube.client import Client
from managedca.decide import Confirm, Swap, decide
from managedca.report import Liveness, injector_view
from tests.unit import pki
from tests.unit.fakes import FakeCache
from tests.unit.injector.builders import b64, ctb, pem, webhook_config
from tests.unit.managedca import test_decide as tdec
from trust.bundle import fingerprints, normalize_bundle
from trust.convergence import REPORT_ANNOTATION


def view(report: str) -> Any:
    lease = {
        "metadata": {
            "name": "service-serving-signer-injector-convergence",
            "annotations": {REPORT_ANNOTATION: report},
        },
        "spec": {"holderIdentity": "inj", "renewTime": "2026-01-01T00:00:00.000000Z"},
    }
    return injector_view(lease, Liveness(lambda: 0.0))


def written(roots: list[str], name: str) -> Any:
    bundle = normalize_bundle("".join(pem(r) for r in roots))
    value = b64(bundle)
    raw = webhook_config(name=name, ca_bundles=(value,))
    expiry = min(pki.ca(r).cert.not_valid_after_utc.timestamp() for r in roots)
    raw["metadata"]["annotations"][INJECTED_ANNOTATION] = injected_note(
        value, fingerprints(bundle), expiry
    )
    return to_target(VALIDATING_WEBHOOK, raw)


def selection(target: Any) -> list[str]:
    selector = decisions.selector_of(target)
    return decisions.selection_keys(selector) if selector is not None else []


class Writes:
    def __init__(self) -> None:
        self.patched: list[str] = []

    def patch(self, path: str, *_: Any, **__: Any) -> None:
        self.patched.append(path.rsplit("/", 1)[-1])


class NoEvents:
    def warning(self, *_: Any) -> None:
        pass


def leading(targets: list[Any], bundles: list[Any]) -> InjectorController:
    """An injector that has just started leading, its informers' adds delivered."""
    cache: FakeCache[Any] = FakeCache(key=lambda t: t.name, indexers={SELECTION_INDEX: selection})
    for target in targets:
        cache.put(target)
    bundle_cache: FakeCache[Any] = FakeCache(bundles, key=lambda b: b["metadata"]["name"])
    ctrl = InjectorController(
        cast(Client, Writes()),
        Caches({VALIDATING_WEBHOOK.kind: cache}, bundle_cache),
        NoEvents(),
        registry=CollectorRegistry(),
    )
    ctrl.progress.begin()
    for bundle in bundles:
        for on_add, _, _ in bundle_cache.handlers:
            assert on_add is not None
            on_add(bundle)
    return ctrl


def fp(root: str) -> str:
    return next(iter(fingerprints(normalize_bundle(pem(root)))))


def test_an_injector_with_no_consumer_of_the_signer_does_not_hold_the_swap_for_ever() -> None:
    """No object selects the next CA: once the injector has observed the bundle holding
    it, it has converged (an adopting bootstrap, too, signs)."""
    ctrl = leading([], [ctb("b1", ["aa-root", "bb-root"])])
    report = ctrl.report_value()
    live = view(report)
    assert live.live and live.converged == {fp("aa-root"), fp("bb-root")}
    # The gate in decide: the next CA is converged when the injector says so.
    nothing = tdec.obs("aa", "bb", reports=(tdec.report("aa", "bb"),))
    converged = type(nothing)(
        nothing.published, nothing.reports, injector=type(live)(True, frozenset({"bb"}))
    )
    assert decide(tdec.SEEN, converged, tdec.SWAP_TIME, tdec.CFG) == Swap(tdec.SWAP_TIME)
    adopting = type(nothing)(
        frozenset({"aa", "bb"}),
        (tdec.report("aa", "bb", signing="aa", ready="bb"),),
        injector=type(live)(True, frozenset({"aa", "bb"})),
    )
    at = tdec.T0 + 2 * tdec.H
    assert decide(tdec.ADOPTING_PUBLISHED, adopting, at, tdec.CFG) == Confirm(at)


def test_a_bundle_nobody_selects_converges_only_once_observed() -> None:
    ctrl = leading([], [])
    assert view(ctrl.report_value()).converged == frozenset()


def test_the_report_does_not_say_converged_for_objects_it_has_not_synced_yet() -> None:
    """After a restart the workers reach one object first; the other, still holding
    only the old root, is not yet synced: the new root has not converged."""
    holds_both = written(["a", "b"], "synced-first")
    holds_old = written(["a"], "not-synced-yet")
    ctrl = leading([holds_both, holds_old], [ctb("b1", ["a", "b"])])
    ctrl.sync(holds_both.key)
    assert fp("b") not in view(ctrl.report_value()).converged
    ctrl.sync(holds_old.key)  # written: now every object holds both
    assert cast(Writes, ctrl.client).patched == ["not-synced-yet"]
    assert view(ctrl.report_value()).converged == {fp("a"), fp("b")}
