"""`service-serving-signer run` as a child process: the one process helper of the demo,
the integration tests and the soak scenarios — the real CLI, real signals, the log in a
file, metrics and health on free loopback ports."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane.server import free_port

PRODUCT_SIGNER = "kubernetes.io/service-serving"


class ProcessExited(RuntimeError):
    """The process ended while something waited for it to become ready."""


def eventually(probe: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    """Poll `probe` until it is true or `timeout` seconds pass; its last answer."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(interval)
    return probe()


def http_get(url: str) -> tuple[int, str]:
    """(status, body) of a GET; (0, "") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return int(resp.status), resp.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()
    except OSError:
        return 0, ""


class SignerProcess:
    """One `run` process. `ca_dir` holds `ca.key`, `ca.crt` and `trust-bundle.pem` (from
    `trust.ca.write_ca`); with `key_and_cert=False` only the bundle is passed (a
    publisher-only run), with `ca_dir=None` no material flag at all (an injector, or a
    managed CA). `stop()` is idempotent; with `log_format="json"` the log is JSON lines."""

    host = "127.0.0.1"  # where the ops servers listen, as a URL host (`[::1]` for IPv6)

    def __init__(
        self,
        kubeconfig: Path | str,
        ca_dir: Path | None,
        log_path: Path,
        *args: str,
        signer_name: str | None = PRODUCT_SIGNER,
        host: str = "127.0.0.1",
        key_and_cert: bool = True,
        log_format: str = "json",
    ) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_path
        self.host = f"[{host}]" if ":" in host else host
        material: list[str] = []
        if ca_dir is not None:
            if key_and_cert:
                material += [
                    f"--service-serving-key={ca_dir / 'ca.key'}",
                    f"--service-serving-cert={ca_dir / 'ca.crt'}",
                ]
            material.append(f"--service-serving-trust-bundle={ca_dir / 'trust-bundle.pem'}")
        self.args = [
            sys.executable,
            "-m",
            "cli",
            "run",
            f"--kubeconfig={kubeconfig}",
            *material,
            *([f"--signer-name={signer_name}"] if signer_name else []),
            f"--metrics-bind-address={self.host}:{self.metrics_port}",
            f"--health-probe-bind-address={self.host}:{self.health_port}",
            f"--log-format={log_format}",
            *args,
        ]
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, path: str) -> str:
        port = self.metrics_port if path == "/metrics" else self.health_port
        return f"http://{self.host}:{port}{path}"

    def get(self, path: str) -> tuple[int, str]:
        return http_get(self.url(path))

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def wait_ready(self, timeout: float) -> None:
        """Until /readyz answers 200; `ProcessExited` if the process ends first,
        `TimeoutError` after `timeout` seconds (both carry the log's tail)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                tail = "\n".join(self.log_tail())
                raise ProcessExited(f"the signer exited with status {self.proc.returncode}\n{tail}")
            if self.ready():
                return
            time.sleep(0.2)
        raise TimeoutError(
            f"the signer's /readyz after {timeout:.0f}s\n" + "\n".join(self.log_tail())
        )

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
        """SIGTERM, then SIGKILL after 30 s; the exit status."""
        self.terminate()
        try:
            code = self.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.wait(10)
        self._log.close()
        return code

    def log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def log_tail(self, lines: int = 15) -> list[str]:
        return self.log_lines()[-lines:]

    def json_logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_lines() if line.strip()]
