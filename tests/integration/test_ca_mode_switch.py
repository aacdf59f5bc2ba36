"""Switching CA modes keeps issuing (docs/managed-ca.md "Moving between file mode and the
managed CA"), with kustomize and with Helm, both ways, while a workload on the hollow
nodes keeps asking for certificates.

The switch commands are the page's own ```sh blocks, read from it and run with bash
(`documented.Shell`: real kubectl and helm, the cluster in `$KUBECONFIG`), so the page
and this test cannot drift. The installs before them are the README's (`kubectl apply -k
config/namespace`, the CA Secret and ConfigMap, `kubectl apply -k config/default`; or
`helm install`). The shipped Deployment runs on the hollow nodes, and each of its Pods'
container runs as `ShippedSigner` on exactly what the kubelet wrote (its ServiceAccount
token, in-cluster, the shipped RBAC), started, restarted and stopped by
`pod_runtime.Runtime` as the kubelet and the container runtime would. One departure:
on hollow nodes a Pod is Ready as soon as it runs, so `kubectl rollout status` returns
before the signers do; after it, the test waits for what it would wait for on a real
node (every signer of the new template running and ready) before the block's next line.

- **File → managed**: the managed CA adopts the file-mode CA as its confirmed current CA
  (`managedca/adopt.py`): the Secret it creates holds that CA, confirmed from the start,
  and every certificate issued during the switch chains to it.
- **Managed → file**: the managed CA's signing CA and the stable bundle's roots into the
  file-mode Secret and ConfigMap (the page's block), then the file-mode install.

A prober creates a Pod every second and records how long each waits for its certificate
(Pod created → its request read back Issued); the test prints the longest wait before
the switches (the baseline), during file → managed and during managed → file. Goals live
in the printed figures, not in assertions. A request not issued in the end fails the test
with the request's status and Events and every signer's log tail.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from controlplane.cluster import Cluster
from kube.client import ApiError, Client, is_not_found
from managedca.layout import CONFIRMED_AT
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.integration.chart_harness import CHART, CONFIG, helm, kustomize
from tests.integration.documented import DOCS, Shell, sh_block_with
from tests.integration.manager_process import eventually
from tests.integration.manifests import apply
from tests.integration.nodes import create_service, serving_pod
from tests.integration.pod_runtime import Runtime
from tests.integration.shipped import (
    NS,
    put_signing_material,
    put_trust_bundle,
    undeploy,
    wait_namespace_gone,
)
from trust.ca import cert_pem, generate_ca, key_pem

pytestmark = pytest.mark.timeout(900)

SIGNER = "kubernetes.io/service-serving"
CTBS = "/apis/certificates.k8s.io/v1/clustertrustbundles"
MANAGED_SECRET = f"/api/v1/namespaces/{NS}/secrets/{DEFAULT_SECRET_NAME}"
RELEASE = "service-serving-signer"  # README: `helm install service-serving-signer …`
PAGE = DOCS / "managed-ca.md"
SECTION = "## Moving between file mode and the managed CA"
ROLLOUT = "rollout status"


def documented(text: str) -> str:
    """The page's switch block holding `text`."""
    return sh_block_with(PAGE, SECTION, text)


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


@dataclass
class Probe:
    name: str
    created: float
    issued: float | None = None
    chain: str = ""


