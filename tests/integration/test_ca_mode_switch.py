"""Switching CA modes keeps issuing (docs/managed-ca.md "Moving between file mode and the
managed CA"), with kustomize and with Helm, both ways, while a workload on the hollow
nodes keeps asking for certificates.

The shipped Deployment runs on the hollow nodes, and each of its Pods' container runs as
`ShippedSigner` on exactly what the kubelet wrote (its ServiceAccount token, in-cluster,
the shipped RBAC); a follower does what the kubelet and the container runtime would:
starts the signer of each Running Pod and sends SIGTERM when its Pod is deleted. The
documented commands run as what they send: `kubectl apply -k` is the rendered tree
(kustomize) applied server-side by one field manager, `kubectl create secret tls … |
kubectl apply -f -` a create-or-replace of the Secret.

- **File → managed**: `config/managed` over the running file-mode install. The managed CA
  adopts the file-mode CA as its confirmed current CA (`managedca/adopt.py`): the Secret
  it creates holds that CA, confirmed from the start, and every certificate issued
  during the switch chains to it.
- **Managed → file**: the managed CA's signing CA and the stable bundle's roots into the
  file-mode Secret and ConfigMap, then `config/default`.

A prober creates a Pod every second and records how long each waits for its certificate
(Pod created → its request read back Issued); the test prints the longest wait before
the switches (the baseline), during file → managed and during managed → file. Goals live
in the printed figures, not in assertions.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import pytest
from cryptography import x509

from controlplane.cluster import Cluster
from kube.client import ApiError, Client, is_not_found
from managedca.layout import CONFIRMED_AT
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.integration.chart_harness import CHART, CONFIG, helm, kustomize
from tests.integration.manager_process import eventually
from tests.integration.manifests import apply
from tests.integration.nodes import create_service, serving_pod
from tests.integration.shipped import (
    NS,
    ShippedPod,
    ShippedSigner,
    deploy_objects,
    put_signing_material,
    put_trust_bundle,
    undeploy,
    wait_namespace_gone,
)
from trust.ca import cert_pem, generate_ca, key_pem

pytestmark = pytest.mark.timeout(900)

SIGNER = "kubernetes.io/service-serving"
CTBS = "/apis/certificates.k8s.io/v1/clustertrustbundles"
STABLE = "kubernetes.io:service-serving:trust-anchors"
MANAGED_SECRET = f"/api/v1/namespaces/{NS}/secrets/{DEFAULT_SECRET_NAME}"
RELEASE = "service-serving-signer"  # README: `helm install service-serving-signer …`


def delete_signer_bundles(client: Client) -> None:
    for bundle in client.get(CTBS, {"fieldSelector": f"spec.signerName={SIGNER}"})["items"]:
        try:
            client.delete(f"{CTBS}/{bundle['metadata']['name']}")
        except ApiError as err:
            if not is_not_found(err):
                raise


@pytest.fixture
def clean(cluster_client: Client) -> Iterator[None]:
    """No installation, no managed CA Secret and no bundle of the signer left by another
    test (a published root would change what a bootstrap does)."""
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)
    delete_signer_bundles(cluster_client)
    yield
    undeploy(cluster_client)
    wait_namespace_gone(cluster_client)
    delete_signer_bundles(cluster_client)


class Follower:
    """The kubelet and the runtime for the Deployment's Pods: a `ShippedSigner` for each
    Running Pod, restarted if it exits on its own, SIGTERM once the Pod is being deleted."""

    def __init__(self, cluster: Cluster, client: Client, logs: Path) -> None:
        self.cluster, self.client, self.logs = cluster, client, logs
        self.signers: dict[str, ShippedSigner] = {}
        self.stopped: list[tuple[str, int]] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Follower:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.sync()
            except Exception as err:  # a read racing a delete: next round
                print(f"follower: {err}")

    def sync(self) -> None:
        pods = self.client.get(
            f"/api/v1/namespaces/{NS}/pods",
            {"labelSelector": "app.kubernetes.io/name=service-serving-signer"},
        )["items"]
        live = {}
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") == "Running":
                live[pod["metadata"]["uid"]] = pod
        for uid in [u for u in self.signers if u not in live]:
            signer = self.signers.pop(uid)
            self.stopped.append((uid, signer.stop()))
        for uid in [u for u in self.signers if not self.signers[u].alive()]:
            # Exited on its own while its Pod runs (this stand-in can start a signer before
            # it has written every volume file): restarted, as the kubelet would.
            self.restarts += 1
            self.signers.pop(uid)
        for uid, pod in live.items():
            if uid not in self.signers:
                name = pod["metadata"]["name"]
                shipped = ShippedPod(pod, self.cluster.node_of(pod))
                self.signers[uid] = ShippedSigner(self.cluster, shipped, self.logs / f"{name}.log")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for signer in self.signers.values():
            signer.stop()

    def log_tails(self) -> str:
        return "\n".join(line for s in self.signers.values() for line in s.log_lines()[-15:])


@dataclass
class Probe:
    name: str
    created: float
    issued: float | None = None
    chain: str = ""


@dataclass
class Prober:
    """A Pod asking for a certificate every `every` seconds; each one's wait."""

    cluster: Cluster
    client: Client
    namespace: str
    every: float = 1.0
    probes: list[Probe] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Prober:
        create_service(self.client, self.namespace, "web", {"app": "web"})
        threading.Thread(target=self._create, daemon=True).start()
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def _create(self) -> None:
        i = 0
        while not self._stop.wait(self.every):
            name = f"probe-{i}"
            serving_pod(
                self.cluster,
                self.client,
                self.namespace,
                name,
                app="web",
                signer_name=SIGNER,
                node_index=i % len(self.cluster.nodes),
            )
            self.probes.append(Probe(name, time.monotonic()))
            i += 1

    def _watch(self) -> None:
        path = f"/apis/certificates.k8s.io/v1/namespaces/{self.namespace}/podcertificaterequests"
        while not self._stop.wait(0.2):
            try:
                items = self.client.get(path)["items"]
            except Exception:
                continue
            now = time.monotonic()
            by_pod = {p.name: p for p in self.probes}
            for pcr in items:
                probe = by_pod.get(pcr["spec"]["podName"])
                chain = (pcr.get("status") or {}).get("certificateChain")
                if probe is not None and chain and probe.issued is None:
                    probe.issued, probe.chain = now, chain

    def mark(self) -> float:
        return time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def longest_wait(self, since: float, until: float) -> tuple[float, int]:
        """The longest wait of the Pods created in [since, until) (a Pod still waiting
        counts up to now), and how many there were."""
        now = time.monotonic()
        waits = [(p.issued or now) - p.created for p in self.probes if since <= p.created < until]
        return max(waits, default=0.0), len(waits)

    def all_issued(self) -> bool:
        return all(p.issued is not None for p in self.probes)


