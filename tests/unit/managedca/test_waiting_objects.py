"""A swap held by injected consumers names them wherever an operator looks: the wait's
`why` (`ca status`), the Warning Event `ManagedCAWaiting`, and the metric
`…_managed_ca_waiting_object{reason,kind,name}` — one series per object that holds the
swap (at most the convergence report's first lagging names, so its cardinality is
bounded), never a tenant's excused object, and gone once the wait ends."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import decide as d
from managedca.codec import ca_info, encode
from managedca.controller import ManagedCAController
from managedca.report import LOADED_ANCHORS, READY_TO_SIGN, SIGNING_CA
from tests.unit.fakes import FakeRecorder
from tests.unit.managedca.builders import CFG, NOW, H, ca_pems, replica_lease
from trust import convergence as c

REPORT = c.REPORT_NAME
WAITING_OBJECT = "service_serving_ca_controller_managed_ca_waiting_object"
HELD = "injector-not-converged"
HOURS = itertools.count(0, 3600.0)


class Api:
    """A staged rotation whose every gate but the injector's is open: both roots
    published long ago, one replica ready to sign with the next CA; the injector's
    convergence report is what the test sets (`report`)."""

    def __init__(self) -> None:
        a_key, a_pem = ca_pems("a")
        b_key, b_pem = ca_pems("b")
        self.a, self.b = ca_info(a_pem), ca_info(b_pem)
        state = d.State(
            current=self.a,
            confirmed_at=NOW - 10 * H,
            next=self.b,
            staged_at=NOW - 2 * H,
            published_at=NOW - 2 * H,
            swap_not_before=NOW - H,
            issued_lifetime=24 * H,
            injector_seen=True,
        )
        certs = {self.a.fingerprint: a_pem, self.b.fingerprint: b_pem}
        self.secret = encode("ns", "ca", state, certs, a_key, b_key)
        self.secret["metadata"]["resourceVersion"] = "5"
        self.bundle = (a_pem + b_pem).decode()
        self.replica = {
            LOADED_ANCHORS: f"{self.a.fingerprint},{self.b.fingerprint}",
            SIGNING_CA: self.a.fingerprint,
            READY_TO_SIGN: self.b.fingerprint,
        }
        self.report: c.ConvergenceReport | None = None
        self.renewals = 0
        self.written: list[dict[str, Any]] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/secrets/ca"):
            return copy.deepcopy(self.secret)
        if "clustertrustbundles" in path:
            return {"items": [{"spec": {"trustBundle": self.bundle}}]}
        self.renewals += 1  # every Lease is renewed between every two looks: live
        renewed = NOW + timedelta(seconds=self.renewals)
        if path.endswith("/leases"):
            return {"items": [replica_lease("ca-replica-1", dict(self.replica), renewed)]}
        if path.endswith(f"/leases/{REPORT}") and self.report is not None:
            return replica_lease(REPORT, {c.REPORT_ANNOTATION: c.encode(self.report)}, renewed)
        raise ApiError(404, "NotFound")

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.written.append(dict(body))
        out = copy.deepcopy(dict(body))
        out["metadata"]["resourceVersion"] = str(len(self.written) + 5)
        self.secret = out
        return copy.deepcopy(out)

    def lagging(self, *objects: tuple[str, c.Lagging]) -> None:
        """The next CA selected by every object named, held by none of them (a tenant's
        blocked ConfigMap excused)."""
        kinds: dict[str, list[c.Lagging]] = {}
        for kind, lag in objects:
            kinds.setdefault(kind, []).append(lag)
        excused = sum(1 for _, lag in objects if lag.reason is not None and "/" in lag.name)
        rows = {
            kind: c.KindCounts(
                managed=len(lags),
                stale=sum(lag.reason is None for lag in lags),
                blocked=sum(lag.reason is not None for lag in lags),
                lagging=tuple(lags),
            )
            for kind, lags in kinds.items()
        }
        anchors = {self.b.fingerprint: c.AnchorCounts(len(objects), 0, excused)}
        self.report = c.ConvergenceReport(True, anchors, rows, frozenset({self.b.fingerprint}))


def _controller(api: Api, recorder: FakeRecorder) -> ManagedCAController:
    return ManagedCAController(
        cast(Client, api),
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1beta1",
        config=CFG,
        make_ca=lambda now: (b"", b""),
        clock=lambda: NOW,
        registry=CollectorRegistry(),
        recorder=recorder,
        injector_report=REPORT,
        monotonic=lambda: next(HOURS),  # the leader has seen the bundle for hours
    )


def _named(controller: ManagedCAController) -> set[tuple[str, str, str]]:
    return {
        (s.labels["reason"], s.labels["kind"], s.labels["name"])
        for metric in controller.metrics.registry.collect()
        if metric.name == WAITING_OBJECT
        for s in metric.samples
        if s.value == 1
    }


def _waiting_warnings(recorder: FakeRecorder) -> list[str]:
    return [e.note for e in recorder.warnings if e.reason == "ManagedCAWaiting"]


HOOKS = ("ValidatingWebhookConfiguration", c.Lagging("hooks", "frozen by a policy"))
API = ("APIService", c.Lagging("v1.metrics.example.com"))
TENANT = ("ConfigMap", c.Lagging("tenant/ca", "admission denied"))


def test_the_consumers_that_hold_the_swap_are_named_by_the_metric_and_the_event() -> None:
    api, recorder = Api(), FakeRecorder()
    api.lagging(HOOKS, TENANT)
    controller = _controller(api, recorder)

    action = controller.sync_once()

    assert isinstance(action, d.Wait) and action.reason == HELD, action
    assert "ValidatingWebhookConfiguration hooks" in action.why
    assert _named(controller) == {(HELD, "ValidatingWebhookConfiguration", "hooks")}, (
        "the webhook configuration holds the swap; the tenant's ConfigMap is excused"
    )
    (warning,) = _waiting_warnings(recorder)
    assert "ValidatingWebhookConfiguration hooks" in warning and "tenant/ca" not in warning


def test_an_object_that_starts_holding_the_swap_later_is_named_too() -> None:
    """The set named follows the report: a newcomer gets a series and a Warning naming it;
    one that took the new CA loses its series (no Warning for it)."""
    api, recorder = Api(), FakeRecorder()
    api.lagging(HOOKS)
    controller = _controller(api, recorder)
    controller.sync_once()

    api.lagging(HOOKS, API)
    controller.sync_once()
    assert _named(controller) == {
        (HELD, "ValidatingWebhookConfiguration", "hooks"),
        (HELD, "APIService", "v1.metrics.example.com"),
    }
    assert len(_waiting_warnings(recorder)) == 2
    assert "APIService v1.metrics.example.com" in _waiting_warnings(recorder)[-1]

    api.lagging(API)
    controller.sync_once()
    assert _named(controller) == {(HELD, "APIService", "v1.metrics.example.com")}
    assert len(_waiting_warnings(recorder)) == 2, "nothing new holds it: no new Warning"


def test_no_object_is_named_once_the_swap_is_no_longer_held() -> None:
    api, recorder = Api(), FakeRecorder()
    api.lagging(HOOKS, API)
    controller = _controller(api, recorder)
    controller.sync_once()
    assert len(_named(controller)) == 2

    api.lagging()  # every consumer holds the new CA
    action = controller.sync_once()

    # Pods read what the injector wrote on kubelet's next resync: the propagation
    # delay, no object to blame.
    assert isinstance(action, d.Wait) and action.reason == "propagation-delay", action
    assert _named(controller) == set()
    action = controller.sync_once()  # hours later on the leader's monotonic clock
    assert isinstance(action, d.Swap), action
    assert _named(controller) == set()


def test_at_most_the_reports_first_lagging_names_are_series() -> None:
    """Cardinality: the report names at most `MAX_LAGGING` objects per kind and the wait
    at most `MAX_LAGGING` in all, so thousands of lagging objects are a handful of
    series."""
    api, recorder = Api(), FakeRecorder()
    many = [
        (kind, c.Lagging(f"hooks-{i:03}"))
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for i in range(c.MAX_LAGGING)
    ]
    api.lagging(*many)
    controller = _controller(api, recorder)
    controller.sync_once()
    assert len(_named(controller)) == c.MAX_LAGGING
