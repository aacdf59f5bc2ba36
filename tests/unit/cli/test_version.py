"""`version` names the version of the signer that runs, from its presence Lease (which
every signer process renews with its version, however it was installed), beside the
image each Deployment names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cli.main import main
from kube.times import micro_time
from tests.unit.cli.helpers import kubeconfig
from tests.unit.fakeapi import FakeApi

NS = "service-serving-signer"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
IMAGE = "registry.example.com/platform/service-serving-signer@sha256:" + "ab" * 32


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    yield fake
    fake.stop()


def presence(renewed_ago: float, version: str = "0.7.1") -> dict[str, object]:
    return {
        "metadata": {
            "name": "service-serving-signer-presence",
            "annotations": {"service-serving-signer/version": version},
        },
        "spec": {
            "holderIdentity": "service-serving-signer-77b5445746-d88sr",
            "leaseDurationSeconds": 40,
            "renewTime": micro_time(datetime.now(UTC) - timedelta(seconds=renewed_ago)),
        },
    }


def kustomize_deployment() -> dict[str, object]:
    """As config/default deploys it: the image by digest, no version label."""
    return {
        "metadata": {"name": NS, "labels": {"app.kubernetes.io/name": NS}},
        "spec": {"template": {"spec": {"containers": [{"name": "signer", "image": IMAGE}]}}},
    }


def version(api: FakeApi, tmp_path: Path, *args: str) -> Result:
    config = kubeconfig(tmp_path / "kc", api.url)
    return CliRunner().invoke(main, ["version", f"--kubeconfig={config}", *args])


def test_version_names_the_running_signers_version_after_a_kustomize_install(
    api: FakeApi, tmp_path: Path
) -> None:
    """A Deployment without a version label, pinned by digest: the version comes from
    the presence Lease, before the image (not lost in the digest)."""
    api.put(LEASES, presence(renewed_ago=3))
    api.put(DEPLOYMENTS, kustomize_deployment())
    result = version(api, tmp_path)
    assert result.exit_code == 0, result.stderr
    deployed = [line for line in result.stdout.splitlines() if line.startswith("deployed:")]
    assert deployed[0].startswith("deployed: service-serving-signer 0.7.1 runs (presence Lease ")
    assert f"deployed: {NS}/{NS}: {IMAGE}" in deployed
    body = json.loads(version(api, tmp_path, "-o", "json").stdout)
    assert body["running"]["version"] == "0.7.1"
    assert body["running"]["state"] == "alive"


def test_version_says_no_signer_runs_when_its_presence_is_stale_or_missing(
    api: FakeApi, tmp_path: Path
) -> None:
    api.put(LEASES, presence(renewed_ago=600))
    stale = version(api, tmp_path).stdout
    assert "deployed: no signer runs now (presence Lease " in stale
    assert "by service-serving-signer 0.7.1" in stale
    api.remove(LEASES, "service-serving-signer-presence")
    missing = version(api, tmp_path).stdout
    assert "deployed: no signer runs (presence Lease " in missing
    assert "does not exist" in missing


def test_version_without_a_cluster_still_exits_0(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["version", f"--kubeconfig={tmp_path}/none"])
    assert result.exit_code == 0
    assert "deployed: unknown (" in result.stdout
