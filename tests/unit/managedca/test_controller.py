"""The managed-CA controller's sync against races the real API allows but an
integration test cannot time: the CA Secret deleted between the step's read and its
write."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from kube.controller import Requeue
from managedca import decide as d
from managedca.codec import ca_info, encode
from managedca.controller import KEY, ManagedCAController
from managedca.layout import CURRENT_CERT
from trust.ca import cert_pem, generate_ca, key_pem

NOW = datetime.now(UTC).replace(microsecond=0)


def _controller(
    client: object, monotonic: Callable[[], float] = time.monotonic
) -> ManagedCAController:
    return ManagedCAController(
        cast(Client, client),
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1beta1",
        config=d.Config(),
        make_ca=lambda now: (b"", b""),
        clock=lambda: NOW,
        registry=CollectorRegistry(),
        monotonic=monotonic,
    )


class SecretDeletedBeforeTheWrite:
    """Reads see a CA just made and published; the conditional update finds no Secret
    (someone deleted it in between: kube-apiserver answers 404, not 409)."""

    def __init__(self) -> None:
        ca = generate_ca("a", validity=timedelta(days=30))
        self.cert = cert_pem(ca.cert)
        info = ca_info(self.cert)
        self.secret = encode(
            "ns", "ca", d.State(current=info), {info.fingerprint: self.cert}, key_pem(ca.key), None
        )
        self.secret["metadata"]["resourceVersion"] = "7"
        self.replaced = 0

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/secrets/ca"):
            return self.secret
        if "clustertrustbundles" in path:
            return {"items": [{"spec": {"trustBundle": self.cert.decode()}}]}
        return {"items": []}

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.replaced += 1
        raise ApiError(404, "NotFound", {"message": 'secrets "ca" not found'})


def test_a_secret_deleted_between_read_and_write_is_decided_again_not_failed() -> None:
    client = SecretDeletedBeforeTheWrite()
    controller = _controller(client)
    outcome = controller.sync()
    assert client.replaced == 1, "the step (Confirm) was attempted"
    assert isinstance(outcome, Requeue) and outcome.after is not None and outcome.after < 1


class StableForMonths:
    """A confirmed CA whose rotation point is months away; counts the reads."""

    def __init__(self) -> None:
        ca = generate_ca("b", validity=timedelta(days=365))
        cert = cert_pem(ca.cert)
        info = ca_info(cert)
        state = d.State(
            current=info, confirmed_at=NOW, issued_lifetime=d.Config().max_leaf_lifetime
        )
        self.secret = encode("ns", "ca", state, {info.fingerprint: cert}, key_pem(ca.key), None)
        self.secret["metadata"]["resourceVersion"] = "9"
        self.reads = 0

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        self.reads += 1
        return self.secret if path.endswith("/secrets/ca") else {"items": []}


def test_a_stable_leader_does_not_poll_the_api_every_few_seconds() -> None:
    """In Stable the decision depends only on the Secret (watched: any change triggers a
    step) and the time, so the leader looks again at the next instant due or after a
    minute (a stalled watch), not every few seconds."""
    client = StableForMonths()
    controller = _controller(client)
    outcome = controller.sync()
    assert client.reads == 3, "the Secret, the ClusterTrustBundles, the reports"
    assert isinstance(outcome, Requeue) and outcome.after is not None and outcome.after >= 60
    assert controller.loop.resync_period is None or controller.loop.resync_period >= 60


class ReadsTheSecretButNotTheBundles:
    """The Secret reads; listing ClusterTrustBundles is forbidden (a broken Role)."""

    def __init__(self) -> None:
        self.stable = StableForMonths()

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if "clustertrustbundles" in path:
            raise ApiError(403, "Forbidden", {"message": "clustertrustbundles is forbidden"})
        return self.stable.get(path, params)


def _metric(controller: ManagedCAController, name: str, **labels: str) -> float | None:
    value = controller.metrics.registry.get_sample_value(
        f"service_serving_ca_controller_managed_ca_{name}", labels
    )
    return value


def test_a_failing_sync_still_exports_the_phase_expiry_and_what_it_waits_for() -> None:
    """Alerts must not go blind: the gauges come from what was read, and the failure is a
    waiting reason of its own and a counted error."""
    controller = _controller(ReadsTheSecretButNotTheBundles())
    with pytest.raises(ApiError):
        controller.sync()
    assert _metric(controller, "phase", phase="Stable") == 1
    assert (_metric(controller, "expiry_timestamp_seconds", role="current") or 0) > NOW.timestamp()
    assert _metric(controller, "waiting", reason="sync-failing") == 1
    decision = controller.decision
    assert decision is not None and decision.reason == "sync-failing"
    assert "forbidden" in str(decision.why)


def test_the_decision_says_what_it_waits_for_and_since_when() -> None:
    clock = [NOW]
    client = StableForMonths()
    controller = _controller(client)
    controller.clock = lambda: clock[0]
    controller.sync()
    first = controller.decision
    assert first is not None and first.phase == "Stable"
    assert first.reason == "rotation-point" and first.step == "Wait"
    assert _metric(controller, "waiting", reason="rotation-point") == 1
    assert _metric(controller, "waiting", reason="replica-not-ready") == 0
    clock[0] = NOW + timedelta(minutes=5)
    controller.sync()
    again = controller.decision
    assert again is not None and again.since == first.since, "the same wait, same since"
    assert "PRIVATE" not in repr(again) and "PRIVATE" not in repr(controller.observe())


class UnreadableSecret(StableForMonths):
    """The CA Secret edited by hand into something that is no managed CA."""

    def __init__(self) -> None:
        super().__init__()
        self.secret["data"][CURRENT_CERT] = base64.b64encode(b"not a certificate").decode()


def test_an_unreadable_secret_is_one_counted_error_looked_at_again_not_before_the_resync() -> None:
    """Counted once, by the loop, as every controller's failed sync is; nothing is written
    over the Secret; the next look is not before the resync period (a change of the
    Secret triggers one at once)."""
    controller = _controller(UnreadableSecret())
    controller.queue.add(KEY)

    assert controller.loop.process_next_work_item()

    errors = controller.metrics.registry.get_sample_value(
        "controller_sync_total", {"controller": "managed-ca", "result": "error"}
    )
    assert errors == 1
    assert controller.queue.num_requeues(KEY) == 1
    assert controller.queue.get(timeout=0.2) == (None, False)  # parked for the resync
    assert _metric(controller, "waiting", reason="sync-failing") == 1
    controller.queue.shut_down()


class Recorded:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, str]] = []

    def normal(self, *_: Any, **__: Any) -> None:
        pass

    def warning(self, _ref: Any, reason: str, note: str, _action: str, _r: Any = None) -> None:
        self.warnings.append((reason, note))


def test_a_gate_that_holds_the_rotation_is_a_warning_event_once() -> None:
    controller = _controller(StableForMonths())
    recorder = Recorded()
    controller.narrator.recorder = recorder
    staged = d.Wait(None, "replica-not-ready", "replicas not ready: r2")
    for _ in range(3):
        controller.narrator.decided(None, d.Observations(frozenset()), staged, NOW)
    controller.narrator.decided(
        None, d.Observations(frozenset()), d.Wait(None, "rotation-point"), NOW
    )
    assert recorder.warnings == [("ManagedCAWaiting", "[replica-not-ready] replicas not ready: r2")]


class StableWithADeadReplicasReport(StableForMonths):
    """Stable, and the report of a replica killed two hours ago (never renewed since)."""

    def __init__(self) -> None:
        super().__init__()
        renewed = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.report = {
            "metadata": {"name": "ca-replica-dead", "resourceVersion": "41"},
            "spec": {"holderIdentity": "dead", "leaseDurationSeconds": 30, "renewTime": renewed},
        }
        self.deleted: list[tuple[str, Mapping[str, Any] | None]] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/leases") and not self.deleted:
            self.reads += 1
            return {"items": [self.report]}
        return super().get(path, params)

    def delete(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        self.deleted.append((path, body))
        return {}


def test_a_dead_replicas_report_is_collected_one_duration_after_first_seen_not_a_resync() -> None:
    """Liveness is judged on the leader's clock, so the first sighting cannot collect; a
    Stable leader then looks again when the report's duration has passed (not at the
    minute's resync) and deletes it with the resourceVersion it judged."""
    mono = [1000.0]
    client = StableWithADeadReplicasReport()
    controller = _controller(client, monotonic=lambda: mono[0])
    first = controller.sync()
    assert client.deleted == [], "first sighting: unchanged for 0 s on our clock"
    assert isinstance(first, Requeue) and first.after is not None
    assert 30 <= first.after <= 31, "looked at again when its duration has passed"
    mono[0] += first.after
    again = controller.sync()
    [(path, body)] = client.deleted
    assert path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/ca-replica-dead"
    assert body is not None and body["preconditions"] == {"resourceVersion": "41"}
    assert isinstance(again, Requeue) and again.after is not None and again.after >= 60
