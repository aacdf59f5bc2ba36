"""`make demo` (`python -m controlplane.demo [--workdir DIR]`): the main job end to end on
a local control plane. A development command: it lives beside the control plane it
drives, which the runtime image does not carry (there, `service-serving-signer demo`
says so).

Decides what the demo proves and how it shows it, on a cluster minus containers
(`controlplane.cluster`: a real kube-apiserver + etcd, the real kube-controller-manager
and one hollow node — the real kubelet with a fake container runtime): a throw-away CA
(`trust.ca`), the signer started as a *subprocess* with its real command line (the same
`run` a Deployment uses), then a Service and a workload Pod whose projected volume asks
for a `podCertificate` and our ClusterTrustBundle. The *kubelet* creates the request,
waits for it and writes the key, chain and bundle into the Pod's volume; the demo prints
those files, verifies the chain against the `ca.pem` the kubelet projected, and does a
TLS handshake serving the kubelet-written `tls.crt`/`tls.key` to a client that trusts only
that `ca.pem` (and shows that a name the certificate does not carry is refused). Then a
Pod naming a Service that does not exist yet: it waits, with the signer's Warning Event,
until the Service is created, and runs. Timings are printed along the way. It prints the
signer's key metrics and stops everything (SIGTERM → the signer releases its Lease and
exits 0). Any step that fails raises `DemoFailure`, one line, after printing the signer's
last log lines.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from controlplane import binaries
from controlplane.cluster import Cluster
from controlplane.kubelet import pcr_path
from controlplane.process import ProcessExited, SignerProcess, http_get
from controlplane.workload import cert_pod, volume_files, wait_service_account
from manager import logs
from trust import ca
from trust.selector import resolve_selector

SIGNER_NAME = "kubernetes.io/service-serving"
NAMESPACE = "demo"
SIGNER_NAMESPACE = "service-serving-signer"
SERVICE = "web"
DOMAIN = "cluster.local"
T = TypeVar("T")

KEY_METRICS = (
    "service_serving_ca_controller_requests_total",
    "service_serving_ca_controller_signer_ttl_seconds",
    "service_serving_ca_controller_pending_requests",
    "service_serving_ca_controller_issuance_duration_seconds_count",
    "service_serving_ca_controller_issuance_duration_seconds_sum",
    "service_serving_ca_controller_trust_bundle_expiry_seconds",
    "controller_sync_total",
    "leader_election_master_status",
)


class DemoFailure(Exception):
    """A demo step failed; `str()` is one line."""


def step(text: str) -> None:
    print(f"==> {text}", flush=True)


def detail(text: str) -> None:
    print(f"    {text}", flush=True)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result is not None:
            return result
        time.sleep(0.2)
    raise DemoFailure(f"timed out after {timeout:.0f}s waiting for {what}")


# --- the certificate and the TLS proof --------------------------------------------------


def describe_certificate(chain_pem: str, pcr_status: dict[str, Any]) -> x509.Certificate:
    chain = x509.load_pem_x509_certificates(chain_pem.encode())
    leaf = chain[0]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    detail(f"subject      : {leaf.subject.rfc4514_string() or '(empty)'}")
    detail(f"DNS SANs     : {', '.join(sans.get_values_for_type(x509.DNSName))}")
    detail(f"issuer       : {leaf.issuer.rfc4514_string()}")
    detail(f"notBefore    : {leaf.not_valid_before_utc.isoformat()}")
    detail(f"notAfter     : {leaf.not_valid_after_utc.isoformat()}  (lifetime {lifetime})")
    detail(f"refresh at   : {pcr_status.get('beginRefreshAt')}")
    detail(f"serial       : {leaf.serial_number:#x}")
    detail(f"chain length : {len(chain)} certificate(s)")
    return leaf


def published_bundle(client: Any) -> str:
    """The trust bundle a Pod projecting `clusterTrustBundle: {signerName, labelSelector:
    {}}` would see, resolved with the publisher's own normalisation."""
    items: list[dict[str, Any]] = []
    for version in ("v1", "v1beta1"):
        try:
            listed = client.get(
                f"/apis/certificates.k8s.io/{version}/clustertrustbundles",
                {"fieldSelector": f"spec.signerName={SIGNER_NAME}"},
            )
        except Exception:
            continue
        items = list(listed.get("items") or [])
        if items:
            break
    return resolve_selector(items, {"signerName": SIGNER_NAME, "labelSelector": {}})


