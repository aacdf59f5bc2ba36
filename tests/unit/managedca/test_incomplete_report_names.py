"""An incomplete injector report (it started leading — a restart, a leader change — and
has not synced every object yet) holds the swap naming the objects it still waits on:
in the wait's `why`, the `ManagedCAWaiting` Event and `…_managed_ca_waiting_object`, so
an operator has something to look at, after an injector restart too."""

from __future__ import annotations

from managedca import decide as d
from managedca.report import Liveness, injector_view
from tests.unit.fakes import FakeRecorder
from tests.unit.managedca.test_waiting_objects import Api, _controller, _named
from trust import convergence as c


def _incomplete(*pending: str) -> c.ConvergenceReport:
    return c.ConvergenceReport(False, {}, {}, frozenset(), tuple(pending))


def test_an_incomplete_report_names_what_it_waits_on() -> None:
    report = _incomplete("ConfigMap/tenant/web-ca", "ValidatingWebhookConfiguration/hooks")
    lease = {
        "metadata": {"name": c.REPORT_NAME, "annotations": {c.REPORT_ANNOTATION: c.encode(report)}},
        "spec": {"renewTime": "2026-01-01T00:00:00.000000Z", "leaseDurationSeconds": 45},
    }
    view = injector_view(lease, Liveness())
    assert view.holding == (
        ("ConfigMap", "tenant/web-ca"),
        ("ValidatingWebhookConfiguration", "hooks"),
    )
    assert "ConfigMap tenant/web-ca" in view.lagging[0]


def test_the_wait_after_an_injector_restart_names_the_objects() -> None:
    api, recorder = Api(), FakeRecorder()
    api.report = _incomplete("ConfigMap/tenant/web-ca")
    controller = _controller(api, recorder)
    action = controller.sync_once()
    assert isinstance(action, d.Wait) and action.reason == "injector-not-converged", action
    assert "ConfigMap tenant/web-ca" in action.why
    assert _named(controller) == {("injector-not-converged", "ConfigMap", "tenant/web-ca")}
    notes = [e.note for e in recorder.warnings if e.reason == "ManagedCAWaiting"]
    assert any("ConfigMap tenant/web-ca" in note for note in notes), notes


def test_a_report_from_a_writer_that_names_nothing_still_holds() -> None:
    api, recorder = Api(), FakeRecorder()
    api.report = _incomplete()
    action = _controller(api, recorder).sync_once()
    assert isinstance(action, d.Wait) and action.reason == "injector-not-converged", action
    assert "has not synced every object" in action.why