def rollout_done(client: Client, follower: Follower, managed: bool) -> bool:
    """Every Pod of the Deployment runs the template of the wanted mode, and a signer runs
    for each."""
    pods = client.get(
        f"/api/v1/namespaces/{NS}/pods",
        {"labelSelector": "app.kubernetes.io/name=service-serving-signer"},
    )["items"]
    if not pods or any(p["metadata"].get("deletionTimestamp") for p in pods):
        return False
    for pod in pods:
        args = " ".join(pod["spec"]["containers"][0].get("args", []))
        if ("--ca-mode=managed" in args) != managed:
            return False
    return {p["metadata"]["uid"] for p in pods} == set(follower.signers)


def apply_tree(client: Client, objects: list[dict[str, Any]]) -> None:
    """`kubectl apply -k` as one field manager: what the tree no longer holds is removed."""
    for obj in objects:
        if obj["kind"] != "Namespace":
            apply(client, obj, dry_run=False)


def issuer_of(chain_pem: str) -> str:
    """The subject of the CA that signed the chain's leaf."""
    leaf = x509.load_pem_x509_certificate(chain_pem.encode())
    return leaf.issuer.rfc4514_string()


class Install(Protocol):
    """One way of installing: the file-mode install, and the two switches, as documented."""

    def install(self) -> None: ...
    def to_managed(self) -> None: ...
    def to_file(self) -> None: ...


@dataclass
class WithKustomize:
    """README's quick install; docs/managed-ca.md's `kubectl apply -k` lines."""

    cluster: Cluster
    client: Client
    material: Callable[[], None]

    def install(self) -> None:
        tree = kustomize(CONFIG / "namespace") + kustomize(CONFIG / "default")
        deploy_objects(self.cluster, self.client, tree, before=self.material)

    def to_managed(self) -> None:  # kubectl apply -k config/managed
        apply_tree(self.client, kustomize(CONFIG / "managed"))

    def to_file(self) -> None:  # kubectl apply -k config/default
        apply_tree(self.client, kustomize(CONFIG / "default"))