@contextmanager
def tls_server(cert_file: Path, key_file: Path) -> Iterator[int]:
    """A one-connection-at-a-time TLS server on loopback serving the issued chain."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert_file), str(key_file))
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = int(listener.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(5)
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"hello from web\n")
            except (ssl.SSLError, OSError):
                pass  # the client refused us (the negative check)

    thread = threading.Thread(target=serve, name="demo-tls", daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=2)


def handshake(port: int, bundle_pem: str, server_name: str) -> tuple[str, str, bytes]:
    """Connect trusting only `bundle_pem`; (TLS version, cipher, first line)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies chain + hostname
    context.load_verify_locations(cadata=bundle_pem)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        cipher = tls.cipher()
        return str(tls.version()), cipher[0] if cipher else "?", tls.recv(64)


def key_metrics(text: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if line.startswith(KEY_METRICS) and not line.startswith("#")
    ]


# --- the demo ----------------------------------------------------------------------------


def build_note(to_build: list[str]) -> str | None:
    """What the user waits for before the cluster starts: said only when something is
    built (a cached run starts in seconds)."""
    if not to_build:
        return None
    return (
        f"first building {', '.join(to_build)} from Go modules into the cache: about "
        "10-15 minutes on an idle 2-core machine (30-50 on a loaded one), once; later runs "
        "start in seconds"
    )


# Everything the demo's cluster runs (`Cluster.start` at `binaries.KUBERNETES_VERSION`): the
# demo builds these, and only these, when they are missing — not the other versions, tools
# and Traefik that `make test` builds.
DEMO_BINARIES = ("etcd", "kube-apiserver", *binaries.NODE_BINARIES)


def ensure_binaries() -> None:
    """Find or build the demo cluster's binaries (`DEMO_BINARIES`, Kubernetes
    `binaries.KUBERNETES_VERSION`) in one build, saying first what it waits for."""
    note = build_note(binaries.missing(DEMO_BINARIES))
    if note:
        detail(note)
    try:
        binaries.ensure(extra=binaries.NODE_BINARIES)
    except binaries.BinaryError as err:
        raise DemoFailure(f"binaries: {err}") from None


def run(workdir: Path | None = None) -> int:
    owned = workdir is None
    root = Path(tempfile.mkdtemp(prefix="sss-demo-")) if workdir is None else workdir
    root.mkdir(parents=True, exist_ok=True)
    step(
        "starting a local cluster minus containers: kube-apiserver + etcd, "
        "kube-controller-manager, one hollow node (the real kubelet, fake runtime)"
    )
    ensure_binaries()
    started = time.monotonic()
    try:
        cluster = Cluster.start(nodes=1)
    except Exception as err:
        raise DemoFailure(f"cluster: {' '.join(str(err).split())}") from None
    detail(
        f"API server {cluster.plane.host}, node {cluster.nodes[0].name} Ready "
        f"({time.monotonic() - started:.1f}s)"
    )
    signer: SignerProcess | None = None
    try:
        signer = _demo(cluster, root)
        step("stopping the signer (SIGTERM: stop workers, release the Lease)")
        status = signer.stop()
        detail(f"signer exited with status {status}")
        if status != 0:
            raise DemoFailure(f"the signer exited with status {status} on SIGTERM")
        step(
            "done: the kubelet got certificates that verify against the bundle it projected "
            "from the published ClusterTrustBundle"
        )
        return 0
    except DemoFailure:
        if signer is not None:
            print("    last signer log lines:", file=sys.stderr)
            for line in signer.log_tail():
                print(f"      {line}", file=sys.stderr)
        raise
    finally:
        if signer is not None:
            signer.stop()
        cluster.stop()
        if owned:
            shutil.rmtree(root, ignore_errors=True)