@dataclass
class Prober:
    """A Pod asking for a certificate every `every` seconds; each one's wait. `stop()`
    stops creating Pods; the watch goes on until `close()`, so the Pods created last are
    still seen issued."""

    cluster: Cluster
    client: Client
    namespace: str
    every: float = 1.0
    probes: list[Probe] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _closed: threading.Event = field(default_factory=threading.Event)

    @property
    def requests(self) -> str:
        return f"/apis/certificates.k8s.io/v1/namespaces/{self.namespace}/podcertificaterequests"

    def start(self) -> Prober:
        create_service(self.client, self.namespace, "web", {"app": "web"})
        threading.Thread(target=self._create, daemon=True).start()
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def _create(self) -> None:
        i = 0
        while not self._stop.wait(self.every):
            name, created = f"probe-{i}", time.monotonic()
            serving_pod(
                self.cluster,
                self.client,
                self.namespace,
                name,
                app="web",
                signer_name=SIGNER,
                node_index=i % len(self.cluster.nodes),
            )
            self.probes.append(Probe(name, created))
            i += 1

    def _watch(self) -> None:
        while not self._closed.wait(0.2):
            try:
                items = self.client.get(self.requests)["items"]
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

    def close(self) -> None:
        self._stop.set()
        self._closed.set()

    def longest_wait(self, since: float, until: float) -> tuple[float, int]:
        """The longest wait of the Pods created in [since, until) (a Pod still waiting
        counts up to now), and how many there were."""
        now = time.monotonic()
        waits = [(p.issued or now) - p.created for p in self.probes if since <= p.created < until]
        return max(waits, default=0.0), len(waits)

    def waiting(self) -> list[Probe]:
        return [p for p in self.probes if p.issued is None]

    def describe(self, probe: Probe) -> str:
        """What the cluster says of `probe`'s requests: each one's status and conditions,
        and the Events on the Pod and on its requests."""
        age = time.monotonic() - probe.created
        out = [f"Pod {self.namespace}/{probe.name}, created {age:.0f}s ago"]
        pcrs = [
            pcr
            for pcr in self.client.get(self.requests)["items"]
            if pcr["spec"]["podName"] == probe.name
        ]
        if not pcrs:
            out.append("  no PodCertificateRequest (the kubelet has not asked)")
        for pcr in pcrs:
            meta, status = pcr["metadata"], dict(pcr.get("status") or {})
            status.pop("certificateChain", None)
            out.append(
                f"  PodCertificateRequest {meta['name']} created {meta['creationTimestamp']} "
                f"resourceVersion {meta['resourceVersion']}: {json.dumps(status)}"
            )
        names = {probe.name} | {p["metadata"]["name"] for p in pcrs}
        events = self.client.get(f"/api/v1/namespaces/{self.namespace}/events")["items"]
        for event in events:
            involved = event.get("involvedObject") or {}
            if involved.get("name") in names:
                source = (event.get("source") or {}).get("component")
                out.append(
                    f"  Event {event.get('lastTimestamp') or event.get('eventTime')} "
                    f"{involved.get('kind')}/{involved.get('name')} {event.get('type')} "
                    f"{event.get('reason')} x{event.get('count', 1)} "
                    f"({source or event.get('reportingComponent')}): "
                    f"{event.get('message')}"
                )
        return "\n".join(out)


def rollout_done(client: Client, runtime: Runtime, managed: bool) -> bool:
    """Every Pod of the Deployment runs the template of the wanted mode, a signer runs
    for each, and each answers ready (what a rollout waits for on a real node)."""
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
    signers = dict(runtime.signers)
    if {p["metadata"]["uid"] for p in pods} != set(signers):
        return False
    return all(s.ready() for s in signers.values())


def issuer_of(chain_pem: str) -> str:
    """The subject of the CA that signed the chain's leaf."""
    leaf = x509.load_pem_x509_certificate(chain_pem.encode())
    return leaf.issuer.rfc4514_string()


@dataclass
class Switch:
    """The documented commands, run in `shell`; `settle(managed)` waits for the rollout
    as a real node's readiness would make `kubectl rollout status` wait."""

    shell: Shell
    settle: Callable[[bool], None]

    def run(self, block: str, *, managed: bool) -> str:
        """Run `block`; after its `rollout status` line, settle before the rest. Returns
        what the lines after it printed."""
        lines = block.splitlines(keepends=True)
        cut = next((i + 1 for i, line in enumerate(lines) if ROLLOUT in line), len(lines))
        self.shell.run("".join(lines[:cut]))
        if cut == len(lines):
            return ""
        self.settle(managed)
        return self.shell.run("".join(lines[cut:])).stdout


