"""`explain` as the CLI runs it, and the signer's leader Lease as `kube.leaderelection`
writes it, for the explain and status tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner

from cli.main import main
from kube.client import Client
from tests.integration.manifests import create_or_replace

LEASE = "signer"


def write_lease(client: Client, namespace: str, holder: str, renewed_ago: float = 0) -> None:
    """Create or overwrite Lease `namespace/LEASE`; `holder` "" is a released Lease."""
    renew = datetime.now(UTC) - timedelta(seconds=renewed_ago)
    stamp = renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE, "namespace": namespace},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15 if holder else 1,
            "renewTime": stamp,
            "acquireTime": stamp,
        },
    }
    create_or_replace(client, f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body)


def age_presence(client: Client, namespace: str, name: str, seconds: float = 3600) -> None:
    """Move presence Lease `namespace/name`'s renewTime `seconds` back, as though its
    last renewal were that long ago: its expiry, driven by its own timestamps."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    lease = client.get(path)
    renewed = datetime.now(UTC) - timedelta(seconds=seconds)
    lease["spec"]["renewTime"] = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    client.replace(path, lease)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`service-serving-signer ARGV`, in this process; (exit, stdout, stderr)."""
    result = CliRunner().invoke(main, list(argv), prog_name="service-serving-signer")
    return result.exit_code, result.stdout, result.stderr


def run_explain(kubeconfig: Path | str, lease_namespace: str, *args: str) -> tuple[int, str, str]:
    """`service-serving-signer explain ARGS` with the test's Lease; (exit, stdout, stderr)."""
    return run_cli(
        "explain",
        *args,
        f"--kubeconfig={kubeconfig}",
        f"--lease-namespace={lease_namespace}",
        f"--lease-name={LEASE}",
    )
