"""The signers under test, each a separate OS process so CPU and RSS are measured alike.

* `OurSigner`: `service-serving-signer run --leader-elect=false` with a throw-away CA, the
  client QPS/burst raised to 1000/2000 (the same as the Go peer's), metrics and health on
  free loopback ports. Ready when `/readyz` answers 200 (informers synced, material loaded).
* `PeerSigner`: the `peer-signer` binary (`bench/peer/main.go`, the Kubernetes project's
  hermetic test signer). Ready when it has published its ClusterTrustBundle, which it does
  only after its informer synced.
* `KcmSigner`: the `kcm-signer` binary (`bench/kcmsigner`, a module of its own): shaped
  like one of kube-controller-manager's certificate signers — client-go, a shared
  informer, the certificate controller's rate-limited work queue, 5 workers, 20 QPS / 30
  burst, protobuf, UpdateStatus. Ready when it prints `ready` (informer synced).
* `CeilingSigner`: the `ceiling-signer` binary (`bench/ceiling/main.go`): client-go, 16
  workers, certificates pre-signed before the clock, JSON or protobuf. Ready when it
  prints `ready` (informer synced).

The Go programs are built on first use into the control-plane cache, like the peer, and
rebuilt when their `main.go` changes (`go_tool`: a sha256 of the source sits beside the
binary), so a stale binary from an older checkout is never measured.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Self

from controlplane import ControlPlane, binaries
from controlplane.server import free_port, http_ok
from kube.client import Client, is_not_found, path_segment
from trust.ca import write_ca

OUR_SIGNER_NAME = "kubernetes.io/service-serving"
PEER_SIGNER_NAME = "bench.example.com/go-peer"
KCM_SIGNER_NAME = "bench.example.com/kcm-shaped"
KCM_QPS, KCM_BURST, KCM_WORKERS = 20, 30, 5  # kube-controller-manager's client and signers
QPS, BURST = 1000, 2000
CEILING_WORKERS = 16
GO_SOURCES = {
    "peer-signer": "peer",
    "ceiling-signer": "ceiling",
    "bench-populate": "populate",
    "kcm-signer": "kcmsigner",
}


class BenchedProcessError(RuntimeError):
    pass


class BenchedProcess:
    """A process the bench measures (ours, the Go peer or the ceiling writer), its log in
    `workdir`. Not `controlplane.process.SignerProcess`: that one is only ours, with its ops
    servers; this one is CPU-timed by pid and stopped the same way for all three."""

    name = "signer"
    args: list[str]  # the command line, set by each kind's constructor

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> Self:
        self._spawn(self.args)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _spawn(self, args: list[str]) -> None:
        self._log = open(self.workdir / f"{self.name}.log", "ab")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT)

    def _ready(self) -> bool:
        raise NotImplementedError

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BenchedProcessError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}"
                )
            if self._ready():
                return
            time.sleep(0.1)
        raise BenchedProcessError(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        path = self.workdir / f"{self.name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL (fault tests)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cli_path() -> str:
    """The `service-serving-signer` entry point of this venv."""
    beside = Path(sys.executable).with_name("service-serving-signer")
    if beside.exists():
        return str(beside)
    found = shutil.which("service-serving-signer")
    if found is None:
        raise BenchedProcessError("service-serving-signer is not installed in this venv")
    return found


class OurSigner(BenchedProcess):
    name = "service-serving-signer"

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        workers: int = 4,
        signer_name: str = OUR_SIGNER_NAME,
        extra_args: tuple[str, ...] = (),
        ca_dir: Path | None = None,
        kubeconfig: Path | None = None,
        qps: float = QPS,
        burst: int = BURST,
        cli: str | None = None,
    ) -> None:
        super().__init__(workdir)
        self.workers = workers
        self.ca_dir = ca_dir or workdir / "ca"
        if not (self.ca_dir / "ca.key").exists():
            write_ca(self.ca_dir)
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.args = [
            cli or cli_path(),
            "run",
            f"--kubeconfig={kubeconfig or plane.kubeconfig}",
            f"--service-serving-key={self.ca_dir / 'ca.key'}",
            f"--service-serving-cert={self.ca_dir / 'ca.crt'}",
            f"--service-serving-trust-bundle={self.ca_dir / 'trust-bundle.pem'}",
            f"--signer-name={signer_name}",
            "--leader-elect=false",
            f"--concurrent-syncs={workers}",
            f"--kube-api-qps={qps}",
            f"--kube-api-burst={burst}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            *extra_args,
        ]

    def _ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.health_port}/readyz")

    def healthz(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.health_port}/healthz")

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text: str = resp.read().decode()
            return text

    def metric(self, name: str, labels: str = "") -> float:
        """Sum of the samples of `name` whose label text contains `labels`."""
        total = 0.0
        pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$")
        for line in self.metrics().splitlines():
            m = pattern.match(line)
            if m and labels in (m.group(1) or ""):
                total += float(m.group(2))
        return total


class PeerSigner(BenchedProcess):
    name = "peer-signer"

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        signer_name: str = PEER_SIGNER_NAME,
        kubeconfig: Path | None = None,
    ) -> None:
        super().__init__(workdir)
        self.client: Client = plane.client()
        self.signer_name = signer_name
        self.bundle = signer_name.replace("/", ":", 1) + ":primary-bundle"
        # Each program's own command line.
        self.args = [
            str(go_tool("peer-signer")),
            f"--kubeconfig={kubeconfig or plane.kubeconfig}",
            f"--signer-name={signer_name}",
            f"--kube-api-qps={QPS}",
            f"--kube-api-burst={BURST}",
        ]

    def _ready(self) -> bool:
        try:
            self.client.get(
                f"/apis/certificates.k8s.io/v1/clustertrustbundles/{path_segment(self.bundle)}"
            )
            return True
        except Exception as err:
            if is_not_found(err):
                return False
            raise


class KcmSigner(BenchedProcess):
    """The kube-controller-manager-shaped Go signer (bench/kcmsigner), with a CA of its own."""

    name = "kcm-signer"

    def __init__(
        self,
        workdir: Path,
        *,
        kubeconfig: Path,
        signer_name: str = KCM_SIGNER_NAME,
        workers: int = KCM_WORKERS,
        qps: float = KCM_QPS,
        burst: int = KCM_BURST,
    ) -> None:
        super().__init__(workdir)
        self.workers = workers
        ca_dir = workdir / "kcm-ca"
        if not (ca_dir / "ca.key").exists():
            write_ca(ca_dir)
        self.args = [
            str(go_tool("kcm-signer")),
            f"--kubeconfig={kubeconfig}",
            f"--signer-name={signer_name}",
            f"--ca-cert={ca_dir / 'ca.crt'}",
            f"--ca-key={ca_dir / 'ca.key'}",
            f"--workers={workers}",
            f"--kube-api-qps={qps}",
            f"--kube-api-burst={burst}",
        ]

    def _ready(self) -> bool:
        path = self.workdir / f"{self.name}.log"
        return path.exists() and "ready" in path.read_text(errors="replace").splitlines()


class CeilingSigner(BenchedProcess):
    """The Go ceiling: pre-signed statuses for one namespace's PCRs (see bench/ceiling)."""

    name = "ceiling-signer"

    def __init__(
        self,
        plane: ControlPlane,
        workdir: Path,
        *,
        namespace: str,
        statuses: Mapping[str, object],
        content_type: str = "json",
        verb: str = "put",
        workers: int = CEILING_WORKERS,
    ) -> None:
        super().__init__(workdir)
        self.name = f"ceiling-signer-{content_type}-{verb}"
        self.workers = workers
        config = workdir / f"{self.name}.json"
        config.write_text(
            json.dumps(
                {"kubeconfig": str(plane.kubeconfig), "namespace": namespace, "statuses": statuses}
            )
        )
        self.args = [
            str(go_tool("ceiling-signer")),
            f"--config={config}",
            f"--workers={workers}",
            f"--content-type={content_type}",
            f"--verb={verb}",
        ]

    def _ready(self) -> bool:
        path = self.workdir / f"{self.name}.log"
        return path.exists() and "ready" in path.read_text(errors="replace").splitlines()


def go_tool(name: str) -> Path:
    """The benchmark's Go program `name`, (re)built when absent or its source changed."""
    directory = Path(__file__).with_name(GO_SOURCES[name])
    # main.go, then the module files of a program that pins its own (kcm-signer).
    content = b"".join(
        (directory / f).read_bytes()
        for f in ("main.go", "go.mod", "go.sum")
        if (directory / f).exists()
    )
    digest = hashlib.sha256(content).hexdigest()
    built = binaries.find(name)
    stamp = binaries.cache_dir() / f"{name}.sha256"
    if built is not None and stamp.exists() and stamp.read_text().strip() == digest:
        return built
    if built is not None and built.parent == binaries.cache_dir():
        built.unlink()  # build-binaries.sh keeps an existing binary
    path = binaries.tool(name)
    if path.parent == binaries.cache_dir():
        stamp.write_text(digest + "\n")
    return path
