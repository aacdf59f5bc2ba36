"""A deleted injector convergence report Lease (`kubectl delete lease --all` in the
signer's namespace, a namespace cleanup, `kubectl delete -f` of the shipped Leases)
never turns the injector's gate off: once a leader has seen the Lease, its absence is a
wait (`injector-report-missing`) that names the one command that puts it back, for this
leader (its memory) and for every later one (the Secret's `ca-injector-report-seen`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from managedca import decide as d
from managedca.codec import INJECTOR_SEEN, decode, encode
from managedca.layout import INJECTOR_SEEN as INJECTOR_SEEN_ON_BUNDLE
from managedca.report import READY_TO_SIGN
from tests.unit.fakes import FakeRecorder
from tests.unit.managedca.builders import NOW, replica_lease
from tests.unit.managedca.test_waiting_objects import HOOKS, Api, _controller
from trust.bundle import stable_bundle_name


def test_a_deleted_convergence_report_holds_the_swap_visibly() -> None:
    api, recorder = Api(), FakeRecorder()
    controller = _controller(api, recorder)
    api.lagging(HOOKS)  # the injector reports; a webhook does not hold the next CA yet
    first = controller.sync_once()
    assert isinstance(first, d.Wait) and first.reason == "injector-not-converged", first
    api.report = None  # the report Lease is deleted; the injector cannot create it
    action = controller.sync_once()
    assert isinstance(action, d.Wait), f"swapped with the webhook still lagging: {action!r}"
    assert action.reason == "injector-report-missing", action
    assert "kubectl apply -k config/injector" in action.why
    warnings = [e.note for e in recorder.warnings if e.reason == "ManagedCAWaiting"]
    assert any("[injector-report-missing]" in note for note in warnings), warnings


def test_a_new_leader_that_never_saw_the_report_still_waits_for_it() -> None:
    """The Lease was deleted before a leader change: the new leader has never seen it, the
    Secret says a leader did."""
    api, recorder = Api(), FakeRecorder()
    _controller(api, recorder).sync_once()
    api.report = None
    action = _controller(api, recorder).sync_once()
    assert isinstance(action, d.Wait) and action.reason == "injector-report-missing", action


def test_the_first_sight_of_the_report_is_written_to_the_secret() -> None:
    api, recorder = Api(), FakeRecorder()
    stored = decode(api.secret)
    api.secret = _encoded(api, replace(stored.state, injector_seen=False))
    api.lagging(HOOKS)
    action = _controller(api, recorder).sync_once()
    assert isinstance(action, d.RecordInjectorSeen), action
    annotations = api.written[-1]["metadata"]["annotations"]
    assert annotations[INJECTOR_SEEN] == "true"
    assert any(e.reason == "ManagedCAInjectorReportSeen" for e in recorder.events)


def test_an_install_without_an_injector_is_not_gated() -> None:
    """No report Lease ever seen, `auto`: no injector is installed, nothing to wait for."""
    api, recorder = Api(), FakeRecorder()
    stored = decode(api.secret)
    api.secret = _encoded(api, replace(stored.state, injector_seen=False))
    controller = _controller(api, recorder)
    actions = [controller.sync_once() for _ in range(2)]
    assert isinstance(actions[-1], d.Swap), actions


def _encoded(api: Api, state: d.State) -> dict[str, Any]:
    stored = decode(api.secret)
    body = encode("ns", "ca", state, stored.certs, stored.current_key, stored.next_key)
    body["metadata"]["resourceVersion"] = "5"
    return body


def test_the_leader_remembers_a_report_it_has_seen() -> None:
    """Its memory covers what the Secret cannot say yet (an adopting bootstrap's gates, a
    record not written yet): a report this leader saw and lost is still a wait."""
    api = Api()
    api.lagging(HOOKS)
    controller = _controller(api, FakeRecorder())
    assert controller.observe().observations.injector_seen
    api.report = None
    assert controller.observe().observations.injector_seen
    assert not _controller(Api(), FakeRecorder()).observe().observations.injector_seen


class TwoReplicas(Api):
    """r1 ready to sign with the next CA; r2 not (it rejected it); r2's report can be
    deleted (`kubectl delete lease`)."""

    def __init__(self) -> None:
        super().__init__()
        self.lagging()  # the injector holds nothing back
        self.r2: dict[str, str] | None = {**self.replica, READY_TO_SIGN: ""}

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        out = super().get(path, params)
        if path.endswith("/leases") and self.r2 is not None:
            renewed = NOW + timedelta(seconds=self.renewals)
            out["items"].append(replica_lease("ca-replica-2", dict(self.r2), renewed))
        return out


def test_a_deleted_replica_report_counts_as_last_seen_until_its_duration_passes() -> None:
    """A lagging replica's report deleted by someone does not hide it from the gate: its
    last view holds for the report's duration on the leader's clock (the replica writes
    it again within its period), then it is gone like a dead replica's."""
    api = TwoReplicas()
    seconds = [0.0]  # the leader's monotonic clock
    controller = _controller(api, FakeRecorder())
    controller.observer.monotonic = lambda: seconds[0]
    controller.observer.liveness._monotonic = lambda: seconds[0]
    first = controller.sync_once()
    assert isinstance(first, d.Wait) and first.reason == "replica-not-ready", first
    api.r2 = None  # deleted
    seconds[0] += 5
    held = controller.sync_once()
    assert isinstance(held, d.Wait) and held.reason == "replica-not-ready", held
    assert "ca-replica-2" in held.why
    seconds[0] += 31  # past its 30 s duration: gone, like a dead replica's report
    action = controller.sync_once()
    assert not (isinstance(action, d.Wait) and action.reason == "replica-not-ready"), action


class WithStableBundle(Api):
    """The staged rotation's API, the stable ClusterTrustBundle named as the signer's."""

    def __init__(self) -> None:
        super().__init__()
        self.stable: dict[str, Any] = {
            "metadata": {"name": stable_bundle_name("example.com/x"), "resourceVersion": "3"},
            "spec": {"signerName": "example.com/x", "trustBundle": self.bundle},
        }

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if "clustertrustbundles" in path:
            return {"items": [copy.deepcopy(self.stable)]}
        return super().get(path, params)

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if "clustertrustbundles" in path:
            self.stable = copy.deepcopy(dict(body))
            return copy.deepcopy(self.stable)
        return super().replace(path, body)


def test_the_stable_bundle_remembers_the_report_a_secret_restore_forgets() -> None:
    """Seen once, it is also written on the stable ClusterTrustBundle (cluster-scoped, not
    restored with the Secret): a Secret deleted or restored from before the report was
    seen, the report Lease deleted and a new leader elected, still waits for it."""
    api = WithStableBundle()
    api.lagging(HOOKS)
    _controller(api, FakeRecorder()).sync_once()
    annotations = api.stable["metadata"].get("annotations") or {}
    assert annotations.get(INJECTOR_SEEN_ON_BUNDLE) == "true"
    stored = decode(api.secret)
    api.secret = _encoded(api, replace(stored.state, injector_seen=False))  # a restore
    api.report = None  # and the Lease deleted
    action = _controller(api, FakeRecorder()).sync_once()  # a new leader
    assert isinstance(action, d.Wait) and action.reason == "injector-report-missing", action
