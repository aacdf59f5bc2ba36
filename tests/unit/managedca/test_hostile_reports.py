"""A report Lease is input from anyone who can write Leases in the signer's namespace: every
value the leader reads from one is bounded, a report that says something out of bounds is
ignored with a Warning Event, and nothing in a step — a bad value or a bug — is a crash the
operator cannot see: any exception is `sync-failing`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import decide as d
from managedca.codec import ca_info, decode, encode
from managedca.controller import ManagedCAController
from managedca.report import (
    LOADED_ANCHORS,
    MAX_LIFETIME,
    READY_TO_SIGN,
    SIGNING_CA,
    ReplicaReportError,
    parse_report,
    read_report,
)
from tests.unit.fakes import FakeRecorder
from tests.unit.managedca.builders import CFG, NOW, T0, H, ca_pems, replica_lease


def _lease(
    name: str,
    renew: datetime | str,
    *,
    anchors: str = "",
    signing: str = "",
    ready: str = "",
    duration: int = 30,
    lifetime: str | None = None,
) -> dict[str, Any]:
    annotations = {LOADED_ANCHORS: anchors, SIGNING_CA: signing, READY_TO_SIGN: ready}
    if lifetime is not None:
        annotations[MAX_LIFETIME] = lifetime
    return replica_lease(name, annotations, renew, duration=duration)


# parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lease",
    [
        _lease("forged", NOW, lifetime=str(10**15)),  # overflowed timedelta
        _lease("forged", NOW, lifetime=str(10**12)),  # 31,700 years
        _lease("forged", NOW, lifetime="-5"),
        _lease("forged", NOW, duration=2**31 - 1),  # live for 68 years from a sighting
        _lease("forged", NOW, duration=0),
        _lease("forged", "9999-12-31T23:59:59.999999Z"),  # + its duration overflows
        _lease("forged", NOW, signing="not-a-fingerprint"),
        _lease("forged", NOW, anchors=",".join(["a" * 64] * 65)),
    ],
    ids=[
        "lifetime-overflow",
        "lifetime-31700y",
        "lifetime-negative",
        "duration-68y",
        "duration-0",
        "renew-9999",
        "signing-garbage",
        "too-many-anchors",
    ],
)
def test_a_report_with_an_out_of_range_value_is_refused_not_a_crash(
    lease: dict[str, Any],
) -> None:
    with pytest.raises(ReplicaReportError):
        read_report(lease)
    assert parse_report(lease) is None


def test_a_report_from_a_clock_far_ahead_still_reads() -> None:
    """Bounds are on what no clock gives, not on skew: liveness never compares clocks."""
    assert parse_report(_lease("skewed", "2099-01-01T00:00:00.000000Z")) is not None


# the decision ----------------------------------------------------------------------------


def test_a_reported_lifetime_longer_than_the_ca_itself_is_not_recorded() -> None:
    """No leaf outlives its CA (the signer caps notAfter at the CA's), so a report that
    says it may issue 31,700-year leaves must not become the CA's recorded lifetime."""
    a = d.CaInfo("aa", T0, T0 + timedelta(days=100))
    state = d.State(current=a, confirmed_at=T0, issued_lifetime=24 * H)
    forged = d.ReplicaView("forged", frozenset({"aa"}), "aa", None, True, timedelta(seconds=10**12))
    action = d.decide(state, d.Observations(frozenset({"aa"}), (forged,)), T0 + H, CFG)
    assert not (isinstance(action, d.RecordLifetime) and action.lifetime > a.lifetime), action


def test_a_recorded_lifetime_out_of_datetime_range_does_not_wedge_the_retire() -> None:
    """A Secret that recorded such a lifetime (an older version did) schedules the retire
    within the root's own life, instead of overflowing on every sync."""
    a = d.CaInfo("aa", T0, T0 + timedelta(days=100))
    b = d.CaInfo("bb", T0 + H, T0 + timedelta(days=101))
    state = d.State(
        current=b,
        confirmed_at=T0,
        previous=(d.Previous(a, T0 + 2 * H, None, timedelta(seconds=10**12)),),
        swapped_at=T0 + 2 * H,
        issued_lifetime=24 * H,
    )
    live = d.ReplicaView("r1", frozenset({"aa", "bb"}), "bb", None, True)
    action = d.decide(state, d.Observations(frozenset({"aa", "bb"}), (live,)), T0 + 3 * H, CFG)
    assert isinstance(action, d.ScheduleRetire), action
    assert action.retire_at <= T0 + 3 * H + a.lifetime + CFG.retire_margin


# the controller ---------------------------------------------------------------------------


class Api:
    """The CA Secret, both roots published, and the report Leases the test gives."""

    def __init__(self, secret: dict[str, Any] | None, bundle: bytes, reports: list[Any]) -> None:
        self.secret = secret
        self.bundle = bundle
        self.reports = reports
        self.written: list[dict[str, Any]] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/secrets/ca"):
            if self.secret is None:
                raise ApiError(404, "NotFound")
            return copy.deepcopy(self.secret)
        if "clustertrustbundles" in path:
            return {"items": [{"spec": {"trustBundle": self.bundle.decode()}}]}
        if path.endswith("/leases"):
            return {"items": copy.deepcopy(self.reports)}
        raise ApiError(404, "NotFound")

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.written.append(dict(body))
        out = copy.deepcopy(dict(body))
        rv = (self.secret or {"metadata": {"resourceVersion": "0"}})["metadata"]["resourceVersion"]
        out["metadata"]["resourceVersion"] = str(int(rv) + 1)
        self.secret = out
        return copy.deepcopy(out)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.replace(path, body)


def _controller(api: Api, recorder: FakeRecorder | None = None, **kw: Any) -> ManagedCAController:
    return ManagedCAController(
        cast(Client, api),
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1beta1",
        config=CFG,
        make_ca=kw.pop("make_ca", lambda now: (b"", b"")),
        clock=lambda: NOW,
        registry=CollectorRegistry(),
        recorder=recorder,
        **kw,
    )


def _poisoned() -> tuple[Api, str, str]:
    """The Secret as a forged 10**12 s lifetime left it on an older version (swapped, the
    previous root's lifetime 10**12 s), both roots published, one healthy replica."""
    _, a_pem = ca_pems("a")
    b_key, b_pem = ca_pems("b")
    a, b = ca_info(a_pem), ca_info(b_pem)
    state = d.State(
        current=b,
        confirmed_at=NOW - H,
        previous=(d.Previous(a, NOW - H, None, timedelta(seconds=10**12)),),
        swapped_at=NOW - H,
        issued_lifetime=24 * H,
    )
    secret = encode("ns", "ca", state, {a.fingerprint: a_pem, b.fingerprint: b_pem}, b_key, None)
    secret["metadata"]["resourceVersion"] = "5"
    both = f"{a.fingerprint},{b.fingerprint}"
    report = _lease("ca-replica-1", NOW, anchors=both, signing=b.fingerprint)
    return Api(secret, a_pem + b_pem, [report]), a.fingerprint, b.fingerprint


def _waiting(controller: ManagedCAController, reason: str) -> float | None:
    return controller.metrics.registry.get_sample_value(
        "service_serving_ca_controller_managed_ca_waiting", {"reason": reason}
    )


def test_a_secret_poisoned_with_an_endless_lifetime_still_schedules_the_retire() -> None:
    api, a_fp, _ = _poisoned()
    _controller(api).sync()
    assert len(api.written) == 1, "the retire is scheduled, not a crash on every sync"
    previous = decode(api.secret).state.previous  # type: ignore[arg-type]
    assert previous[0].ca.fingerprint == a_fp and previous[0].retire_at is not None
    assert previous[0].retire_at <= NOW + previous[0].ca.lifetime + CFG.retire_margin


@pytest.mark.parametrize(
    "forged",
    [
        {"lifetime": str(10**15)},
        {"lifetime": str(200 * 86400)},  # parses, but outlives the 100-day CA
        {"duration": 2**31 - 1},
    ],
    ids=["lifetime-overflow", "lifetime-beyond-the-ca", "duration-68y"],
)
def test_a_forged_report_is_ignored_with_a_warning_not_trusted(forged: dict[str, Any]) -> None:
    """Its values are never trusted (its lifetime is not recorded); while someone keeps
    writing it, it holds the gates as a replica that has loaded nothing — a named wait,
    never a gate opened — until it is deleted or stops changing."""
    api, _, b_fp = _poisoned()
    api.reports.append(_lease("forged", NOW, anchors=b_fp, signing="", **forged))
    recorder = FakeRecorder()
    controller = _controller(api, recorder)
    controller.sync()
    assert _waiting(controller, "sync-failing") == 0
    assert api.written == [], "a report nobody can read does not open the retire clock"
    assert _waiting(controller, "replica-not-signing") == 1
    decision = controller.decision
    assert decision is not None and "forged (unreadable)" in (decision.why or "")
    ignored = [e for e in recorder.warnings if e.reason == "ManagedCAReportIgnored"]
    assert [(e.regarding.kind, e.regarding.name) for e in ignored] == [("Lease", "forged")]
    assert decode(api.secret).state.issued_lifetime == 24 * H  # type: ignore[arg-type]
    controller.sync()
    assert len([e for e in recorder.warnings if e.reason == "ManagedCAReportIgnored"]) == 1, (
        "said once, not on every step"
    )


def test_an_unexpected_error_in_a_step_is_exported_as_sync_failing() -> None:
    """ServiceServingSignerManagedCASyncFailing watches waiting{reason="sync-failing"}:
    any exception in a step sets it (here making the key fails), not only API and
    Secret-decode errors; `ca status` shows the failure, not a stale next step."""

    def broken(now: datetime) -> tuple[bytes, bytes]:
        raise ValueError("the key generator failed")

    recorder = FakeRecorder()
    decisions: list[Any] = []
    controller = _controller(
        Api(None, b"", []), recorder, make_ca=broken, on_decision=decisions.append
    )
    with pytest.raises(ValueError, match="key generator"):
        controller.sync()
    assert _waiting(controller, "sync-failing") == 1
    assert "ManagedCASyncFailed" in recorder.reasons()
    assert decisions and decisions[-1]["reason"] == "sync-failing"
