"""docs/install.md's "Uninstall with Helm", run as written against the Helm install with a
leader running, lets the leader release its leader-election Lease: the Deployments go
first, their Pods stop while the chart's RBAC is still there, and only then `helm
uninstall` deletes the Roles. A reinstall then finds the Lease free and takes the lead at
once instead of waiting for the departed leader's Lease to expire.

The chart's Deployment runs on the hollow nodes; a runtime stand-in starts a
`ShippedSigner` for each Running Pod (its kubelet-written ServiceAccount token, so the
signer holds exactly the chart's RBAC) and, when the Pod is being deleted, sends it
SIGTERM and lets the Pod object go only once the process has exited, as a kubelet does
for a container (it holds a finalizer on the Pod until then). The documented block runs
with bash, with the real kubectl and helm on PATH.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.binaries import tool
from controlplane.cluster import Cluster
from kube.client import ApiError, Client, is_not_found
from kube.types import JSON
from tests.integration.chart_harness import CHART, CONFIG, RELEASE, helm, kustomize
from tests.integration.manager_process import eventually
from tests.integration.manifests import apply
from tests.integration.shipped import (
    NS,
    ShippedPod,
    ShippedSigner,
    put_signing_material,
    put_trust_bundle,
    undeploy,
    wait_namespace_gone,
)
from trust.ca import cert_pem, generate_ca, key_pem

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/service-serving-signer"
PODS = f"/api/v1/namespaces/{NS}/pods"
HELD = "test.service-serving-signer/container-running"
INSTALL = Path(__file__).resolve().parents[2] / "docs" / "install.md"


def documented_block(heading: str) -> str:
    """The one sh block under `heading` of docs/install.md (up to the next heading)."""
    text = INSTALL.read_text()
    start = text.index(f"\n{heading}\n")
    end = text.find("\n#", start + 1)
    (block,) = re.findall(r"```sh\n(.*?)```", text[start : end if end > 0 else None], re.S)
    return str(block)


class Runtime:
    """The kubelet and container runtime for the signer's Pods: a `ShippedSigner` per
    Running Pod, held by a finalizer; once the Pod is being deleted, SIGTERM, and the
    finalizer removed after the process exits (the Pod object outlives its container)."""

    def __init__(self, cluster: Cluster, client: Client, logs: Path) -> None:
        self.cluster, self.client, self.logs = cluster, client, logs
        self.signers: dict[str, ShippedSigner] = {}
        self.exits: list[int] = []  # of the signers stopped with their Pod
        self.restarts = 0  # a signer that exited on its own while its Pod ran
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Runtime:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.sync()
            except Exception as err:  # a read racing a delete: next round
                print(f"runtime: {err}")

    def sync(self) -> None:
        pods = self.client.get(
            PODS, {"labelSelector": "app.kubernetes.io/name=service-serving-signer"}
        )
        by_uid = {p["metadata"]["uid"]: p for p in pods["items"]}
        for uid in list(self.signers):
            pod = by_uid.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                self.exits.append(self.signers.pop(uid).stop())
                if pod is not None:
                    self.release(pod)
            elif not self.signers[uid].alive():  # restarted, as the kubelet would
                self.restarts += 1
                self.signers.pop(uid)
        for uid, pod in by_uid.items():
            if uid in self.signers or pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            name = pod["metadata"]["name"]
            if HELD not in (pod["metadata"].get("finalizers") or []):
                self.client.patch(f"{PODS}/{name}", {"metadata": {"finalizers": [HELD]}})
            shipped = ShippedPod(pod, self.cluster.node_of(pod))
            self.signers[uid] = ShippedSigner(self.cluster, shipped, self.logs / f"{name}.log")

    def release(self, pod: JSON) -> None:
        name = pod["metadata"]["name"]
        try:
            self.client.patch(f"{PODS}/{name}", {"metadata": {"finalizers": None}})
        except ApiError as err:
            if not is_not_found(err):
                raise

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for signer in self.signers.values():
            signer.stop()
        for pod in self.client.get(PODS)["items"]:
            if HELD in (pod["metadata"].get("finalizers") or []):
                self.release(pod)

    def leader(self) -> ShippedSigner | None:
        return next((s for s in self.signers.values() if s.leading()), None)

    def log_tails(self) -> str:
        return "\n".join(
            line
            for p in sorted(self.logs.glob("*.log"))
            for line in p.read_text().splitlines()[-15:]
        )


@pytest.fixture
def clean(cluster_client: Client) -> Iterator[None]:
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)
    yield
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)


def run_documented(cluster: Cluster, script: str) -> subprocess.CompletedProcess[str]:
    tools = os.pathsep.join(str(tool(name).parent) for name in ("kubectl", "helm"))
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.plane.kubeconfig),
        "HELM_CACHE_HOME": "/tmp/helm-cache",
    }
    return subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


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

    runtime = Runtime(cluster, client, tmp_path).start()
    try:
        assert eventually(lambda: runtime.leader() is not None, 120), runtime.log_tails()
        holder = client.get(LEASE)["spec"].get("holderIdentity")
        assert holder, "a leader holds the Lease"

        block = documented_block("### Uninstall with Helm")
        assert "helm uninstall" in block
        done = run_documented(cluster, block)
        assert done.returncode == 0, done.stdout + done.stderr

        assert not runtime.signers, "every signer's Pod is gone"
        assert runtime.exits and all(code == 0 for code in runtime.exits), (
            f"{runtime.exits}\n{runtime.log_tails()}"
        )
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
