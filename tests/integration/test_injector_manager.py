"""The injector through the real CLI next to the signer and publisher: `*` does not run
it (kube-controller-manager's opt-in style), `*,injector` does, in one process; an
injector-only process elects on a Lease of its own."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from controlplane import ControlPlane
from kube.client import Client
from signer.presence import presence_name
from tests.integration.injector_harness import (
    VWC_PATH,
    b64,
    ca_bundles,
    delete_quietly,
    validating_webhook,
)
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.publisher_harness import bundles_of, delete_ctb
from trust.bundle import normalize_bundle
from trust.ca import write_ca


def test_star_leaves_the_injector_off_and_star_injector_turns_it_on(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    signer_name = f"t{uuid.uuid4().hex[:8]}.example.com/serving"
    files = write_ca(tmp_path / "ca")
    name = f"both-{uuid.uuid4().hex[:8]}"
    selector = json.dumps({"signerName": signer_name, "labelSelector": {}})
    client.create(VWC_PATH, validating_webhook(name, namespace, "absent", selector))
    try:
        default = SignerProcess(
            control_plane.kubeconfig,
            files.key.parent,
            tmp_path / "default.log",
            "--leader-elect=false",
            signer_name=signer_name,
        )
        try:
            assert eventually(default.ready, 60), "\n".join(default.log_lines()[-20:])
            code, metrics = default.get("/metrics")
            assert code == 200 and 'controller_sync_total{controller="publisher"' in metrics
            assert "cabundle_injector_sync_total" not in metrics
        finally:
            assert default.stop() == 0
        assert ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [""]

        both = SignerProcess(
            control_plane.kubeconfig,
            files.key.parent,
            tmp_path / "both.log",
            "--leader-elect=false",
            "--controllers=*,injector",
            signer_name=signer_name,
        )
        try:
            assert eventually(both.ready, 60), "\n".join(both.log_lines()[-20:])
            # The publisher publishes the file's root; the injector puts it in the webhook.
            expected = b64(normalize_bundle(files.trust_bundle.read_bytes()))
            assert eventually(
                lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) == [expected], 30
            ), "\n".join(both.log_lines()[-20:])
        finally:
            assert both.stop() == 0
    finally:
        delete_quietly(client, VWC_PATH, name)
        for bundle in bundles_of(client, signer_name):
            delete_ctb(client, bundle["metadata"]["name"])


def test_an_injector_deployment_leads_beside_the_signer_without_naming_a_lease(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    """`run --controllers=injector` next to the signer, neither naming a Lease,
    used to wait for ever on the signer's Lease (ready, never leading, nothing injected).
    Each set now has its own default Lease, so both lead at once."""
    files = write_ca(tmp_path / "ca")
    here = f"--leader-elect-resource-namespace={namespace}"
    signer = SignerProcess(
        control_plane.kubeconfig,
        files.key.parent,
        tmp_path / "signer.log",
        here,
        signer_name=f"t{uuid.uuid4().hex[:8]}.example.com/serving",
    )
    injector = SignerProcess(  # no material flag: the injector needs none
        control_plane.kubeconfig,
        None,
        tmp_path / "injector.log",
        "--controllers=injector",
        here,
        signer_name=None,
    )
    try:
        assert eventually(signer.leading, 60), "\n".join(signer.log_lines()[-20:])
        lease = 'name="service-serving-signer-injector"'
        assert eventually(
            lambda: injector.metric("leader_election_master_status", lease) == 1, 60
        ), "\n".join(injector.log_lines()[-20:])
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

        def names() -> set[str]:
            return {item["metadata"]["name"] for item in client.get(path)["items"]}

        # Two leader Leases, the signer's presence Lease, and the injector leader's
        # convergence report where the managed CA reads it (trust.convergence.report_lease).
        assert eventually(
            lambda: (
                names()
                == {
                    "service-serving-signer",
                    presence_name("service-serving-signer"),
                    "service-serving-signer-injector",
                    "service-serving-signer-injector-convergence",
                }
            ),
            30,
        ), names()
        report = client.get(f"{path}/service-serving-signer-injector-convergence")
        holder = client.get(f"{path}/service-serving-signer-injector")["spec"]["holderIdentity"]
        assert report["spec"]["holderIdentity"] == holder
    finally:
        assert injector.stop() == 0
        assert signer.stop() == 0