def _demo(cluster: Any, root: Path) -> SignerProcess:
    client = cluster.plane.client()
    node = cluster.nodes[0]
    step("creating a throw-away CA (evaluation only)")
    files = ca.write_ca(root / "ca", overwrite=True)
    anchor = x509.load_pem_x509_certificate(files.trust_bundle.read_bytes())
    detail(f"{anchor.subject.rfc4514_string()}, valid until {anchor.not_valid_after_utc:%Y-%m-%d}")

    for ns in (SIGNER_NAMESPACE, NAMESPACE):
        client.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )

    step("starting `service-serving-signer run` as a subprocess")
    signer = SignerProcess(
        cluster.plane.kubeconfig,
        files.key.parent,
        root / "signer.log",
        f"--leader-elect-resource-namespace={SIGNER_NAMESPACE}",
        log_format="text",
    )
    detail(" ".join(["service-serving-signer", *signer.args[3:]]))
    try:
        signer.wait_ready(timeout=60)
    except (ProcessExited, TimeoutError) as err:
        raise DemoFailure(str(err).splitlines()[0]) from None
    detail(f"/readyz 200; logs in {signer.log_path}")
    bundle = wait_for("the published ClusterTrustBundle", lambda: _bundle_or_none(client), 30)
    detail(f"published ClusterTrustBundle for {SIGNER_NAME} ({bundle.count('BEGIN')} anchor)")

    _wait_for_service_account(client)
    _workload(client, cluster, node, root)
    _late_service(client, cluster, node)

    step("signer metrics (from /metrics)")
    code, text = http_get(signer.url("/metrics"))
    if code != 200:
        raise DemoFailure(f"/metrics answered {code}")
    for line in key_metrics(text):
        if line.endswith("_created"):
            continue
        detail(_humanize_metric(line))
    return signer


def _create_serving_pod(client: Any, node: Any, pod_name: str, service: str) -> None:
    """Pod `pod_name` on `node`, selected by and asking for the names of `service`."""
    pod = cert_pod(
        pod_name,
        NAMESPACE,
        node=node.name,
        labels={"app": service},
        annotations={"kubernetes.io/service-names": service},
    )
    _create(client, "pods", pod)


def _workload(client: Any, cluster: Any, node: Any, root: Path) -> None:
    pod_name = f"{SERVICE}-0"
    step(
        f"creating Service {NAMESPACE}/{SERVICE} and Pod {pod_name} on {node.name}: a projected "
        "volume with a podCertificate (ECDSAP256) and our ClusterTrustBundle"
    )
    _create(client, "services", _service(SERVICE))
    asked = time.monotonic()
    _create_serving_pod(client, node, pod_name, SERVICE)
    pcr = wait_for("the kubelet's PodCertificateRequest", lambda: _pcr_of(client, pod_name), 60)
    detail(
        f"the kubelet created PodCertificateRequest {NAMESPACE}/{pcr['metadata']['name']} "
        f"({time.monotonic() - asked:.2f}s)"
    )
    status = wait_for("the certificate", lambda: _final_status(client, pcr["metadata"]["name"]), 60)
    detail(f"Issued ({time.monotonic() - asked:.2f}s after the Pod was created)")
    pod = wait_for("the Pod to run", lambda: _running(client, pod_name), 180)
    detail(f"Pod {pod_name} Running ({time.monotonic() - asked:.2f}s after it was created)")

    written = volume_files(node, pod)
    step(f"the files the kubelet wrote in {written.directory}")
    for name in written.names():
        detail(f"{name:8} {len(written.read(name)):5d} bytes")
    describe_certificate(written.text("tls.crt"), status)
    ca_pem = written.text("ca.pem")
    _verify_chain(written.text("tls.crt"), ca_pem)
    detail("chain verifies against the kubelet-projected ca.pem (cryptography's verifier)")

    step("TLS handshake: tls.crt/tls.key as the kubelet wrote them; the client trusts only ca.pem")
    good = f"{SERVICE}.{NAMESPACE}.svc.{DOMAIN}"
    bad = f"{SERVICE}.other.svc.{DOMAIN}"
    with tls_server(written.directory / "tls.crt", written.directory / "tls.key") as port:
        try:
            version, cipher, greeting = handshake(port, ca_pem, good)
        except ssl.SSLError as err:
            raise DemoFailure(f"TLS handshake as {good} failed: {err}") from None
        detail(f"{good}: verified ({version}, {cipher}), server said {greeting.decode().strip()!r}")
        try:
            handshake(port, ca_pem, bad)
        except ssl.SSLCertVerificationError as err:
            detail(f"{bad}: refused as expected ({err.verify_message})")
        else:
            raise DemoFailure(f"a client accepted the certificate for {bad}")


