"""docs/install.md's "Uninstall with Helm", run as written against the Helm install with a
leader running, lets the leader release its leader-election Lease: the Deployments go
first, their Pods stop while the chart's RBAC is still there, and only then `helm
uninstall` deletes the Roles. A reinstall then finds the Lease free and takes the lead at
once instead of waiting for the departed leader's Lease to expire.

The chart's Deployment runs on the hollow nodes; `pod_runtime.Runtime` stands in for the
kubelet and the container runtime: a `ShippedSigner` for each Running Pod (its
kubelet-written ServiceAccount token, so the signer holds exactly the chart's RBAC) and,
when the Pod is being deleted, SIGTERM, the Pod object going only once the process has
exited, as a kubelet does for a container. The documented block runs
with bash, with the real kubectl and helm on PATH.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.cluster import Cluster
from kube.client import Client
from tests.integration.chart_harness import CHART, CONFIG, RELEASE, helm, kustomize
from tests.integration.documented import DOCS, Shell, sh_block_with
from tests.integration.manager_process import eventually
from tests.integration.manifests import apply
from tests.integration.pod_runtime import Runtime
from tests.integration.shipped import (
    NS,
    put_signing_material,
    put_trust_bundle,
    undeploy,
    wait_namespace_gone,
)
from trust.ca import cert_pem, generate_ca, key_pem

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/service-serving-signer"
INSTALL = DOCS / "install.md"


@pytest.fixture
def clean(cluster_client: Client) -> Iterator[None]:
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)
    yield
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)


@pytest.mark.usefixtures("clean")
def test_the_documented_helm_uninstall_lets_the_leader_release_its_lease(
    cluster: Cluster, cluster_client: Client, tmp_path: Path
) -> None:
    """The page's Helm uninstall block, run over a Helm install whose leader holds the
    Lease, leaves the Lease released (no holder): the leader stopped while its RBAC was
    still there, and every signer exited cleanly; a reinstall's signer then takes it."""
    client = cluster_client
    for obj in kustomize(CONFIG / "namespace"):
        apply(client, obj, dry_run=False)
    ca = generate_ca("helm uninstall root")
    put_signing_material(client, key_pem(ca.key), cert_pem(ca.cert))
    put_trust_bundle(client, cert_pem(ca.cert))
    kubeconfig = str(cluster.plane.kubeconfig)
    # --take-ownership: the cluster-scoped RBAC a kustomize install of another test left.
    installed = helm(
        "install", RELEASE, str(CHART), "-n", NS, "--take-ownership", "--kubeconfig", kubeconfig
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    runtime = Runtime(cluster, client, tmp_path / "signers").start()
    try:
        assert eventually(lambda: runtime.leader() is not None, 120), runtime.log_tails()
        holder = client.get(LEASE)["spec"].get("holderIdentity")
        assert holder, "a leader holds the Lease"

        Shell(cluster, tmp_path / "workspace").run(
            sh_block_with(INSTALL, "### Uninstall with Helm", "helm uninstall")
        )

        assert not runtime.signers, "every signer's Pod is gone"
        assert runtime.exits and runtime.clean_exits(), f"{runtime.exits}\n{runtime.log_tails()}"
        lease = client.get(LEASE)
        assert not lease["spec"].get("holderIdentity"), (
            f"the uninstalled leader {holder} did not release its Lease: a reinstall waits "
            f"for it to expire\n{runtime.log_tails()}"
        )

        # Reinstalled: a new signer takes the released Lease.
        again = helm("install", RELEASE, str(CHART), "-n", NS, "--kubeconfig", kubeconfig)
        assert again.returncode == 0, again.stdout + again.stderr
        assert eventually(lambda: runtime.leader() is not None, 120), runtime.log_tails()
        assert client.get(LEASE)["spec"].get("holderIdentity") not in (None, "", holder)
    finally:
        runtime.close()
