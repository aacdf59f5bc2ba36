"""A tenant's opted-in ConfigMap that the API refuses with 403 — a ValidatingAdmissionPolicy
of the platform denying its UPDATEs with `reason: Forbidden`, as Gatekeeper's or
controller-runtime's `admission.Denied` does — does not hold the cluster's rotation: the
injector blocks and excuses it after its bounded retries, and the swap goes on. The
injector is restarted right after the rotation is asked (the runbook's remedy for a stuck
injector): while it has not synced every object since, the wait names the tenant's
ConfigMap, not nothing.

The install is test_gate_topologies.py's "injector apart" (config/default with the
managed-ca and injector components, as rendered), each process as its own
ServiceAccount with the shipped RBAC and Leases."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path
from typing import Any

from controlplane import ControlPlane
from controlplane.process import SignerProcess
from kube.client import ApiError, Client
from managedca.material import pem_fingerprints
from tests.integration.managed_ca_harness import phase
from tests.integration.manager_process import eventually
from tests.integration.test_gate_topologies import (
    BINDING_PATH,
    POLICY_PATH,
    Running,
    flag,
    thaw,
)
from trust.consumers import CA_KEY

# What SignerProcess adds to a process's arguments itself (a restart adds them again).
OWN = ("--kubeconfig", "--metrics-bind-address", "--health-probe-bind-address", "--log-format")


def forbid(client: Client, tenant: str, name: str) -> str:
    """A ValidatingAdmissionPolicy refusing every UPDATE of the tenant's ConfigMap
    `name` with reason Forbidden (the API answers 403)."""
    policy = f"forbid-{tenant}"
    client.create(
        POLICY_PATH,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["*"],
                            "operations": ["UPDATE"],
                            "resources": ["configmaps"],
                            "resourceNames": [name],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tenant}},
                },
                "validations": [
                    {
                        "expression": "false",
                        "message": "frozen by the tenant policy",
                        "reason": "Forbidden",
                    }
                ],
            },
        },
    )
    client.create(
        BINDING_PATH,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {"policyName": policy, "validationActions": ["Deny"]},
        },
    )
    return policy


def refused_with(client: Client, path: str) -> int | None:
    """The status the API answers a (dry-run) UPDATE of `path` with; None: admitted."""
    body = client.get(path)
    body["metadata"].setdefault("labels", {})["probe"] = uuid.uuid4().hex[:6]
    try:
        client.replace(path, body, params={"dryRun": "All"})
    except ApiError as err:
        return err.status
    return None


def restarted(process: SignerProcess) -> SignerProcess:
    """`process` stopped and started again with the same arguments (a rescheduled Pod)."""
    args = process.args[4:]  # after `python -m cli run`
    kubeconfig = flag(args, "--kubeconfig")
    assert kubeconfig is not None
    process.stop()
    rest = [a for a in args if a.split("=", 1)[0] not in OWN]
    return SignerProcess(kubeconfig, None, process.log_path, *rest, signer_name=None)


def test_a_tenant_config_map_refused_with_403_does_not_hold_the_swap(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    with Running("injector-apart", control_plane, client, namespace, tmp_path) as install:
        tenant = f"tenant-{uuid.uuid4().hex[:8]}"
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant}},
        )
        path = f"/api/v1/namespaces/{tenant}/configmaps/web-ca"
        selector = json.dumps({"signerName": install.signer_name, "labelSelector": {}})
        client.create(
            f"/api/v1/namespaces/{tenant}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "web-ca",
                    "labels": {"service-serving-signer/inject-ca-bundle": "true"},
                    "annotations": {"service-serving-signer/ca-bundle-from": selector},
                },
                "data": {"app.conf": "x"},
            },
        )

        def held() -> set[str]:
            text = (client.get(path).get("data") or {}).get(CA_KEY)
            return set(pem_fingerprints(text.encode())) if text else set()

        policy = ""
        try:
            assert eventually(lambda: phase(client, install.secret_path) == "Stable", 90)
            assert eventually(lambda: len(held()) == 1, 60), "the ConfigMap is injected"
            policy = forbid(client, tenant, "web-ca")
            assert eventually(lambda: refused_with(client, path) == 403, 30), "403 in force"
            rotate = install.ca("rotate")
            assert rotate.returncode == 0, rotate.stderr
            [at] = [
                i for i, p in enumerate(install.processes) if flag(p.args, "--ca-mode") != "managed"
            ]
            install.processes[at] = restarted(install.processes[at])
            seen: list[dict[str, Any]] = []

            def swapped() -> bool:
                seen.append(install.status())
                return phase(client, install.secret_path) == "Retiring"

            assert eventually(swapped, 120), seen[-3:]
            # While the restarted injector has not synced every object since it started
            # leading, the wait names what it has not (here: the tenant's ConfigMap).
            unsynced = [str(s.get("waitingFor")) for s in seen if "not synced" in str(s)]
            assert all("web-ca" in why for why in unsynced), unsynced[:2]
            assert len(held()) == 1, "the refused ConfigMap kept only the old root"
        finally:
            if policy:
                thaw(client, policy)
            for proc in install.processes:
                proc.stop()
            with contextlib.suppress(ApiError):
                client.delete(f"/api/v1/namespaces/{tenant}")
