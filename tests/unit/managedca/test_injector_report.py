"""The injector's convergence report as the managed CA reads it: live for the Lease's own
`leaseDurationSeconds` after its renewTime was last seen to change (the leader's clock),
within the contract's bounds (`trust.convergence`); a report whose duration is out of
bounds converges nothing and is ignored with a Warning Event, never a crash."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import decide as d
from managedca.controller import ManagedCAController
from managedca.report import Liveness, injector_view
from tests.unit.fakes import FakeRecorder
from trust import convergence
from trust.convergence import REPORT_ANNOTATION, report_lease

FP = "b" * 64
NAME = convergence.REPORT_NAME


def _lease(duration: object = None, *, renew: str = "2026-01-01T00:00:00.000000Z") -> Any:
    spec: dict[str, Any] = {"holderIdentity": "inj", "renewTime": renew}
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    report = {"complete": True, "anchors": {}, "observedAnchors": [FP]}
    return {
        "metadata": {
            "name": NAME,
            "uid": "uid-report",
            "annotations": {REPORT_ANNOTATION: json.dumps(report)},
        },
        "spec": spec,
    }


def _live_after(lease: Any, seconds: float) -> bool:
    mono = [0.0]
    liveness = Liveness(lambda: mono[0])
    injector_view(lease, liveness)  # first sighting
    mono[0] = seconds
    return injector_view(lease, liveness).live


def test_a_report_is_live_for_its_own_lease_duration() -> None:
    assert _live_after(_lease(120), 100), "a 120 s Lease unchanged for 100 s is live"
    assert not _live_after(_lease(120), 121)
    assert not _live_after(_lease(20), 21), "a 20 s Lease unchanged for 21 s is stale"
    assert _live_after(_lease(20), 19)


def test_a_report_that_gives_no_duration_is_live_for_the_contracts() -> None:
    assert _live_after(_lease(), convergence.DURATION_SECONDS - 1)
    assert not _live_after(_lease(), convergence.DURATION_SECONDS + 1)


def test_the_bounds_are_the_contracts_and_hold_what_the_injector_writes() -> None:
    assert (
        convergence.MIN_DURATION_SECONDS
        <= convergence.DURATION_SECONDS
        <= convergence.MAX_DURATION_SECONDS
    )
    assert convergence.MIN_DURATION_SECONDS > convergence.RENEW_SECONDS


@pytest.mark.parametrize(
    "duration",
    [
        convergence.MIN_DURATION_SECONDS - 1,
        convergence.MAX_DURATION_SECONDS + 1,
        2**31 - 1,
        0,
        -30,
        "30",
        True,
        30.5,
    ],
    ids=["short", "long", "68y", "zero", "negative", "string", "bool", "float"],
)
def test_a_report_whose_duration_is_out_of_bounds_converges_nothing_and_says_why(
    duration: object,
) -> None:
    view = injector_view(_lease(duration), Liveness(lambda: 0.0))
    assert view.converged == frozenset()
    assert view.ignored is not None and "leaseDurationSeconds" in view.ignored


def test_a_report_within_bounds_is_not_ignored() -> None:
    for duration in (convergence.MIN_DURATION_SECONDS, convergence.MAX_DURATION_SECONDS):
        view = injector_view(_lease(duration), Liveness(lambda: 0.0))
        assert view.ignored is None and view.converged == frozenset({FP})


# the controller: a Warning Event, once --------------------------------------------------


class Api:
    """No CA Secret yet, nothing published, no replica reports; the injector's report."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.report = report

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path == report_lease("ns", NAME).path:
            return copy.deepcopy(dict(self.report))
        if "clustertrustbundles" in path or path.endswith("/leases"):
            return {"items": []}
        raise ApiError(404, "NotFound")

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(dict(body))
        out["metadata"]["resourceVersion"] = "1"
        return out

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.replace(path, body)


def test_a_report_with_an_out_of_bounds_duration_is_ignored_with_one_warning() -> None:
    recorder = FakeRecorder()
    controller = ManagedCAController(
        cast(Client, Api(_lease(2**31 - 1))),
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1beta1",
        config=d.Config(),
        make_ca=lambda now: (b"", b""),
        clock=lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=1),
        registry=CollectorRegistry(),
        recorder=recorder,
        injector_report=NAME,
    )
    controller.observer.observe()
    controller.observer.observe()
    ignored = [e for e in recorder.warnings if e.reason == "ManagedCAReportIgnored"]
    assert [(e.regarding.kind, e.regarding.name) for e in ignored] == [("Lease", NAME)]
    assert "leaseDurationSeconds" in ignored[0].note
