"""`service-serving-signer run` as a child process, for the manager's integration tests:
the real CLI, real signals, JSON logs in a file, metrics and health on free ports."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane.demo import http_get
from controlplane.kubelet import Kubelet, pcr_path
from controlplane.server import free_port
from kube.client import Client

PRODUCT_SIGNER = "kubernetes.io/service-serving"


def eventually(probe: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(interval)
    return probe()


class SignerProcess:
    """One `run` process. `stop()` is idempotent; the log is JSON lines."""

    host = "127.0.0.1"  # where the ops servers listen, as a URL host (`[::1]` for IPv6)

    def __init__(
        self,
        kubeconfig: Path | str,
        ca_dir: Path | None,
        log_path: Path,
        *args: str,
        signer_name: str = PRODUCT_SIGNER,
        host: str = "127.0.0.1",
        key_and_cert: bool = True,
    ) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_path
        self.host = f"[{host}]" if ":" in host else host
        files: list[str] = []  # none with ca_dir=None (--ca-mode=managed)
        if ca_dir is not None:
            if key_and_cert:
                files += [
                    f"--service-serving-key={ca_dir / 'ca.key'}",
                    f"--service-serving-cert={ca_dir / 'ca.crt'}",
                ]
            files.append(f"--service-serving-trust-bundle={ca_dir / 'trust-bundle.pem'}")
        self.args = [
            sys.executable,
            "-m",
            "manager",
            "run",
            f"--kubeconfig={kubeconfig}",
            *files,
            f"--signer-name={signer_name}",
            f"--metrics-bind-address={self.host}:{self.metrics_port}",
            f"--health-probe-bind-address={self.host}:{self.health_port}",
            "--log-format=json",
            *args,
        ]
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT)

    def url(self, path: str) -> str:
        port = self.metrics_port if path == "/metrics" else self.health_port
        return f"http://{self.host}:{port}{path}"

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.url(path))

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def metric(self, name: str, labels: str = "") -> float | None:
        code, text = self.get("/metrics")
        if code != 200:
            return None
        prefix = f"{name}{{{labels}}} " if labels else f"{name} "
        for line in text.splitlines():
            if line.startswith(prefix):
                return float(line.rsplit(" ", 1)[1])
        return None

    def leading(self) -> bool:
        return self.metric("leader_election_master_status", 'name="' + self.lease_name + '"') == 1

    @property
    def lease_name(self) -> str:
        for arg in self.args:
            if arg.startswith("--leader-elect-resource-name="):
                return arg.split("=", 1)[1]
        return "service-serving-signer"

    def issued(self) -> float:
        return self.metric("service_serving_ca_controller_requests_total", 'result="issued"') or 0.0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()

    def wait(self, timeout: float = 30.0) -> int:
        return int(self.proc.wait(timeout))

    def stop(self) -> int:
        self.terminate()
        try:
            code = self.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.wait(10)
        self._log.close()
        return code

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def json_logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_lines() if line.strip()]


def issue_one(
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    pod_name: str,
    *,
    signer_name: str = PRODUCT_SIGNER,
    service: str = "web",
) -> str:
    """Create a Pod selected by `service` (which must exist) and its PCR; return the name."""
    pod = kubelet.create_pod(pod_name, namespace, labels={"app": service})
    pcr, _ = kubelet.create_pcr(
        pod, annotations={"kubernetes.io/service-names": service}, signer_name=signer_name
    )
    return str(pcr["metadata"]["name"])


def condition_of(client: Client, namespace: str, name: str) -> str | None:
    status = client.get(pcr_path(namespace, "v1", name)).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True":
            return str(condition["type"])
    return None


def wait_issued(client: Client, namespace: str, name: str, timeout: float) -> bool:
    return eventually(lambda: condition_of(client, namespace, name) == "Issued", timeout)
