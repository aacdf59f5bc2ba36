"""A deleted injector convergence report Lease holds the swap, named, in every install
where the injector is its own Deployment (config/injector beside config/default or
config/managed, the chart with `injector.enabled`) — then the swap proceeds after the
documented recovery: the shipped Lease applied again (`kubectl apply -k
config/injector`, `helm upgrade`) and what held the rotation mended.

The installs are test_gate_topologies.py's, as rendered, each process as its own
ServiceAccount with the shipped RBAC and Leases; a frozen webhook holds the rotation
while the report Lease is deleted."""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path

import pytest

from controlplane import ControlPlane
from kube.client import Client
from tests.integration.injector_harness import VWC_PATH, delete_quietly, validating_webhook
from tests.integration.managed_ca_harness import phase
from tests.integration.manager_process import eventually
from tests.integration.test_gate_topologies import Running, freeze, frozen, held, thaw
from trust.convergence import REPORT_NAME

SEPARATE_INJECTOR = ["injector-apart", "managed-with-injector", "helm-other-release"]


@pytest.mark.parametrize("topology", SEPARATE_INJECTOR)
def test_a_deleted_report_lease_holds_the_swap_until_it_is_applied_again(
    topology: str, control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    with Running(topology, control_plane, client, namespace, tmp_path) as install:
        secret_path, status = install.secret_path, install.status
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        [report] = [
            o
            for o in install.objects
            if o["kind"] == "Lease" and o["metadata"]["name"] == REPORT_NAME
        ]
        hook = f"gate-{uuid.uuid4().hex[:8]}"
        selector = json.dumps({"signerName": install.signer_name, "labelSelector": {}})
        client.create(VWC_PATH, validating_webhook(hook, f"unused-{hook}", "svc", selector))
        policy = ""
        try:
            assert eventually(lambda: phase(client, secret_path) == "Stable", 90)
            assert eventually(lambda: len(held(client, hook)) == 1, 60), "the webhook is injected"
            [old] = held(client, hook)
            policy = freeze(client, hook)
            assert eventually(lambda: frozen(client, hook), 30), "the policy is in force"
            rotate = install.ca("rotate")
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
            delete_quietly(client, VWC_PATH, hook)
