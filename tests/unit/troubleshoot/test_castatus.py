"""`ca status` (troubleshoot.castatus, printed by cli/ca.py) from what a `view`-like user
can read: the report Leases (the leader's carries its decision), the leader-election
Lease and the ClusterTrustBundles; never the CA Secret. It names the leader, shows
relative times and only the rotation under way, revoked roots and a paused issuance."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

import cli.ca
from cli.main import main
from kube.client import ApiError
from kube.times import format_time, micro_time
from managedca.report import DECISION, LOADED_ANCHORS, REPORT_LABEL
from trust import clustertrustbundles

NS = "service-serving-signer"


def _decision(now: datetime) -> dict[str, Any]:
    return {
        "at": format_time(now - timedelta(seconds=3)),
        "phase": "Staged",
        "cas": [
            {
                "role": "current",
                "fingerprint": "a" * 64,
                "notBefore": "2026-01-01T00:00:00Z",
                "notAfter": "2027-01-01T00:00:00Z",
            },
            {
                "role": "next",
                "fingerprint": "b" * 64,
                "notBefore": "2026-06-01T00:00:00Z",
                "notAfter": "2027-06-01T00:00:00Z",
            },
        ],
        "times": {"stagedAt": format_time(now - timedelta(minutes=4))},
        "replicas": [
            {
                "replica": "pod-a",
                "live": True,
                "loadedNext": True,
                "signingCA": "a" * 64,
                "readyToSign": None,
            }
        ],
        "step": "Wait",
        "reason": "replica-not-ready",
        "why": "replicas not ready to sign with the new CA: pod-a",
        "until": None,
        "since": format_time(now - timedelta(minutes=2)),
    }


class ViewOnly:
    """Leases and ClusterTrustBundles read; Secrets forbidden."""

    def __init__(self) -> None:
        self.decision: dict[str, Any] | None = None  # else `_decision(now)`
        self.bundles: list[dict[str, Any]] = []  # the signer's, and an unlinked one

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        now = datetime.now(UTC)
        if "/secrets" in path:
            raise ApiError(403, "Forbidden", {"message": "secrets is forbidden"})
        if path.endswith("/leases/service-serving-signer-presence"):
            raise ApiError(404, "NotFound", {"message": "not found"})
        if path.endswith("/leases/service-serving-signer"):
            return {
                "spec": {
                    "holderIdentity": "pod-a",
                    "leaseDurationSeconds": 15,
                    "renewTime": micro_time(now - timedelta(seconds=2)),
                }
            }
        if path.endswith("/leases"):
            assert params is not None and REPORT_LABEL in params["labelSelector"]
            return {
                "items": [
                    {
                        "metadata": {
                            "name": "r-a",
                            "annotations": {
                                LOADED_ANCHORS: f"{'a' * 64},{'b' * 64}",
                                DECISION: json.dumps(self.decision or _decision(now)),
                            },
                        },
                        "spec": {
                            "holderIdentity": "pod-a",
                            "leaseDurationSeconds": 30,
                            "renewTime": micro_time(now - timedelta(seconds=1)),
                        },
                    }
                ]
            }
        if path.endswith("/clustertrustbundles"):
            linked = [b for b in self.bundles if b["spec"].get("signerName")]
            return {"items": linked}
        if "/clustertrustbundles/" in path:
            for bundle in self.bundles:
                if path.endswith("/" + bundle["metadata"]["name"]):
                    return bundle
            raise ApiError(404, "NotFound", {"message": "not found"})
        raise AssertionError(path)


@pytest.fixture
def view_only(monkeypatch: pytest.MonkeyPatch) -> ViewOnly:
    api = ViewOnly()
    monkeypatch.setattr(cli.ca, "connect", lambda *_: SimpleNamespace(client=api, problem=str))
    monkeypatch.setattr(clustertrustbundles, "served_version", lambda _client: "v1")
    return api


@pytest.mark.usefixtures("view_only")
def test_status_needs_no_secret_access_and_says_who_leads_and_why_it_waits() -> None:
    result = CliRunner().invoke(main, ["ca", "status"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(
        r"Leader:  pod-a \(Lease service-serving-signer, renewed \d+s ago, holding\)", out
    )
    assert "Phase:   Staged" in out
    assert "Waiting: [replica-not-ready] replicas not ready to sign" in out
    assert "since " in out and "(2m ago)" in out
    assert "stagedAt:" in out and "(4m ago)" in out
    assert "swappedAt" not in out, "only the rotation under way"
    assert "NOT published" in out, "published is what the bundles hold now"


@pytest.mark.usefixtures("view_only")
def test_status_as_json_carries_the_leaders_decision() -> None:
    result = CliRunner().invoke(main, ["ca", "status", "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["phase"] == "Staged" and report["reason"] == "replica-not-ready"
    assert report["leader"]["identity"] == "pod-a" and report["decidedByLeader"]
    assert [c["role"] for c in report["cas"]] == ["current", "next"]


def _after_emergency(now: datetime) -> dict[str, Any]:
    """The leader's decision right after `ca rotate --emergency`: a new CA not yet read
    back in the bundle (Bootstrapping), the compromised root revoked."""
    decision = _decision(now)
    decision.update(
        phase="Bootstrapping",
        cas=[{**decision["cas"][1], "role": "current"}],
        revoked=["a" * 64],
        replicas=[{**decision["replicas"][0], "signingCA": None}],
        step="Wait",
        reason="bundle-not-published",
        why="the ClusterTrustBundle read back does not hold the new CA yet",
    )
    return decision


def test_status_shows_revoked_roots_and_that_issuance_is_paused(view_only: ViewOnly) -> None:
    view_only.decision = _after_emergency(datetime.now(UTC))
    result = CliRunner().invoke(main, ["ca", "status"])
    assert result.exit_code == 0, result.output
    assert f"revoked   {'a' * 16}…  never signed with nor published again" in result.output
    assert "Issuance: PAUSED: the current CA is not confirmed yet" in result.output
    report = json.loads(CliRunner().invoke(main, ["ca", "status", "-o", "json"]).output)
    assert report["revoked"] == ["a" * 64]
    assert report["issuancePaused"].startswith("the current CA is not confirmed yet")


def test_status_shows_a_pending_emergency_request(view_only: ViewOnly) -> None:
    now = datetime.now(UTC)
    decision = _decision(now)
    decision.update(revokeRequested=["a" * 64], emergencyRequestedAt=format_time(now))
    view_only.decision = decision
    result = CliRunner().invoke(main, ["ca", "status"])
    assert result.exit_code == 0, result.output
    assert f"Emergency: requested at {format_time(now)}" in result.output
    assert f"revoking {'a' * 16}…" in result.output
    assert "Issuance: PAUSED: an emergency rotation revokes the signing CA" in result.output


@pytest.mark.usefixtures("view_only")
def test_a_stable_ca_shows_no_pause_and_no_revocation() -> None:
    report = json.loads(CliRunner().invoke(main, ["ca", "status", "-o", "json"]).output)
    assert report["issuancePaused"] is None and report["revoked"] == []


@pytest.mark.parametrize("by", ["alice", "unknown"])
def test_status_says_the_consumers_gate_is_skipped_and_by_whom(
    view_only: ViewOnly, by: str
) -> None:
    """The leader states a skipped injector gate (`ca skip-consumers`, or "unknown" for a
    bare annotation): `ca status` shows it, in text and JSON."""
    decision = _decision(datetime.now(UTC))
    decision["consumersSkipped"] = {"for": "b" * 64, "by": by}
    view_only.decision = decision
    result = CliRunner().invoke(main, ["ca", "status"])
    assert result.exit_code == 0, result.output
    assert f"Consumers: the swap to {'b' * 16}… does not wait for the injector" in result.output
    assert f"(skipped by {by})" in result.output
    report = json.loads(CliRunner().invoke(main, ["ca", "status", "-o", "json"]).output)
    assert report["consumersSkipped"] == {"for": "b" * 64, "by": by}


def test_status_names_the_unlinked_bundle_and_a_published_ca_it_does_not_hold_yet(
    view_only: ViewOnly,
) -> None:
    """With `--publish-unlinked-bundle` the managed CA counts a root as published only once
    the signer-less bundle holds it too: `ca status` names that bundle beside the stable
    one and says which published CA it lacks; without it, nothing changes."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from tests.unit import pki
    from trust.bundle import fingerprint

    current, following = pki.ca("cs-current").cert, pki.ca("cs-next").cert
    pem = {c: c.public_bytes(Encoding.PEM).decode() for c in (current, following)}
    decision = _decision(datetime.now(UTC))
    decision["cas"][0]["fingerprint"] = fingerprint(current)
    decision["cas"][1]["fingerprint"] = fingerprint(following)
    view_only.decision = decision
    signer = "kubernetes.io/service-serving"
    view_only.bundles = [
        {
            "metadata": {"name": "kubernetes.io:service-serving:trust-anchors"},
            "spec": {"signerName": signer, "trustBundle": pem[current] + pem[following]},
        },
        {
            "metadata": {"name": "kubernetes.io.service-serving.trust-anchors"},
            "spec": {"trustBundle": pem[current]},
        },
    ]
    out = CliRunner().invoke(main, ["ca", "status"]).output
    assert "ClusterTrustBundle kubernetes.io:service-serving:trust-anchors (stable name)" in out
    [unlinked] = [x for x in out.splitlines() if "kubernetes.io.service-serving.trust-anchors" in x]
    assert "no signerName" in unlinked and "--publish-unlinked-bundle" in unlinked
    [row] = [x for x in out.splitlines() if x.lstrip().startswith("next ")]
    assert "published, not yet in the unlinked bundle" in row
    [row] = [x for x in out.splitlines() if x.lstrip().startswith("current ")]
    assert "not yet in the unlinked bundle" not in row and "published" in row
    report = json.loads(CliRunner().invoke(main, ["ca", "status", "-o", "json"]).output)
    assert report["unlinkedBundle"] == {
        "name": "kubernetes.io.service-serving.trust-anchors",
        "lacks": [fingerprint(following)],
    }
    view_only.bundles = view_only.bundles[:1]
    out = CliRunner().invoke(main, ["ca", "status"]).output
    assert "unlinked" not in out
    report = json.loads(CliRunner().invoke(main, ["ca", "status", "-o", "json"]).output)
    assert report["unlinkedBundle"] is None