def _late_service(client: Any, cluster: Any, node: Any) -> None:
    service, pod_name = "late", "late-0"
    step(f"a Pod naming Service {NAMESPACE}/{service}, which does not exist yet")
    asked = time.monotonic()
    _create_serving_pod(client, node, pod_name, service)
    event = wait_for("the signer's Warning Event", lambda: _signer_event(client, pod_name), 60)
    pod = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}")
    detail(
        f"Pod {pod_name} {pod['status'].get('phase')}; Event {event['type']} {event['reason']}: "
        f"{event.get('note')} ({time.monotonic() - asked:.2f}s)"
    )
    created = time.monotonic()
    _create(client, "services", _service(service))
    step(f"created Service {NAMESPACE}/{service}")
    pcr = _pcr_of(client, pod_name)
    if pcr is None:
        raise DemoFailure(f"no PodCertificateRequest for {pod_name}")
    wait_for("the certificate", lambda: _final_status(client, pcr["metadata"]["name"]), 60)
    detail(f"Issued {time.monotonic() - created:.2f}s after the Service was created")
    wait_for("the Pod to run", lambda: _running(client, pod_name), 240)
    detail(
        f"Pod {pod_name} Running {time.monotonic() - created:.2f}s after the Service was "
        "created (the kubelet retries the volume with backoff)"
    )


def _service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": {"app": name}, "ports": [{"name": "https", "port": 443}]},
    }


def _create(client: Any, plural: str, body: dict[str, Any]) -> None:
    client.create(f"/api/v1/namespaces/{NAMESPACE}/{plural}", body)


def _wait_for_service_account(client: Any) -> None:
    wait_service_account(client, NAMESPACE)


def _pcr_of(client: Any, pod_name: str) -> dict[str, Any] | None:
    for pcr in client.get(pcr_path(NAMESPACE)).get("items") or []:
        if pcr["spec"]["podName"] == pod_name:
            found: dict[str, Any] = pcr
            return found
    return None


def _running(client: Any, pod_name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = client.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_name}")
    return pod if (pod.get("status") or {}).get("phase") == "Running" else None


def _signer_event(client: Any, pod_name: str) -> dict[str, Any] | None:
    events = client.get(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events")
    for event in events.get("items") or []:
        regarding = event.get("regarding") or {}
        if (
            event.get("reportingController") == "service-serving-signer"
            and regarding.get("name") == pod_name
        ):
            found: dict[str, Any] = event
            return found
    return None


def _verify_chain(chain_pem: str, bundle_pem: str) -> None:
    chain = x509.load_pem_x509_certificates(chain_pem.encode())
    store = Store(x509.load_pem_x509_certificates(bundle_pem.encode()))
    name = f"{SERVICE}.{NAMESPACE}.svc.{DOMAIN}"
    try:
        verifier = PolicyBuilder().store(store).build_server_verifier(x509.DNSName(name))
        verifier.verify(chain[0], chain[1:])
    except Exception as err:
        raise DemoFailure(f"the kubelet-written chain does not verify: {err}") from None


def _bundle_or_none(client: Any) -> str | None:
    try:
        return published_bundle(client) or None
    except Exception:
        return None


def _final_status(client: Any, name: str) -> dict[str, Any] | None:
    pcr = client.get(pcr_path(NAMESPACE, "v1", name))
    status: dict[str, Any] = pcr.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition["type"] == "Issued":
            return status
        if condition["type"] in ("Denied", "Failed"):
            raise DemoFailure(
                f"the request was {condition['type']}: {condition.get('reason')}: "
                f"{condition.get('message')}"
            )
    return None


def _humanize_metric(line: str) -> str:
    name, _, value = line.rpartition(" ")
    if name.startswith(
        ("service_serving_ca_controller_signer_ttl", "service_serving_ca_controller_trust_bundle")
    ):
        when = dt.datetime.fromtimestamp(float(value), dt.UTC)
        return f"{name} {value}  (= {when:%Y-%m-%d %H:%M:%SZ})"
    return line


def main(argv: list[str] | None = None) -> int:
    """The command line: one `error:` line and status 1 when a step fails."""
    parser = argparse.ArgumentParser(
        prog="python -m controlplane.demo",
        description="Show the signer end to end on a local control plane; needs no cluster.",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="Keep the control plane's files here (default: a temporary directory).",
    )
    args = parser.parse_args(argv)
    logs.configure("text", 0)
    try:
        return run(args.workdir)
    except DemoFailure as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