@pytest.mark.usefixtures("clean")
@pytest.mark.parametrize("how", ["kustomize", "helm"])
def test_switching_ca_modes_keeps_issuing(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path, how: str
) -> None:
    client = cluster_client
    ca = generate_ca("file mode root", validity=timedelta(days=30))
    root = cert_pem(ca.cert)
    shell = Shell(cluster, tmp_path / "workspace")
    runtime = Runtime(cluster, client, tmp_path / "signers")
    prober: Prober | None = None

    def diagnosis() -> str:
        waiting = prober.waiting() if prober else []
        return "\n".join(
            [
                f"{len(waiting)} probe(s) not issued; signer restarts {runtime.restarts}, "
                f"exits {runtime.exits}",
                *(prober.describe(p) for p in waiting[:5] if prober),
                runtime.log_tails(100),
            ]
        )

    def settle(managed: bool) -> None:
        assert eventually(lambda: rollout_done(client, runtime, managed), 180, 0.5), diagnosis()

    switch = Switch(shell, settle)

    # README: the namespace, `kubectl create secret tls …`, `… create configmap …`.
    for obj in kustomize(CONFIG / "namespace"):
        apply(client, obj, dry_run=False)
    put_signing_material(client, key_pem(ca.key), root)
    put_trust_bundle(client, root)
    if how == "kustomize":
        shell.run("kubectl apply -k config/default")
        to_managed = documented("kubectl apply -k config/managed")
        to_file = documented("kubectl apply -k config/default")
    else:
        # --take-ownership: the cluster-scoped RBAC a kustomize install before left.
        done = helm(
            "install", RELEASE, str(CHART), "-n", NS, "--take-ownership",
            "--kubeconfig", str(cluster.plane.kubeconfig),
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        to_managed = documented("managedCA.enabled=true")
        to_file = documented("managedCA.enabled=false")
    file_material = documented("create secret tls")
    runtime.start()
    try:
        assert eventually(lambda: runtime.leader() is not None, 120, 0.5), diagnosis()
        settle(False)
        prober = Prober(cluster, client, node_namespace).start()
        time.sleep(10)  # the baseline: issuance in file mode, nothing switching

        # File → managed, over the running install.
        switched = prober.mark()
        printed = switch.run(to_managed, managed=True)
        if "ca status" in to_managed:  # the page: "current: your file-mode CA, confirmed"
            assert "Phase:   Stable" in printed, printed
        settle(True)
        time.sleep(10)
        managed_at = prober.mark()

        secret = client.get(MANAGED_SECRET)
        current = base64.b64decode(secret["data"]["ca.crt"])
        assert pem_fingerprints(current) == pem_fingerprints(root), "adopted the file CA"
        assert secret["metadata"]["annotations"].get(CONFIRMED_AT), "confirmed at once"

        # Managed → file: the managed CA's signing CA and every root it publishes into
        # the file-mode Secret and ConfigMap, then the file-mode install.
        back = prober.mark()
        switch.run(file_material, managed=True)
        switch.run(to_file, managed=False)
        settle(False)
        # "From now on rotating is yours": `ca status` says file mode, not a managed CA.
        shown = shell.run("service-serving-signer ca status").stdout
        print(f"{how}: ca status after the move back:\n{shown}")
        assert shown.startswith("CA mode: file"), shown
        time.sleep(10)
        prober.stop()
        done_at = prober.mark()
        assert eventually(lambda: not prober.waiting(), 120, 0.5), diagnosis()

        baseline = prober.longest_wait(0.0, switched)
        to_managed_wait = prober.longest_wait(switched, managed_at)
        to_file_wait = prober.longest_wait(back, done_at)
        print(
            f"{how}: longest wait for a certificate (s, over n Pods): "
            f"baseline {baseline[0]:.1f} (n={baseline[1]}), "
            f"file -> managed {to_managed_wait[0]:.1f} (n={to_managed_wait[1]}), "
            f"managed -> file {to_file_wait[0]:.1f} (n={to_file_wait[1]}); "
            f"signer restarts {runtime.restarts}"
        )
        issuers = {issuer_of(p.chain) for p in prober.probes}
        assert issuers == {ca.cert.subject.rfc4514_string()}, "one CA signed throughout"
        assert runtime.clean_exits(), diagnosis()
    finally:
        if prober is not None:
            prober.close()
        runtime.close()
