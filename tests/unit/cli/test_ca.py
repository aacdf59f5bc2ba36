"""`ca status` from what a `view`-like user can read: the report Leases (the leader's
carries its decision), the leader-election Lease and the ClusterTrustBundles; never the
CA Secret. It names the leader, shows relative times and only the rotation under way."""

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

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        now = datetime.now(UTC)
        if "/secrets" in path:
            raise ApiError(403, "Forbidden", {"message": "secrets is forbidden"})
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
                                DECISION: json.dumps(_decision(now)),
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
        if "clustertrustbundles" in path:
            return {"items": []}
        raise AssertionError(path)


@pytest.fixture
def view_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cli.ca, "connect", lambda *_: SimpleNamespace(client=ViewOnly(), problem=str)
    )
    monkeypatch.setattr(cli.ca, "_ctb_version", lambda _client: "v1")


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
