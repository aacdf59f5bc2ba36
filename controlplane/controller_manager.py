"""The real kube-controller-manager beside a local control plane.

Decides how KCM runs here: its default controller set (`--controllers=*`: ServiceAccount
and token controllers, the garbage collector, namespace deletion, the root-CA publisher
that writes `kube-root-ca.crt`, the PodCertificateRequest cleaner, the Deployment /
ReplicaSet / StatefulSet controllers, node lifecycle, ...), leader election off (one
instance), no serving port (`--secure-port=0`: nothing listens, so nothing to secure), the
admin identity from the plane's kubeconfig with one client for all controllers (as
`--use-service-account-credentials=false`, KCM's default), the plane's service-account
key for the legacy token controller and the plane's serving CA as the root CA that Pods
get in `kube-root-ca.crt`.

Ready means: the namespace `default` has its `default` ServiceAccount and its
`kube-root-ca.crt` ConfigMap (the two things a Pod with a ServiceAccount volume needs).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import IO, Any

from controlplane import binaries
from controlplane.server import START_TIMEOUT, ControlPlane, ControlPlaneError, terminate


class ControllerManager:
    """One kube-controller-manager process for `plane`; `stop()` ends it."""

    def __init__(self, plane: ControlPlane, *, extra_args: tuple[str, ...] = ()) -> None:
        self.plane = plane
        self.binary = binaries.tool("kube-controller-manager")
        self.log_path = plane.workdir / "kube-controller-manager.log"
        self.extra_args = extra_args
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def args(self) -> list[str]:
        files = self.plane.files
        return [
            str(self.binary),
            f"--kubeconfig={self.plane.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "--controllers=*",
            f"--service-account-private-key-file={files['sa.key']}",
            f"--root-ca-file={files['serving-ca.crt']}",
            f"--service-cluster-ip-range={self.plane.service_cidr}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--v=1",
            *self.extra_args,
        ]

    def start(self) -> ControllerManager:
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(self.args(), stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        client = self.plane.client()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise ControlPlaneError(
                    f"kube-controller-manager exited with {self._proc.returncode}:\n{self.tail()}"
                )
            if _exists(client, "/api/v1/namespaces/default/serviceaccounts/default") and _exists(
                client, "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
            ):
                return
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-controller-manager not ready after {START_TIMEOUT:.0f}s:\n{self.tail()}"
        )

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        terminate(self._proc)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def tail(self, lines: int = 20) -> str:
        try:
            text = Path(self.log_path).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _exists(client: Any, path: str) -> bool:
    try:
        client.get(path)
        return True
    except Exception:
        return False