@dataclass
class WithHelm:
    """README's Helm install; docs/managed-ca.md's `helm upgrade … --set
    managedCA.enabled=…` lines."""

    cluster: Cluster
    client: Client
    material: Callable[[], None]

    def helm(self, *args: str) -> None:
        done = helm(*args, "--kubeconfig", str(self.cluster.plane.kubeconfig))
        assert done.returncode == 0, done.stdout + done.stderr

    def install(self) -> None:
        for obj in kustomize(CONFIG / "namespace"):
            apply(self.client, obj, dry_run=False)
        self.material()
        # --take-ownership: the cluster-scoped RBAC a kustomize install before left.
        self.helm("install", RELEASE, str(CHART), "-n", NS, "--take-ownership")

    def upgrade(self, managed: bool) -> None:
        self.helm(
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            NS,
            "--reset-then-reuse-values",
            "--set",
            f"managedCA.enabled={str(managed).lower()}",
        )

    def to_managed(self) -> None:
        self.upgrade(managed=True)

    def to_file(self) -> None:
        self.upgrade(managed=False)


@pytest.mark.usefixtures("clean")
@pytest.mark.parametrize("how", ["kustomize", "helm"])
def test_switching_ca_modes_keeps_issuing(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path, how: str
) -> None:
    client = cluster_client
    ca = generate_ca("file mode root", validity=timedelta(days=30))
    root = cert_pem(ca.cert)

    def material() -> None:  # README: `kubectl create secret tls …`, `… create configmap …`
        put_signing_material(client, key_pem(ca.key), root)
        put_trust_bundle(client, root)

    installer: Install = (WithKustomize if how == "kustomize" else WithHelm)(
        cluster, client, material
    )
    installer.install()
    follower = Follower(cluster, client, tmp_path).start()
    prober: Prober | None = None
    try:
        assert eventually(lambda: any(s.leading() for s in follower.signers.values()), 120), (
            follower.log_tails()
        )
        assert eventually(lambda: rollout_done(client, follower, managed=False), 60)
        prober = Prober(cluster, client, node_namespace).start()
        time.sleep(10)  # the baseline: issuance in file mode, nothing switching

        # File → managed, over the running install.
        switched = prober.mark()
        installer.to_managed()
        assert eventually(lambda: rollout_done(client, follower, managed=True), 180), (
            follower.log_tails()
        )
        time.sleep(10)
        managed_at = prober.mark()

        secret = client.get(MANAGED_SECRET)
        current = base64.b64decode(secret["data"]["ca.crt"])
        assert pem_fingerprints(current) == pem_fingerprints(root), "adopted the file CA"
        assert secret["metadata"]["annotations"].get(CONFIRMED_AT), "confirmed at once"

        # Managed → file: the managed CA's signing CA and every root it publishes into
        # the file-mode Secret and ConfigMap, then the file-mode install.
        key = base64.b64decode(secret["data"]["ca.key"])
        bundle = client.get(f"{CTBS}/{STABLE}")["spec"]["trustBundle"].encode()
        put_signing_material(client, key, current)
        put_trust_bundle(client, bundle)
        back = prober.mark()
        installer.to_file()
        assert eventually(lambda: rollout_done(client, follower, managed=False), 180), (
            follower.log_tails()
        )
        time.sleep(10)
        prober.stop()
        done = prober.mark()
        assert eventually(prober.all_issued, 120), [
            p.name for p in prober.probes if p.issued is None
        ]

        baseline = prober.longest_wait(0.0, switched)
        to_managed = prober.longest_wait(switched, managed_at)
        to_file = prober.longest_wait(back, done)
        print(
            f"{how}: longest wait for a certificate (s, over n Pods): "
            f"baseline {baseline[0]:.1f} (n={baseline[1]}), "
            f"file -> managed {to_managed[0]:.1f} (n={to_managed[1]}), "
            f"managed -> file {to_file[0]:.1f} (n={to_file[1]})"
        )
        issuers = {issuer_of(p.chain) for p in prober.probes}
        assert issuers == {ca.cert.subject.rfc4514_string()}, "one CA signed throughout"
        assert all(code == 0 for _, code in follower.stopped), follower.stopped
    finally:
        if prober is not None:
            prober.stop()
        follower.close()
