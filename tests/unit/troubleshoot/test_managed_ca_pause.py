"""`explain` and `status` tell the truth while the managed CA signs nothing: a request
that would otherwise be issued now waits ("issuance paused by the managed CA until T:
<the wait that holds>"), with exit status 2 as for any wait, and `ca status`, `status`
and `explain` name the same wait — the propagation delay when that is what holds, not
the read-back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from managedca.report import DECISION
from managedca.status import Decision
from troubleshoot.castatus import issuance_pause
from troubleshoot.explain import MANAGED_CA_PAUSED, Outcome, RequestReport, paused_by_managed_ca
from troubleshoot.leasehealth import BundleState, Health, Leader, LeaseState, managed_ca_state
from troubleshoot.render import managed_ca_line
from troubleshoot.status import Shown, SignerStatus

NOW = datetime(2026, 12, 7, 1, 15, tzinfo=UTC)
UNTIL = "2026-12-07T01:24:32Z"
BOOTSTRAPPING = {
    "at": "2026-12-07T01:14:52Z",
    "phase": "Bootstrapping",
    "step": "Wait",
    "reason": "propagation-delay",
    "why": "the propagation delay (kubelet's clusterTrustBundle refresh)",
    "until": UNTIL,
    "since": "2026-12-07T01:14:40Z",
    "cas": [{"role": "current", "fingerprint": "a" * 64}],
}


def report(decision: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "r-a", "annotations": {DECISION: json.dumps(decision)}},
        "spec": {
            "holderIdentity": "a",
            "renewTime": "2026-12-07T01:14:59.000000Z",
            "leaseDurationSeconds": 30,
        },
    }


def health(decision: dict[str, Any] | None) -> Health:
    return Health(
        "kubernetes.io/service-serving",
        LeaseState("ns", "l", Leader.RENEWING),
        BundleState(("b",)),
        managed_ca=managed_ca_state([report(decision)], "a") if decision else None,
    )


ISSUABLE = RequestReport("req-q82f4", NOW, Outcome.ISSUE, "would be issued now")


def test_a_new_root_waiting_for_the_propagation_delay_is_named_by_that_wait() -> None:
    decision = Decision.from_json(BOOTSTRAPPING)
    assert decision is not None
    paused, until = issuance_pause(decision)
    assert paused is not None and "propagation delay" in paused and "[propagation-delay]" in paused
    assert "read back holds it" not in paused
    assert until == UNTIL


def test_explain_says_wait_with_the_real_reason_and_until_when() -> None:
    waited = paused_by_managed_ca(ISSUABLE, health(BOOTSTRAPPING), NOW)
    assert waited.outcome is Outcome.WAIT
    assert waited.summary.startswith(f"issuance paused by the managed CA until {UNTIL} (in 9m"), (
        waited.summary
    )
    assert "propagation delay" in waited.summary
    assert waited.reason == MANAGED_CA_PAUSED
    assert waited.fix is not None and "ca status" in waited.fix


def test_status_counts_it_waiting_and_exits_2() -> None:
    h = health(BOOTSTRAPPING)
    shown = Shown("demo", "web-1", None, paused_by_managed_ca(ISSUABLE, h, NOW))
    status = SignerStatus(h, None, shown=[shown])
    assert shown.state == "waiting" and shown.reason == MANAGED_CA_PAUSED
    assert status.exit_status == 2
    assert h.managed_ca is not None
    assert "ISSUANCE PAUSED until" in managed_ca_line(h.managed_ca, NOW)


def test_a_signing_managed_ca_or_a_file_mode_signer_changes_nothing() -> None:
    stable = {**BOOTSTRAPPING, "phase": "Stable", "step": "Stage", "reason": None}
    stable["replicas"] = [{"replica": "a", "live": True, "signingCA": "a" * 64}]
    assert paused_by_managed_ca(ISSUABLE, health(stable), NOW) == ISSUABLE
    assert paused_by_managed_ca(ISSUABLE, health(None), NOW) == ISSUABLE
