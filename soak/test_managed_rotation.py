"""`make soak`: one managed-CA rotation in real time — stage → swap → retire with 1-hour
leaves, nothing moved by hand — through the real (hollow) kubelet, with TLS handshakes
every 2 s from a client Pod's `clusterTrustBundle` projection to a server Pod's projected
certificate: 0 failed. The server Pod keeps running across the rotation: the kubelet
refreshes its certificate (from the new CA after the swap) before the old root is retired
at swap + 1 h + 5 min, and the old root then leaves the client's projection.

A real Gateway in the same loop: Traefik (tests/integration/traefik_harness.py)
routes 2 requests per second to a backend on Service `gw-web`'s ClusterIP that serves
web-0's files as the kubelet refreshes them, trusting them through a BackendTLSPolicy on
the ConfigMap the injector keeps equal to the signer's bundles: 0 failed requests.

An injected webhook in the same loop: a ValidatingWebhookConfiguration whose
caBundle the injector keeps equal to the signer's bundles, served from web-0's files on
Service `web`'s ClusterIP, and kube-apiserver as its TLS client: a dry-run ConfigMap
create every 2 s, each one a webhook call — 0 failed.

About 75 minutes."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from cryptography import x509

from controlplane import gateway_api
from controlplane.cluster import Cluster
from controlplane.traefik import Traefik
from controlplane.workload import CHAIN_FILE, VolumeFiles, cert_pod, wait_running
from injector.configmaps import LABEL
from injector.targets import ANNOTATION
from kube.client import ApiError, Client
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.integration.injector_harness import (
    VWC_PATH,
    RunningInjector,
    ca_bundles,
    consumer_config_map,
    validating_webhook,
)
from tests.integration.managed_ca_harness import (
    Prober,
    ca_cli,
    phase,
    roots,
    shipped_report_lease,
)
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import create_service, running_files, serving_pod
from tests.integration.signer_harness import unique_signer_name
from tests.integration.test_managed_ca import LEASE
from tests.integration.traefik_harness import (
    GW,
    Requests,
    answer,
    backend_service,
    delete_quietly,
    following_backend,
    gateway_class,
    route_host,
    route_through,
)
from tests.integration.webhook_server import WebhookServer
from trust.consumers import CA_KEY

pytestmark = pytest.mark.integration

SIGNER = unique_signer_name()
SECRET = f"soak-ca-{uuid.uuid4().hex[:8]}"
SECRET_PATH = f"/api/v1/namespaces/kube-system/secrets/{SECRET}"


@pytest.mark.timeout(100 * 60)
def test_a_real_time_managed_rotation_fails_no_handshake(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    client, ns = cluster_client, node_namespace
    signer = SignerProcess(
        cluster.plane.kubeconfig,
        None,
        tmp_path / "signer.log",
        "--ca-mode=managed",
        f"--managed-ca-secret-name={SECRET}",
        "--leader-elect-resource-namespace=kube-system",
        f"--leader-elect-resource-name=sss-{SECRET}",
        "--managed-ca-propagation-delay=30s",  # hollow kubelet syncFrequency: 10 s
        "--managed-ca-allow-short-propagation-delay",
        "--max-certificate-lifetime=1h",
        "--managed-ca-retire-margin=5m",
        signer_name=SIGNER,
    )
    stack = ExitStack()
    try:
        assert eventually(lambda: phase(client, SECRET_PATH) == "Stable", 60)
        create_service(client, ns, "web", {"app": "web"})
        for name in ("web-0", "client"):
            serving_pod(cluster, client, ns, name, app="web", signer_name=SIGNER)
        _, server = running_files(cluster, client, ns, "web-0")
        _, trusting = running_files(cluster, client, ns, "client")
        old_root = roots(trusting)
        gateway = stack.enter_context(_gateway(cluster, client, ns, server))
        requests = stack.enter_context(Requests(gateway.url("/ok"), route_host(ns), rate=2))
        webhook = stack.enter_context(_webhook(client, ns, server))

        with Prober(trusting, f"web.{ns}.svc", period=2.0) as prober:
            prober.servers["web-0"] = server
            started = time.monotonic()
            rotated = ca_cli(
                cluster.plane.kubeconfig,
                "rotate",
                "--signer-namespace=kube-system",
                f"--secret-name={SECRET}",
                f"--signer-name={SIGNER}",
            )
            assert rotated.returncode == 0, rotated.stderr
            assert eventually(lambda: phase(client, SECRET_PATH) == "Retiring", 120)
            swapped = time.monotonic()
            new_root = roots(trusting) - old_root
            assert len(new_root) == 1
            # Retire is due at swap + 1h + 5m, on the persisted time alone.
            assert eventually(
                lambda: phase(client, SECRET_PATH) == "Stable", 80 * 60, interval=10
            ), signer.log_lines()[-20:]
            retired = time.monotonic()
            assert eventually(lambda: roots(trusting) == new_root, 120, interval=2)
            time.sleep(10)
        stack.close()

        leaf = x509.load_pem_x509_certificates(server.read(CHAIN_FILE))[0]
        print(
            f"managed soak: stage→swap {swapped - started:.0f}s, swap→retire "
            f"{retired - swapped:.0f}s; handshakes {prober.ok} ok, {len(prober.failed)} failed; "
            f"web-0's leaf now {leaf.issuer.rfc4514_string()}; through Traefik "
            f"{requests.ok} ok, {len(requests.failed)} failed {dict(requests.codes)}; "
            f"through the injected webhook {webhook.ok} ok, {len(webhook.failed)} failed "
            f"({webhook.calls()} calls served)"
        )
        assert prober.failed == [], prober.failed[:5]
        assert prober.ok > 1000
        assert requests.failed == [], requests.failed[:5]
        assert requests.ok > 5000
        assert webhook.failed == [], webhook.failed[:5]
        assert webhook.ok > 1000
    finally:
        stack.close()
        signer.stop()


@contextmanager
def _gateway(cluster: Cluster, client: Client, ns: str, server: VolumeFiles) -> Iterator[Traefik]:
    """Traefik → Service `gw-web` (ClusterIP) → web-0's files, trusting the injected
    ConfigMap `web-ca` (the signer's bundles) and verifying `web.<ns>.svc`."""
    gateway_api.install(client, gateway_api.EXPERIMENTAL_VERSION, channel="experimental")
    with ExitStack() as stack:
        stack.enter_context(RunningInjector(client))
        client.create(
            f"/api/v1/namespaces/{ns}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": "web-ca",
                    "labels": {LABEL: "true"},
                    "annotations": {
                        ANNOTATION: json.dumps({"signerName": SIGNER, "labelSelector": {}})
                    },
                },
            },
        )
        traefik = stack.enter_context(Traefik(cluster.plane))
        class_name = gateway_class(client)
        stack.callback(delete_quietly, client, f"{GW}/gatewayclasses/{class_name}")
        cluster_ip = backend_service(client, ns, "gw-web", "web")
        route_through(client, ns, traefik, class_name, "gw-web", "web-ca", f"web.{ns}.svc")
        stack.enter_context(following_backend(cluster_ip, server))
        assert eventually(lambda: answer(traefik, ns) == 200, 60), traefik.tail()
        yield traefik


