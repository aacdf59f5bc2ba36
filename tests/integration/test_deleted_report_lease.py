"""A deleted injector convergence report Lease holds the swap, named, in every install
where the injector is its own Deployment (config/injector beside config/default or
config/managed, the chart with `injector.enabled`) — then the swap proceeds after the
documented recovery: the shipped Lease applied again (`kubectl apply -k
config/injector`, `helm upgrade`) and what held the rotation mended.

The installs are test_gate_topologies.py's, as rendered, each process as its own
ServiceAccount with the shipped RBAC and Leases; a frozen webhook holds the rotation
while the report Lease is deleted."""

from __future__ import annotations

import contextlib
import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from kube.client import ApiError, Client
from managedca.material import DEFAULT_SECRET_NAME
from tests.integration.injector_harness import VWC_PATH, delete_quietly, validating_webhook
from tests.integration.managed_ca_harness import ca_cli, phase
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.test_gate_topologies import (
    REPLACED,
    TOPOLOGIES,
    container_args,
    deployments,
    flag,
    freeze,
    frozen,
    grant,
    held,
    kubeconfig_of,
    shipped_leases,
    thaw,
)
from trust.convergence import REPORT_NAME

SEPARATE_INJECTOR = ["injector-apart", "managed-with-injector", "helm-other-release"]


@pytest.mark.parametrize("topology", SEPARATE_INJECTOR)
def test_a_deleted_report_lease_holds_the_swap_until_it_is_applied_again(
    topology: str, control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    objects = TOPOLOGIES[topology](tmp_path)
    signer_name = f"t{uuid.uuid4().hex[:10]}.example.com/managed"
    own = [
        f"--leader-elect-resource-namespace={namespace}",
        f"--signer-name={signer_name}",
        "--managed-ca-propagation-delay=2s",
        "--managed-ca-allow-short-propagation-delay",
    ]
    shipped_leases(client, objects, namespace)
    granted = grant(client, objects, namespace, signer_name)
    processes: list[SignerProcess] = []
    lease = "service-serving-signer"
    for deployment in deployments(objects):
        args = [a for a in container_args(deployment) if a.split("=", 1)[0] not in REPLACED]
        if flag(args, "--ca-mode") == "managed":
            lease = flag(args, "--leader-elect-resource-name") or lease
            extra = own
        else:
            extra = own[:1]
        processes.append(
            SignerProcess(
                kubeconfig_of(control_plane, client, deployment, namespace, tmp_path),
                None,
                tmp_path / f"{deployment['metadata']['name']}.log",
                *args,
                *extra,
                signer_name=None,
            )
        )
    secret_path = f"/api/v1/namespaces/{namespace}/secrets/{DEFAULT_SECRET_NAME}"
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    [report] = [o for o in objects if o["kind"] == "Lease" and o["metadata"]["name"] == REPORT_NAME]

    def status() -> dict[str, Any]:
        out = ca_cli(
            control_plane.kubeconfig,
            "status",
            "-o",
            "json",
            f"--lease-name={lease}",
            f"--signer-namespace={namespace}",
            f"--signer-name={signer_name}",
        )
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    hook = f"gate-{uuid.uuid4().hex[:8]}"
    selector = json.dumps({"signerName": signer_name, "labelSelector": {}})
    client.create(VWC_PATH, validating_webhook(hook, f"unused-{hook}", "svc", selector))
    policy = ""
    try:
        assert eventually(lambda: phase(client, secret_path) == "Stable", 90)
        assert eventually(lambda: len(held(client, hook)) == 1, 60), "the webhook is injected"
        [old] = held(client, hook)
        policy = freeze(client, hook)
        assert eventually(lambda: frozen(client, hook), 30), "the policy is in force"
        rotate = ca_cli(
            control_plane.kubeconfig,
            "rotate",
            f"--signer-namespace={namespace}",
            f"--signer-name={signer_name}",
        )
        assert rotate.returncode == 0, rotate.stderr
        assert eventually(lambda: status().get("reason") == "injector-not-converged", 90)
        # The operator's mistake: the report Lease is deleted (the injector has no create).
        client.delete(f"{leases}/{REPORT_NAME}")
        assert eventually(lambda: status().get("reason") == "injector-report-missing", 30)
        last = status()
        assert "kubectl apply -k config/injector" in str(last.get("waitingFor")), last
        time.sleep(5)
        assert phase(client, secret_path) == "Staged", "swapped without the injector's word"
        assert held(client, hook) == {old}, "the frozen webhook holds only the old root"
        # The documented recovery: the shipped Lease applied again; then the webhook is
        # mended, and the rotation proceeds.
        body = copy.deepcopy(report)
        body["metadata"] = {"name": REPORT_NAME, "namespace": namespace}
        client.create(leases, body)
        thaw(client, policy)
        policy = ""
        swapped = eventually(lambda: phase(client, secret_path) == "Retiring", 240)
        assert swapped, (status().get("reason"), status().get("waitingFor"))
    finally:
        if policy:
            thaw(client, policy)
        for proc in processes:
            proc.stop()
        delete_quietly(client, VWC_PATH, hook)
        for path in granted:
            with contextlib.suppress(ApiError):
                client.delete(path)
