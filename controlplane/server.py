"""Start and stop a real etcd + kube-apiserver on loopback, like controller-runtime's envtest.

Authorization is `Node,RBAC` with the `NodeRestriction` admission plugin, as on a real
cluster (so permission tests are real, and a kubelet's requests pass the same checks);
`certificates.k8s.io/v1beta1` is enabled next to the GA v1 so both PodCertificateRequest
paths run against one server. An older kube-apiserver (`binaries.OLDER_VERSIONS`: 1.36)
serves the two APIs only as v1beta1 behind feature gates, which `version_args` turns on as
a cluster operator would; so it does `PodCertificateMLDSA` (ML-DSA key types, beta and off
by default) on 1.38 (`binaries.NEXT_VERSION`). A test that wants 1.38 without it passes
`--feature-gates=PodCertificateMLDSA=false` in `extra_args` (a later `--feature-gates`
flag adds to the earlier ones; the last value of a gate wins).

This light plane has no kubelet and no controller-manager: Pods stay Pending, namespaces
never finish terminating, nobody garbage-collects, and the `ServiceAccount` admission
plugin is off (nobody would create the `default` ServiceAccount) — tests use a namespace
each. `controlplane.cluster` adds kube-controller-manager and hollow kubelets to a plane
started with `controllers=True`, which keeps that admission plugin on.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

from controlplane import binaries
from controlplane.pki import ControlPlanePKI, KeyPair

START_TIMEOUT = float(os.environ.get("CONTROLPLANE_START_TIMEOUT", "120"))


def http_ok(url: str) -> bool:
    """Whether a plain GET of `url` answers 200 within 2 s (a health endpoint)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loopback_service_cidr() -> str:
    """A /24 inside 127.0.0.0/8 for Service ClusterIPs. Linux routes all of 127/8 to
    loopback, so a test server bound to a Service's ClusterIP is reached by kube-apiserver's
    own service resolution (webhooks, APIServices); and no Service IP ever points off the
    machine. Random per control plane so concurrent test runs do not share ClusterIPs;
    never 127.0.0.0/24, where the servers themselves listen."""
    return f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.0/24"


def kubernetes_service_ip(service_cidr: str) -> str:
    """The `kubernetes` Service's ClusterIP: kube-apiserver takes the range's first
    address for it (`ServiceIPRange` → `GetIndexedIP(1)`)."""
    return str(ipaddress.ip_network(service_cidr)[1])


def minor_of(version: str) -> int:
    """37 for "v1.37.2"."""
    return int(version.lstrip("v").split(".")[1])


def node_feature_gates(version: str) -> tuple[str, ...]:
    """The gates a kubelet of `version` needs to match the plane's: 1.38's kubelet declares
    the `PodCertificateMLDSA` node feature only with its gate on (and refuses a Pod that
    asks for an ML-DSA key otherwise, `PodFeatureUnsupported`); before 1.37 the kubelet
    projects `clusterTrustBundle` and `podCertificate` sources only with the beta gates
    the plane turns on too (otherwise the Pod never leaves ContainerCreating)."""
    minor = minor_of(version)
    if minor >= 38:
        return ("PodCertificateMLDSA=true",)
    if minor >= 37:
        return ()
    return (
        "PodCertificateRequest=true",
        "ClusterTrustBundle=true",
        "ClusterTrustBundleProjection=true",
    )