class WebhookCalls:
    """A dry-run ConfigMap create every `period` in `ns`: kube-apiserver calls the
    webhook over TLS, verifying it against the injected caBundle (`failurePolicy: Fail`,
    so a verification failure is a refused create)."""

    def __init__(self, client: Client, ns: str, server: WebhookServer, period: float) -> None:
        self.client, self.ns, self.server, self.period = client, ns, server, period
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def calls(self) -> int:
        return self.server.admission_calls

    def create(self) -> str | None:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe"}}
        try:
            self.client.create(
                f"/api/v1/namespaces/{self.ns}/configmaps", body, params={"dryRun": "All"}
            )
        except ApiError as err:
            return str(err)
        return None

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            error = self.create()
            if error is None:
                self.ok += 1
            else:
                self.failed.append(f"{time.strftime('%H:%M:%S')} {error}")

    def __enter__(self) -> WebhookCalls:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


@contextmanager
def _webhook(client: Client, ns: str, server: VolumeFiles) -> Iterator[WebhookCalls]:
    """A webhook on Service `web` (port 443: its ClusterIP) serving web-0's files as the
    kubelet refreshes them, its caBundle injected from the signer's bundles."""
    name = f"soak-{uuid.uuid4().hex[:8]}"
    selection = json.dumps({"signerName": SIGNER, "labelSelector": {}})
    hook = validating_webhook(name, ns, "web", selection)
    hook["webhooks"][0]["clientConfig"]["service"]["port"] = 443
    service = client.get(f"/api/v1/namespaces/{ns}/services/web")
    with ExitStack() as stack:
        serving = stack.enter_context(
            following_backend(service["spec"]["clusterIP"], server, port=443)
        )
        client.create(VWC_PATH, hook)
        stack.callback(delete_quietly, client, f"{VWC_PATH}/{name}")
        assert eventually(lambda: ca_bundles(client.get(f"{VWC_PATH}/{name}")) != [], 60)
        calls = WebhookCalls(client, ns, serving, period=2.0)
        assert eventually(lambda: calls.create() is None, 60), calls.create()
        yield stack.enter_context(calls)


