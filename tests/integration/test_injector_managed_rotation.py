"""The real injector in the managed CA's loop (the contract in
docs/reference.md §11/§12): a `run --ca-mode=managed` signer and a `run
--controllers=injector` process; `ca rotate` swaps only once the injector's convergence
report says every consumer that can be written holds the next CA, and a consumer its
owner froze (an immutable ConfigMap) is reported blocked and holds nothing up."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

from controlplane import ControlPlane
from kube.client import Client
from managedca.material import pem_fingerprints
from tests.integration.injector_harness import (
    VWC_PATH,
    consumer_config_map,
    delete_quietly,
    validating_webhook,
)
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.test_managed_ca import LEASE, Managed
from trust.convergence import REPORT_ANNOTATION as REPORT


def held(client: Client, hook: str) -> set[str]:
    ca_bundle = client.get(f"{VWC_PATH}/{hook}")["webhooks"][0]["clientConfig"].get("caBundle")
    return set(pem_fingerprints(base64.b64decode(ca_bundle))) if ca_bundle else set()


def report(client: Client, namespace: str) -> dict[str, Any]:
    lease = client.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/"
        "service-serving-signer-injector-convergence"
    )
    parsed: dict[str, Any] = json.loads(lease["metadata"]["annotations"][REPORT])
    return parsed


def test_a_managed_rotation_swaps_once_the_real_injector_reports_the_next_ca_held(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    managed = Managed(control_plane, client, namespace, tmp_path)
    selector = json.dumps({"signerName": managed.signer_name, "labelSelector": {}})
    hook = f"managed-{uuid.uuid4().hex[:8]}"
    # The webhook guards ConfigMap creates in a namespace nobody uses: no traffic needed.
    client.create(VWC_PATH, validating_webhook(hook, f"unused-{hook}", "svc", selector))
    client.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        consumer_config_map(
            "frozen", selector, data={"ca.crt": "frozen by its owner"}, immutable=True
        ),
    )
    injector = SignerProcess(
        control_plane.kubeconfig,
        None,
        tmp_path / "injector.log",
        "--controllers=injector",
        f"--leader-elect-resource-namespace={namespace}",
        *LEASE,
        signer_name=None,
    )
    try:
        managed.start("a")
        assert eventually(lambda: managed.phase() == "Stable", 30)
        old = managed.ca()
        assert eventually(lambda: held(client, hook) == {old}, 30), held(client, hook)
        assert managed.ca_cli("rotate").returncode == 0
        assert eventually(lambda: managed.phase() == "Staged", 15)
        new = managed.ca("next")
        seen: list[tuple[str | None, set[str]]] = []

        def swapped() -> bool:
            seen.append((managed.phase(), held(client, hook)))
            return seen[-1][0] == "Retiring"

        assert eventually(swapped, 60), seen[-3:]
        # Never past Staged before the webhook held the next CA.
        assert all(new in fps for phase, fps in seen if phase != "Staged"), seen
        row = report(client, namespace)["anchors"][new]
        assert row["selecting"] == 2 and row["blocked"] == 1, row  # the frozen ConfigMap
        assert row["selecting"] - row["holding"] - row["blocked"] == 0, row
    finally:
        injector.stop()
        managed.stop_all()
        delete_quietly(client, VWC_PATH, hook)
