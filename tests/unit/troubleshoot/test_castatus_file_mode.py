"""`ca status` on a signer that runs in file mode (`--ca-mode=file`, the quick install)
says so and where to look, instead of describing a managed CA that does not exist; a
released leader Lease is shown as released, not as an expired one with no holder."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cli.main import main
from kube.times import micro_time
from signer import presence as signer_presence
from tests.unit.cli.helpers import kubeconfig
from tests.unit.fakeapi import FakeApi

NS = "service-serving-signer"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    fake.discovery["/apis/certificates.k8s.io/v1"] = {
        "kind": "APIResourceList",
        "resources": [{"name": "clustertrustbundles"}],
    }
    yield fake
    fake.stop()


def lease(
    name: str, holder: str, ago: float, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": micro_time(datetime.now(UTC) - timedelta(seconds=ago)),
        },
    }


def ca_status(api: FakeApi, tmp_path: Path, *args: str) -> Result:
    config = kubeconfig(tmp_path / "kc", api.url)
    return CliRunner().invoke(main, ["ca", "status", f"--kubeconfig={config}", *args])


def file_mode_signer(api: FakeApi, leader: str = "pod-a") -> None:
    api.put(LEASES, lease(NS, leader, 1))
    api.put(
        LEASES,
        lease(f"{NS}-presence", "pod-a", 1, {signer_presence.CA_MODE: "file"}),
    )


def test_ca_status_on_a_file_mode_signer_says_file_mode_and_where_to_look(
    api: FakeApi, tmp_path: Path
) -> None:
    file_mode_signer(api)
    result = ca_status(api, tmp_path)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("CA mode: file (the signer runs with --ca-mode=file)")
    assert "service-serving-signer status" in out
    assert 'docs/operate.md "CA rotation (no restart)"' in out
    assert "managed-ca" not in out.split("docs/managed-ca.md")[0], "names no managed Secret"
    assert "Phase:" not in out
    assert "Leader:  pod-a (Lease service-serving-signer, holding)" in out
    body = json.loads(ca_status(api, tmp_path, "-o", "json").stdout)
    assert body["caMode"] == "file"


def test_the_documented_rotation_section_exists() -> None:
    """The heading the file-mode text points at is docs/operate.md's."""
    operate = (Path(__file__).resolve().parents[3] / "docs" / "operate.md").read_text()
    assert "\n## CA rotation (no restart)\n" in operate


def test_a_released_leader_lease_is_shown_released_not_expired(
    api: FakeApi, tmp_path: Path
) -> None:
    file_mode_signer(api, leader="")
    out = ca_status(api, tmp_path).stdout
    assert "Leader:  none (Lease service-serving-signer released: no leader right now)" in out
    assert "EXPIRED" not in out


def test_ca_status_after_a_managed_uninstall_says_no_signer_runs_not_phase_unknown(
    api: FakeApi, tmp_path: Path
) -> None:
    """The uninstalled leader released its Lease, the presence Lease is no longer renewed
    and no replica reports: the phase is not "unknown", nobody runs to decide one; the
    Secret, which the uninstall kept, is named for the reinstall."""
    api.put(LEASES, lease(NS, "", 60))
    api.put(
        LEASES,
        lease(f"{NS}-presence", "pod-a", 120, {signer_presence.CA_MODE: "managed"}),
    )
    result = ca_status(api, tmp_path)
    assert result.exit_code == 0, result.stderr
    (phase,) = [line for line in result.stdout.splitlines() if line.startswith("Phase:")]
    assert "unknown" not in phase
    assert "no signer runs" in phase
    assert "service-serving-signer/service-serving-signer-managed-ca" in phase


def test_ca_status_with_a_leader_that_has_not_decided_yet_says_so(
    api: FakeApi, tmp_path: Path
) -> None:
    api.put(LEASES, lease(NS, "pod-a", 1))
    api.put(LEASES, lease(f"{NS}-presence", "pod-a", 1, {signer_presence.CA_MODE: "managed"}))
    result = ca_status(api, tmp_path)
    (phase,) = [line for line in result.stdout.splitlines() if line.startswith("Phase:")]
    assert "pod-a" in phase and "not published" in phase


def test_ca_status_after_a_move_back_to_file_mode_ignores_the_former_managed_reports(
    api: FakeApi, tmp_path: Path
) -> None:
    """A Helm move back to file mode deletes the managed CA's Role before its replicas
    stop, so their report Leases stay behind, one with the former leader's decision.
    The running signer is a file-mode one and does not report: `ca status` says file mode
    and names the leftovers to delete, instead of describing a managed CA that no longer
    runs."""
    from managedca.report import DECISION, LOADED_ANCHORS, REPORT_LABEL

    file_mode_signer(api, leader="pod-b")
    decision = {"at": "2026-12-07T00:00:00Z", "phase": "Stable", "cas": [], "replicas": []}
    report = lease(
        "service-serving-signer-managed-ca-replica-1",
        "pod-old",
        5,
        {LOADED_ANCHORS: "a" * 64, DECISION: json.dumps(decision)},
    )
    report["metadata"]["labels"] = {REPORT_LABEL: "service-serving-signer-managed-ca"}
    report["spec"]["leaseDurationSeconds"] = 30
    api.put(LEASES, report)
    result = ca_status(api, tmp_path)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("CA mode: file"), out
    assert "Phase:" not in out
    assert "1 report Lease of managed-CA replicas that do not lead" in out
    assert json.loads(ca_status(api, tmp_path, "-o", "json").stdout)["idleReports"] == 1
    assert f"kubectl -n {NS} delete lease -l {REPORT_LABEL}=service-serving-signer-managed-ca" in (
        out
    )