@pytest.mark.timeout(20 * 60)
def test_a_late_convergence_fails_no_handshake_through_a_mounted_config_map(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    """The injector's report converges long after the propagation delay (the injector was
    down while the rotation staged, as after `injector-report-stale`'s restart): the swap
    still waits the delay from that convergence, so a Pod reading the injected ConfigMap
    through a volume (the hollow kubelet rewrites it on its resync) holds the new root
    before any leaf from the new CA exists. Handshakes every second from that Pod's
    mounted `ca.crt` to web-0 (its leaf from the old CA) and, from the moment the swap is
    seen, to web-new (started then: its leaf from the new CA): 0 failed. About 5 min."""
    client, ns = cluster_client, node_namespace
    signer_name = unique_signer_name()
    selection = json.dumps({"signerName": signer_name, "labelSelector": {}})
    secret_path = f"/api/v1/namespaces/{ns}/secrets/{DEFAULT_SECRET_NAME}"
    delay = 30  # hollow kubelet syncFrequency: 10 s
    shipped_report_lease(client, ns)
    client.create(f"/api/v1/namespaces/{ns}/configmaps", consumer_config_map("web-ca", selection))
    common = (f"--leader-elect-resource-namespace={ns}", *LEASE)

    def injector(log: str) -> SignerProcess:
        return SignerProcess(
            cluster.plane.kubeconfig,
            None,
            tmp_path / log,
            "--controllers=injector",
            *common,
            signer_name=None,
        )

    signer = SignerProcess(
        cluster.plane.kubeconfig,
        None,
        tmp_path / "signer.log",
        "--ca-mode=managed",
        "--leader-elect-resource-name=late-convergence",
        f"--managed-ca-propagation-delay={delay}s",
        "--managed-ca-allow-short-propagation-delay",
        "--managed-ca-wait-for-injector=true",
        "--max-certificate-lifetime=1h",
        "--managed-ca-retire-margin=5m",
        *common,
        signer_name=signer_name,
    )
    first = injector("injector-1.log")
    later: SignerProcess | None = None
    try:
        assert eventually(lambda: phase(client, secret_path) == "Stable", 60), signer.log_lines()[
            -20:
        ]
        create_service(client, ns, "web", {"app": "web"})
        serving_pod(cluster, client, ns, "web-0", app="web", signer_name=signer_name)
        _, web_0 = running_files(cluster, client, ns, "web-0")
        old_root = roots(web_0)
        pod = cert_pod("cm-client", ns, node=cluster.nodes[0].name, signer_name=signer_name)
        pod["spec"]["volumes"] = [{"name": "trust", "configMap": {"name": "web-ca"}}]
        pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "trust", "mountPath": "/trust"}]
        client.create(f"/api/v1/namespaces/{ns}/pods", pod)
        running = wait_running(client, ns, "cm-client", 180)
        mounted = VolumeFiles(
            cluster.node_of(running).volume_dir(running["metadata"]["uid"], "trust", "configMap")
        )

        def mounted_roots() -> set[str]:
            return set(pem_fingerprints(mounted.read(CA_KEY))) if mounted.exists(CA_KEY) else set()

        assert eventually(lambda: mounted_roots() == old_root, 120), mounted_roots()

        with Prober(mounted, f"web.{ns}.svc", period=1.0, bundle=CA_KEY) as prober:
            prober.servers["web-0"] = web_0
            assert first.stop() == 0  # the injector is down while the rotation stages
            rotated = ca_cli(
                cluster.plane.kubeconfig,
                "rotate",
                f"--signer-namespace={ns}",
                f"--signer-name={signer_name}",
            )
            assert rotated.returncode == 0, rotated.stderr
            staged = time.monotonic()
            time.sleep(2 * delay)  # the delay from the read-back has long passed
            assert phase(client, secret_path) == "Staged", "the swap waits for the injector"
            later = injector("injector-2.log")
            restarted = time.monotonic()
            # Both watched in one loop: what the Pod's volume held when the swap was seen.
            mounted_at: float | None = None
            while phase(client, secret_path) != "Retiring":
                assert time.monotonic() - restarted < 180, "no swap"
                if mounted_at is None and len(mounted_roots()) == 2:
                    mounted_at = time.monotonic()
                time.sleep(0.2)
            swapped = time.monotonic()
            held_at_swap = mounted_roots()
            serving_pod(cluster, client, ns, "web-new", app="web", signer_name=signer_name)
            _, web_new = running_files(cluster, client, ns, "web-new")
            assert eventually(lambda: web_new.exists(CHAIN_FILE), 60)
            new_root = roots(web_new) - old_root
            prober.servers["web-new"] = web_new
            time.sleep(60)
        leaf = x509.load_pem_x509_certificates(web_new.read(CHAIN_FILE))[0]
        print(
            f"late convergence soak: staged→injector restarted {restarted - staged:.0f}s, "
            f"→ConfigMap volume holds old+new "
            f"{'never' if mounted_at is None else f'{mounted_at - restarted:.0f}s'}, "
            f"→swap seen {swapped - restarted:.0f}s; web-new's leaf from "
            f"{leaf.issuer.rfc4514_string()}; handshakes through the mounted ConfigMap "
            f"{prober.ok} ok, {len(prober.failed)} failed"
        )
        assert len(held_at_swap) == 2, "swapped before the Pod's mounted ConfigMap held the CA"
        assert swapped - restarted >= delay, "the swap waited the delay from the convergence"
        assert prober.failed == [], prober.failed[:5]
        assert prober.ok > 100
        assert len(new_root) == 1, new_root
    finally:
        for proc in (signer, first, later):
            if proc is not None:
                proc.stop()
