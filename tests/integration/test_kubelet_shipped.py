"""The shipped Deployment on hollow nodes: `config/default`
applied, its Pod bound to a hollow node, and the signer run on exactly what the kubelet
wrote for that Pod — its Secret and ConfigMap volumes for the signing material, its
ServiceAccount volume for its identity (in-cluster, through the official client's
loader, with only `config/rbac` granted; or through a kubeconfig with `tokenFile`).

The rotation runbook of the README is walked through those real volumes while new
workload Pods keep being created, each one a new request from the kubelet."""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from controlplane.cluster import Cluster
from controlplane.workload import VolumeFiles, phase, volume_files
from kube.client import Client
from tests.integration.manager_process import eventually
from tests.integration.nodes import (
    bundles,
    chain_of,
    create_pod,
    create_service,
    dns_sans,
    running_files,
    service_sans,
    verify_against_bundle,
)
from tests.integration.shipped import (
    NS,
    SA_MOUNT,
    ShippedPod,
    ShippedSigner,
    put_signing_material,
    put_trust_bundle,
    shipped_fixture,
    token_file_kubeconfig,
)
from trust.ca import CertificateAuthority, cert_pem, generate_ca, key_pem

SIGNER = "kubernetes.io/service-serving"
KEY_MOUNT = "/var/run/secrets/service-serving-signer/ca"
BUNDLE_MOUNT = "/var/run/service-serving-signer/trust-bundle"


@pytest.fixture(scope="module")
def old_ca() -> CertificateAuthority:
    return generate_ca("rotation test root 1")


shipped = shipped_fixture("old_ca")


def roots_in(pem: bytes) -> set[str]:
    return {c.subject.rfc4514_string() for c in x509.load_pem_x509_certificates(pem)}


def jwt_claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return claims


def start_signer(cluster: Cluster, pod: ShippedPod, log: Path, *args: str) -> ShippedSigner:
    signer = ShippedSigner(cluster, pod, log, *args)
    if not eventually(signer.leading, 90):
        signer.stop()
        raise AssertionError("\n".join(signer.log_lines()[-30:]))
    return signer


def test_kubelet_wrote_the_shipped_pods_volumes(
    cluster: Cluster, shipped: list[ShippedPod], old_ca: CertificateAuthority
) -> None:
    pod = shipped[0]
    mounts = pod.mounts()
    assert set(mounts) >= {KEY_MOUNT, BUNDLE_MOUNT, SA_MOUNT, "/tmp"}
    assert (mounts[KEY_MOUNT] / "tls.crt").read_bytes() == cert_pem(old_ca.cert)
    assert (mounts[KEY_MOUNT] / "..data").is_symlink()
    assert roots_in((mounts[BUNDLE_MOUNT] / "trust-bundle.pem").read_bytes()) == {
        old_ca.cert.subject.rfc4514_string()
    }
    sa = mounts[SA_MOUNT]
    assert (sa / "namespace").read_text() == NS
    assert (sa / "ca.crt").read_bytes() == cluster.plane.pki.serving_ca.cert_pem
    claims = jwt_claims((sa / "token").read_text())
    assert claims["sub"] == f"system:serviceaccount:{NS}:service-serving-signer"
    assert claims["kubernetes.io"]["pod"]["name"] == pod.name


def issue_through_kubelet(
    cluster: Cluster, client: Client, namespace: str, name: str, node: int = 0
) -> VolumeFiles:
    create_pod(
        client,
        namespace,
        name,
        node=cluster.nodes[node % len(cluster.nodes)].name,
        labels={"app": "web"},
        signer_name=SIGNER,
        annotations={"kubernetes.io/service-names": "web"},
    )
    _, files = running_files(cluster, client, namespace, name)
    verify_against_bundle(files.chain, files.bundle, service_sans("web", namespace))
    return files


@pytest.mark.parametrize("via", ["in-cluster", "kubeconfig-token-file"])
def test_signer_authenticates_with_the_kubelet_written_service_account_volume(
    cluster: Cluster,
    cluster_client: Client,
    shipped: list[ShippedPod],
    node_namespace: str,
    tmp_path: Path,
    via: str,
) -> None:
    """In-cluster (no --kubeconfig) on the first Pod; on the next one, a kubeconfig naming
    the volume's token file, written in the container's /tmp (its emptyDir: the host's
    /tmp is hidden from the process)."""
    create_service(cluster_client, node_namespace, "web", {"app": "web"})
    node = 0 if via == "in-cluster" else 1
    pod = shipped[node % len(shipped)]
    args: tuple[str, ...] = ()
    if via == "kubeconfig-token-file":
        token_file_kubeconfig(cluster, pod.volume("/tmp") / "kubeconfig")
        args = ("--kubeconfig=/tmp/kubeconfig",)
    signer = start_signer(cluster, pod, tmp_path / "signer.log", *args)
    try:
        assert any(a.startswith("--kubeconfig") for a in signer.args) == bool(args)
        issue_through_kubelet(cluster, cluster_client, node_namespace, "web-0", node=node)
        forbidden = [line for line in signer.log_lines() if "forbidden" in line.lower()]
        assert not forbidden, forbidden[:3]
    finally:
        assert signer.stop() == 0