def version_args(version: str, extra_args: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The flags that make kube-apiserver `version` serve PodCertificateRequests and
    ClusterTrustBundles: 1.37 serves v1 (GA) and v1beta1 on request; before 1.37 both
    are v1beta1 behind the `PodCertificateRequest`, `ClusterTrustBundle` and
    `ClusterTrustBundleProjection` gates. 1.38 serves what 1.37 does, and ML-DSA key types
    (`MLDSA44`, `MLDSA65`, `MLDSA87`) in PodCertificateRequests and `podCertificate`
    projections behind the `PodCertificateMLDSA` gate (beta, off by default), turned on —
    unless `extra_args` carry `--min-compatibility-version`, the other route a cluster
    operator takes (1.38 turns the gate on by default from compatibility version 1.38),
    which a test then shows on its own."""
    minor = minor_of(version)
    if minor >= 37:
        compatibility = any(a.startswith("--min-compatibility-version") for a in extra_args)
        return (
            *(
                f"--feature-gates={gate}"
                for gate in (() if compatibility else node_feature_gates(version))
            ),
            "--runtime-config=certificates.k8s.io/v1beta1/podcertificaterequests=true,"
            "certificates.k8s.io/v1beta1/clustertrustbundles=true",
        )
    return (
        "--feature-gates=PodCertificateRequest=true,ClusterTrustBundle=true,"
        "ClusterTrustBundleProjection=true",
        "--runtime-config=certificates.k8s.io/v1beta1=true",
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ControlPlaneError(RuntimeError):
    pass


class ControlPlane:
    """A running etcd + kube-apiserver. Use `ControlPlane.start()`; call `stop()` at the end."""

    def __init__(
        self,
        workdir: Path,
        bins: binaries.Binaries,
        extra_args: tuple[str, ...],
        *,
        controllers: bool = False,
        kube_version: str = binaries.KUBERNETES_VERSION,
    ) -> None:
        self.workdir = workdir
        self.kube_version = kube_version
        self.bins = bins
        self.extra_args = extra_args
        self.controllers = controllers
        self.service_cidr = loopback_service_cidr()
        self.pki = ControlPlanePKI.generate(kubernetes_service_ip(self.service_cidr))
        self.files = self.pki.write(workdir)
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.port = free_port()
        self.host = f"https://127.0.0.1:{self.port}"
        self.etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        self.kubeconfig = workdir / "kubeconfig"
        self.version = ""
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._logs: list[IO[bytes]] = []

    # lifecycle ------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        workdir: Path | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        version: str = binaries.KUBERNETES_VERSION,
        controllers: bool = False,
    ) -> ControlPlane:
        """`controllers=True`: a kube-controller-manager will run beside it (see
        `controlplane.cluster`), so the `ServiceAccount` admission plugin stays on."""
        bins = binaries.ensure(version)
        owned = workdir is None
        directory = Path(tempfile.mkdtemp(prefix="sss-controlplane-")) if owned else workdir
        assert directory is not None
        plane = cls(directory, bins, extra_args, controllers=controllers, kube_version=version)
        plane._owned = owned
        try:
            plane._start_etcd()
            plane._start_apiserver()
            plane._write_kubeconfig()
        except BaseException:
            plane.stop()
            raise
        return plane

    _owned = True

    def _log(self, name: str) -> IO[bytes]:
        f = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(f)
        return f

    def _start_etcd(self) -> None:
        args = [
            str(self.bins.etcd),
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{self.etcd_peer_port}",
            f"--initial-cluster=default=http://127.0.0.1:{self.etcd_peer_port}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
            "--quota-backend-bytes=8589934592",
        ]
        log = self._log("etcd")
        self._etcd = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self._wait(lambda: http_ok(f"{self.etcd_url}/health"), "etcd", self._etcd)

    def apiserver_args(self) -> list[str]:
        f = self.files
        return [
            str(self.bins.kube_apiserver),
            f"--etcd-servers={self.etcd_url}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={f['apiserver.crt']}",
            f"--tls-private-key-file={f['apiserver.key']}",
            f"--client-ca-file={f['client-ca.crt']}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allow-privileged=true",
            "--enable-admission-plugins=NodeRestriction",
            *(() if self.controllers else ("--disable-admission-plugins=ServiceAccount",)),
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer=https://127.0.0.1:{self.port}/",
            f"--service-account-key-file={f['sa.pub']}",
            f"--service-account-signing-key-file={f['sa.key']}",
            "--endpoint-reconciler-type=none",
            *version_args(self.kube_version, self.extra_args),
            f"--cert-dir={self.workdir / 'certs'}",
            "--profiling=false",
            *self.extra_args,
        ]

    def _start_apiserver(self, timeout: float | None = None) -> None:
        log = self._log("kube-apiserver")
        self._apiserver = subprocess.Popen(
            self.apiserver_args(), stdout=log, stderr=subprocess.STDOUT
        )
        self._wait(self._apiserver_ready, "kube-apiserver", self._apiserver, timeout)
        self.version = json.loads(self._get("/version"))["gitVersion"]

    def restart_apiserver(self, extra_args: tuple[str, ...] | None = None) -> None:
        """Stop and start kube-apiserver on the same port (etcd and data stay)."""
        if extra_args is not None:
            self.extra_args = extra_args
        self.stop_apiserver()
        self._start_apiserver()

    def stop_apiserver(self) -> None:
        terminate(self._apiserver)
        self._apiserver = None

    def start_apiserver(self, timeout: float | None = None) -> None:
        """Start kube-apiserver again; `timeout` (default START_TIMEOUT) for /readyz — a
        restart over 150,000 Pods fills its watch cache for minutes on a loaded machine."""
        self._start_apiserver(timeout)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision (watches older than this get
        410 Gone on reconnect). Returns the revision compacted to."""
        status = self._etcd_post("/v3/kv/range", {"key": _b64(b"/"), "limit": 1})
        revision = int(status["header"]["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def stop(self) -> None:
        terminate(self._apiserver)
        terminate(self._etcd)
        self._apiserver = self._etcd = None
        for f in self._logs:
            f.close()
        self._logs.clear()
        if self._owned and os.environ.get("CONTROLPLANE_KEEP_DIR") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # clients --------------------------------------------------------------------------

    def kubeconfig_for(
        self, user: KeyPair | None = None, token: str | None = None
    ) -> dict[str, Any]:
        user_entry: dict[str, str]
        if token is not None:
            user_entry = {"token": token}
        else:
            pair = user or self.pki.admin
            user_entry = {
                "client-certificate-data": _b64(pair.cert_pem),
                "client-key-data": _b64(pair.key_pem),
            }
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "envtest",
                    "cluster": {
                        "server": self.host,
                        "certificate-authority-data": _b64(self.pki.serving_ca.cert_pem),
                    },
                }
            ],
            "users": [{"name": "envtest", "user": user_entry}],
            "contexts": [{"name": "envtest", "context": {"cluster": "envtest", "user": "envtest"}}],
            "current-context": "envtest",
        }

    def write_kubeconfig(
        self, path: Path, *, token: str | None = None, user: KeyPair | None = None
    ) -> Path:
        path.write_text(json.dumps(self.kubeconfig_for(user, token=token), indent=2))
        path.chmod(0o600)
        return path

    def _write_kubeconfig(self) -> None:
        self.write_kubeconfig(self.kubeconfig)
        self._wait(lambda: self._get_ok("/api/v1/namespaces/default"), "namespace default", None)

    def client(self, *, qps: float = 0, burst: int = 1000) -> Any:
        """An admin `kube.client.Client` (qps 0 = unlimited)."""
        from kube.client import Client

        return Client.from_kubeconfig(str(self.kubeconfig), qps=qps, burst=burst)

    # probing --------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.files["serving-ca.crt"]))
        ctx.load_cert_chain(str(self.files["admin.crt"]), str(self.files["admin.key"]))
        return ctx

    def _get(self, path: str) -> bytes:
        with urllib.request.urlopen(
            f"{self.host}{path}", context=self._ssl_context(), timeout=5
        ) as resp:
            data: bytes = resp.read()
            return data

    def _get_ok(self, path: str) -> bool:
        try:
            self._get(path)
            return True
        except (urllib.error.URLError, OSError):
            return False

    def _apiserver_ready(self) -> bool:
        return self._get_ok("/readyz")

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            result: dict[str, Any] = json.loads(resp.read())
            return result

    def _wait(
        self,
        ready: Any,
        what: str,
        proc: subprocess.Popen[bytes] | None,
        timeout: float | None = None,
    ) -> None:
        limit = timeout or START_TIMEOUT
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise ControlPlaneError(
                    f"{what} exited with {proc.returncode}; last log lines:\n{self._tail(what)}"
                )
            if ready():
                return
            time.sleep(0.1)
        raise ControlPlaneError(f"{what} not ready after {limit:.0f}s; log:\n{self._tail(what)}")

    def _tail(self, what: str) -> str:
        log = self.workdir / f"{what}.log"
        if not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-20:])


def terminate(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
