"""The signer's side of a rotation: a replica validates the staged CA as a signing set
before it says "ready to sign with <fingerprint>", retries a rejected set on every
re-read (not only on a newer resourceVersion), and keeps `material_invalid` at 1 until a
set is accepted."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from prometheus_client import CollectorRegistry

from kube.client import Client
from managedca import decide as d
from managedca.codec import ca_info, encode
from managedca.material import NEXT_KEY, ApiMaterialSource, Loaded
from managedca.report import Liveness, injector_view, parse_report
from signer.authority import issue_probe
from trust.ca import cert_pem, generate_ca, key_pem
from trust.convergence import REPORT_ANNOTATION as CONVERGENCE

NOW = datetime.now(UTC).replace(microsecond=0)
INVALID = "service_serving_ca_controller_material_invalid"


def _ca(name: str, not_before: datetime | None = None) -> tuple[bytes, bytes]:
    ca = generate_ca(name, validity=timedelta(days=30), not_before=not_before)
    return key_pem(ca.key), cert_pem(ca.cert)


A_KEY, A = _ca("a", NOW - timedelta(days=1))
B_KEY, B = _ca("b", NOW - timedelta(minutes=5))
# Staged by a leader whose clock runs 15 minutes fast: not valid yet on ours.
F_KEY, F = _ca("f", NOW + timedelta(minutes=10))
A_FP, B_FP, F_FP = (ca_info(p).fingerprint for p in (A, B, F))
CERTS = {ca_info(p).fingerprint: p for p in (A, B, F)}


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _staged(nxt: bytes, next_key: bytes, rv: str) -> dict[str, Any]:
    state = d.State(current=ca_info(A), confirmed_at=NOW, next=ca_info(nxt), staged_at=NOW)
    body = encode("ns", "ca", state, CERTS, A_KEY, next_key)
    body["metadata"]["resourceVersion"] = rv
    return body


def _swapped_to(new: bytes, new_key: bytes, rv: str) -> dict[str, Any]:
    state = d.State(
        current=ca_info(new),
        confirmed_at=NOW,
        previous=(d.Previous(ca_info(A), NOW, None),),
        swapped_at=NOW,
    )
    body = encode("ns", "ca", state, CERTS, new_key, None)
    body["metadata"]["resourceVersion"] = rv
    return body


def _source(clock: Clock) -> tuple[ApiMaterialSource, CollectorRegistry]:
    registry = CollectorRegistry()
    source = ApiMaterialSource(
        cast(Client, object()), "ns", "ca", registry, issuer=issue_probe, clock=clock
    )
    return source, registry


def _invalid(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value(INVALID)


def test_a_replica_is_ready_to_sign_with_a_valid_staged_ca() -> None:
    source, registry = _source(Clock(NOW))
    source.apply(_staged(B, B_KEY, "5"))
    assert source.loaded() == Loaded(tuple(sorted((A_FP, B_FP))), A_FP, B_FP)
    assert _invalid(registry) == 0


def test_a_staged_ca_not_yet_valid_on_this_clock_is_rejected_then_accepted_on_a_re_read() -> None:
    clock = Clock(NOW)
    source, registry = _source(clock)
    source.apply(_staged(F, F_KEY, "5"))
    loaded = source.loaded()
    assert loaded.ready is None and loaded.signing == A_FP
    assert F_FP in loaded.anchors, "the bundle (old + next) is taken all the same"
    assert _invalid(registry) == 1
    clock.now = NOW + timedelta(minutes=15)
    source.apply(_staged(F, F_KEY, "5"))  # the 60 s re-read: the same resourceVersion
    assert source.loaded().ready == F_FP
    assert _invalid(registry) == 0


def test_an_edited_next_key_is_rejected_until_mended_and_material_invalid_stays_1() -> None:
    source, registry = _source(Clock(NOW))
    source.apply(_staged(B, A_KEY, "5"))  # next.key no longer matches next.crt
    assert source.loaded().ready is None
    assert _invalid(registry) == 1
    source.apply(_staged(B, A_KEY, "5"))
    assert _invalid(registry) == 1, "a re-read does not clear it"
    source.apply(_staged(B, B_KEY, "6"))
    assert source.loaded().ready == B_FP
    assert _invalid(registry) == 0


def test_a_deleted_next_key_is_a_rejection_not_a_crash() -> None:
    source, registry = _source(Clock(NOW))
    secret = _staged(B, B_KEY, "5")
    del secret["data"][NEXT_KEY]
    source.apply(secret)
    assert source.loaded().ready is None and source.loaded().signing == A_FP
    assert _invalid(registry) == 1


def test_a_rejected_signing_set_after_a_swap_keeps_the_old_one_and_is_retried() -> None:
    clock = Clock(NOW)
    source, registry = _source(clock)
    source.apply(_staged(B, B_KEY, "5"))
    source.apply(_swapped_to(F, F_KEY, "6"))  # the bundle changes: it is taken
    assert source.loaded().signing == A_FP, "still signing with the old CA"
    assert F_FP in source.loaded().anchors
    assert _invalid(registry) == 1, "a changed bundle does not reset material_invalid"
    clock.now = NOW + timedelta(minutes=15)
    source.apply(_swapped_to(F, F_KEY, "6"))
    assert source.loaded().signing == F_FP
    assert _invalid(registry) == 0


def _lease(renew: str, rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "ca-replica-1",
            "resourceVersion": rv,
            "annotations": {
                "service-serving-signer/loaded-anchors": f"{A_FP},{B_FP}",
                "service-serving-signer/signing-ca": A_FP,
                "service-serving-signer/ready-to-sign": B_FP,
            },
        },
        "spec": {"holderIdentity": "r1", "leaseDurationSeconds": 30, "renewTime": renew},
    }


def test_a_report_says_what_the_replica_signs_with_and_is_ready_to_sign_with() -> None:
    parsed = parse_report(_lease("2026-01-01T00:00:00.000000Z"))
    assert parsed is not None
    assert parsed.loaded == Loaded((A_FP, B_FP), A_FP, B_FP)


def test_liveness_follows_renewals_on_the_leaders_clock_not_the_replicas() -> None:
    mono = [1000.0]
    liveness = Liveness(lambda: mono[0])
    far_future = parse_report(_lease("2099-01-01T00:00:00.000000Z"))
    long_ago = parse_report(_lease("2000-01-01T00:00:00.000000Z"))
    assert far_future is not None and long_ago is not None
    assert liveness.report(long_ago).live, "first seen: live (it may be renewing)"
    mono[0] += 29
    assert liveness.report(long_ago).live
    mono[0] += 2
    assert not liveness.report(long_ago).live, "unchanged for its duration: not live"
    assert liveness.report(far_future).live, "renewTime changed: live again"
    mono[0] += 31
    assert not liveness.report(far_future).live, "a clock ahead does not keep it alive"


def test_an_unconfirmed_ca_is_validated_as_ready_but_not_signed_with() -> None:
    """An adopting bootstrap gates on the replicas like a stage: they say they are ready
    to sign with the new CA before anything is signed with it."""
    source, _ = _source(Clock(NOW))
    state = d.State(current=ca_info(B), previous=(d.Previous(ca_info(A), NOW, None),))
    body = encode("ns", "ca", state, CERTS, B_KEY, None)
    body["metadata"]["resourceVersion"] = "3"
    source.apply(body)
    assert source.loaded() == Loaded(tuple(sorted((A_FP, B_FP))), None, B_FP)
    assert not source.has_signing_set()


def test_the_injectors_report_converges_an_anchor_every_selecting_object_holds() -> None:
    """Objects blocked by their owner (a Warning Event each) never hold a rotation."""
    mono = [0.0]
    liveness = Liveness(lambda: mono[0])
    counts = {
        B_FP: {"selecting": 3, "holding": 2, "blocked": 1},
        F_FP: {"selecting": 3, "holding": 1, "blocked": 1},
    }
    lease: dict[str, Any] = {
        "metadata": {
            "name": "service-serving-signer-injector-convergence",
            "annotations": {
                CONVERGENCE: json.dumps(
                    {"complete": True, "anchors": counts, "observedAnchors": [B_FP, F_FP]}
                )
            },
        },
        "spec": {"holderIdentity": "inj", "renewTime": "2026-01-01T00:00:00.000000Z"},
    }
    view = injector_view(lease, liveness)
    assert view.live and view.converged == frozenset({B_FP})
    mono[0] += 46
    assert not injector_view(lease, liveness).live, "not renewed for 45 s: stale"
    lease["metadata"]["annotations"][CONVERGENCE] = "{not json"
    lease["spec"]["renewTime"] = "2026-01-01T00:01:00.000000Z"
    unreadable = injector_view(lease, liveness)
    assert (unreadable.live, unreadable.converged) == (True, frozenset())
    assert unreadable.ignored is not None and "not JSON" in unreadable.ignored


def _body(state: d.State, key: bytes, rv: str) -> dict[str, Any]:
    body = encode("ns", "ca", state, CERTS, key, None)
    body["metadata"]["resourceVersion"] = rv
    return body


def test_an_emergency_stops_signing_with_the_revoked_root_at_once_and_remembers_it() -> None:
    source, _ = _source(Clock(NOW))
    source.apply(_body(d.State(current=ca_info(A), confirmed_at=NOW), A_KEY, "1"))
    assert source.loaded().signing == A_FP
    revoked = d.State(current=ca_info(B), revoked=frozenset({A_FP}), emergency=True)
    source.apply(_body(revoked, B_KEY, "2"))
    assert source.loaded().signing is None and not source.has_signing_set()
    assert A_FP not in source.loaded().anchors
    # The Secret deleted and made again by a leader that never saw the revocation: this
    # replica still never publishes or signs with the revoked root.
    again = d.State(
        current=ca_info(B), confirmed_at=NOW, previous=(d.Previous(ca_info(A), NOW, None),)
    )
    source.apply(_body(again, B_KEY, "3"))
    assert A_FP not in source.loaded().anchors
    assert source.loaded().signing == B_FP
    assert source.revoked() == frozenset({A_FP})


def test_a_secret_the_codec_cannot_read_keeps_the_last_good_material() -> None:
    """The source reads the Secret through the same codec as the controller: a Secret
    without ca.key is a rejection (material_invalid 1), never a crash, and the material
    loaded before keeps signing."""
    source, registry = _source(Clock(NOW))
    source.apply(_body(d.State(current=ca_info(A), confirmed_at=NOW), A_KEY, "1"))
    broken = _body(d.State(current=ca_info(A), confirmed_at=NOW), A_KEY, "2")
    del broken["data"]["ca.key"]
    source.apply(broken)
    assert source.loaded().signing == A_FP
    assert _invalid(registry) == 1


def test_the_injectors_shipped_report_lease_never_written_is_not_a_report() -> None:
    """config/injector and the chart ship the report Lease empty (the injector may not
    create one): until the injector writes it, an injector is installed but has never
    reported — a visible wait, never no gate."""
    lease: dict[str, Any] = {
        "metadata": {"name": "service-serving-signer-injector-convergence"},
        "spec": {},
    }
    view = injector_view(lease, Liveness(lambda: 0.0))
    assert not view.reported and view.converged == frozenset()


def test_the_wait_names_the_consumers_that_hold_it_not_the_excused_tenant_ones() -> None:
    """A tenant's ConfigMap whose write is refused is blocked and excused (it does not
    hold the swap): the wait must not blame it. A blocked webhook configuration holds the
    swap and is named, with the API's reason."""
    from trust.convergence import (
        REPORT_ANNOTATION,
        AnchorCounts,
        ConvergenceReport,
        KindCounts,
        Lagging,
        encode,
    )

    report = ConvergenceReport(
        complete=True,
        anchors={B_FP: AnchorCounts(selecting=2, holding=0, blocked=1)},
        kinds={
            "ConfigMap": KindCounts(
                managed=1, blocked=1, lagging=(Lagging("tenant/ca", "admission denied"),)
            ),
            "ValidatingWebhookConfiguration": KindCounts(
                managed=1, blocked=1, lagging=(Lagging("hooks", "frozen by a policy"),)
            ),
        },
        observed=frozenset({B_FP}),
    )
    lease: dict[str, Any] = {
        "metadata": {
            "name": "service-serving-signer-injector-convergence",
            "annotations": {REPORT_ANNOTATION: encode(report)},
        },
        "spec": {"holderIdentity": "inj", "renewTime": "2026-01-01T00:00:00.000000Z"},
    }
    view = injector_view(lease, Liveness(lambda: 0.0))
    assert view.lagging == ("ValidatingWebhookConfiguration hooks (blocked: frozen by a policy)",)