class Workloads:
    """Creates a workload Pod every `interval` seconds and records, for each one, the
    chain and the bundle the kubelet wrote when it first saw it Running."""

    def __init__(self, cluster: Cluster, client: Client, namespace: str, interval: float = 2.0):
        self.cluster = cluster
        self.client = client
        self.namespace = namespace
        self.interval = interval
        self.created: list[str] = []
        self.seen: dict[str, tuple[bytes, bytes]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._create, daemon=True),
            threading.Thread(target=self._observe, daemon=True),
        ]

    def __enter__(self) -> Workloads:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _create(self) -> None:
        while not self._stop.is_set():
            name = f"w-{len(self.created):03d}"
            try:
                create_pod(
                    self.client,
                    self.namespace,
                    name,
                    node=self.cluster.nodes[len(self.created) % len(self.cluster.nodes)].name,
                    labels={"app": "web"},
                    signer_name=SIGNER,
                    annotations={"kubernetes.io/service-names": "web"},
                )
                self.created.append(name)
            except Exception as err:
                self.errors.append(f"create {name}: {err}")
            self._stop.wait(self.interval)

    def _observe(self) -> None:
        while not self._stop.is_set():
            for name in [n for n in self.created if n not in self.seen]:
                pod = self.client.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
                if phase(pod) == "Running":
                    files = volume_files(self.cluster.node_of(pod), pod)
                    self.seen[name] = (files.chain, files.bundle)
            self._stop.wait(0.3)

    def newest_seen(self, after: int) -> list[tuple[bytes, bytes]]:
        """What the Pods created after the `after`-th one got."""
        return [self.seen[n] for n in self.created[after:] if n in self.seen]

    def bundle_now(self, name: str) -> bytes:
        pod = self.client.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")
        return volume_files(self.cluster.node_of(pod), pod).bundle


@pytest.mark.timeout(1200)  # kubelet propagates volume updates on its sync period
def test_rotation_runbook_through_kubelet_written_volumes_while_workloads_keep_starting(
    cluster: Cluster,
    cluster_client: Client,
    shipped: list[ShippedPod],
    old_ca: CertificateAuthority,
    node_namespace: str,
    tmp_path: Path,
) -> None:
    ns = node_namespace
    new_ca = generate_ca("rotation test root 2")
    old_root, new_root = (ca.cert.subject.rfc4514_string() for ca in (old_ca, new_ca))
    create_service(cluster_client, ns, "web", {"app": "web"})
    pod = shipped[0]
    signer = start_signer(cluster, pod, tmp_path / "signer.log")
    key_dir, bundle_dir = pod.volume(KEY_MOUNT), pod.volume(BUNDLE_MOUNT)

    def published() -> set[str]:
        items = bundles(cluster_client, SIGNER)
        return set().union(*(roots_in(i["spec"]["trustBundle"].encode()) for i in items))

    try:
        with Workloads(cluster, cluster_client, ns) as work:
            assert eventually(lambda: len(work.seen) >= 2, 180), work.errors
            first = work.created[0]

            # 1. add the new root; wait until the workloads have it
            put_trust_bundle(cluster_client, cert_pem(old_ca.cert, new_ca.cert))
            assert eventually(
                lambda: (
                    roots_in((bundle_dir / "trust-bundle.pem").read_bytes()) == {old_root, new_root}
                ),
                180,
            ), "kubelet did not update the ConfigMap volume"
            assert eventually(lambda: published() == {old_root, new_root}, 60)
            assert eventually(lambda: roots_in(work.bundle_now(first)) == {old_root, new_root}, 180)

            # 2. swap the signing key and certificate
            mark = len(work.created)
            put_signing_material(cluster_client, key_pem(new_ca.key), cert_pem(new_ca.cert))
            assert eventually(
                lambda: (key_dir / "tls.crt").read_bytes() == cert_pem(new_ca.cert), 180
            ), "kubelet did not update the Secret volume"

            def issued_by_new() -> bool:
                return any(
                    chain_of(chain)[0].issuer.rfc4514_string() == new_root
                    for chain, _ in work.newest_seen(mark)
                )

            assert eventually(issued_by_new, 180)

            # 3. drop the old root; it leaves the workloads' projected bundle
            mark = len(work.created)
            put_trust_bundle(cluster_client, cert_pem(new_ca.cert))
            assert eventually(lambda: published() == {new_root}, 180)
            assert eventually(lambda: roots_in(work.bundle_now(first)) == {new_root}, 180)
            assert eventually(lambda: len(work.newest_seen(mark)) >= 2, 180)
        # every Pod created gets Running; nothing was ever Denied or Failed
        assert _observe_rest(work), sorted(set(work.created) - set(work.seen))
        failed = signer.metric("service_serving_ca_controller_requests_total", 'result="failed"')
    finally:
        code = signer.stop()
    assert code == 0
    assert failed == 0.0
    assert not work.errors, work.errors[:3]
    assert len(work.created) >= 6
    issuers = {chain_of(chain)[0].issuer.rfc4514_string() for chain, _ in work.seen.values()}
    assert issuers == {old_root, new_root}
    for name, (chain, bundle) in work.seen.items():
        leaf = chain_of(chain)[0]
        assert dns_sans(leaf) == service_sans("web", ns), name
        verify_against_bundle(chain, bundle, service_sans("web", ns))
    requests = cluster_client.get(
        f"/apis/certificates.k8s.io/v1/namespaces/{ns}/podcertificaterequests"
    )
    conditions = [
        c["type"]
        for r in requests["items"]
        for c in (r.get("status") or {}).get("conditions") or []
    ]
    assert "Denied" not in conditions and "Failed" not in conditions
    assert len(requests["items"]) >= len(work.created)


def _observe_rest(work: Workloads) -> bool:
    """After the threads stopped: record the Pods that reached Running meanwhile."""
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        for name in [n for n in work.created if n not in work.seen]:
            pod = work.client.get(f"/api/v1/namespaces/{work.namespace}/pods/{name}")
            if phase(pod) == "Running":
                files = volume_files(work.cluster.node_of(pod), pod)
                work.seen[name] = (files.chain, files.bundle)
        if len(work.seen) == len(work.created):
            return True
        time.sleep(0.5)
    return False
