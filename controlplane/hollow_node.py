"""Hollow nodes: the real kubelet (kubemark's hollow kubelet, built as `hollow-node` from
`controlplane/hollownode/main.go`) with a fake container runtime, registered as a Node of
a local control plane.

Decides how a node runs here:
- each node has its own identity, a client certificate `CN=system:node:<name>,
  O=system:nodes` from the plane's client CA, so the Node authorizer and `NodeRestriction`
  check its requests exactly as on a real cluster;
- its kubelet root directory is `<plane workdir>/nodes/<name>` (removed on `stop()`); the
  fake runtime's socket lives in it too; the kubelet API listens on 127.0.0.1 only;
- what the kubelet wrote for a Pod's volumes is read from the root directory:
  `pods/<uid>/volumes/kubernetes.io~<plugin>/<volume>/<path>`, the same layout (and the
  same `..data` symlink swap) as on a real node.

What a hollow kubelet does not do: run containers (its runtime is fake, and it reports
containers Ready before anything "starts"), or keep Events (kubemark gives it a
`FakeRecorder`, so kubelet's own Events never reach the API). Judge a Pod by
`status.phase == "Running"` and by the files, never by Ready or by kubelet Events.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from controlplane import binaries
from controlplane.server import START_TIMEOUT, ControlPlane, ControlPlaneError, free_port, terminate

VOLUME_PLUGINS = {
    "projected": "kubernetes.io~projected",
    "secret": "kubernetes.io~secret",
    "configMap": "kubernetes.io~configmap",
    "emptyDir": "kubernetes.io~empty-dir",
    "downwardAPI": "kubernetes.io~downward-api",
}


class HollowNode:
    """One hollow kubelet named `name`; `start()` waits until its Node is Ready."""

    def __init__(self, plane: ControlPlane, name: str) -> None:
        self.plane = plane
        self.name = name
        self.binary = binaries.tool("hollow-node")
        self.dir = plane.workdir / "nodes" / name
        self.root = self.dir / "root"
        self.port = free_port()
        self.log_path = self.dir / "kubelet.log"
        self.identity = plane.pki.client_cert(f"system:node:{name}", ("system:nodes",))
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def args(self) -> list[str]:
        return [
            str(self.binary),
            f"--kubeconfig={self.dir / 'kubeconfig'}",
            f"--name={self.name}",
            f"--root-dir={self.root}",
            f"--kubelet-port={self.port}",
            "--v=2",
        ]

    def start(self) -> HollowNode:
        self.root.mkdir(parents=True, exist_ok=True)
        self.plane.write_kubeconfig(self.dir / "kubeconfig", user=self.identity)
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
                    f"hollow node {self.name} exited with {self._proc.returncode}:\n{self.tail()}"
                )
            if self.ready(client):
                return
            time.sleep(0.2)
        raise ControlPlaneError(
            f"node {self.name} not Ready after {START_TIMEOUT:.0f}s:\n{self.tail()}"
        )

    def ready(self, client: Any) -> bool:
        try:
            node = client.get(f"/api/v1/nodes/{self.name}")
        except Exception:
            return False
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        terminate(self._proc)
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        shutil.rmtree(self.root, ignore_errors=True)

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # what the kubelet wrote -------------------------------------------------------------

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / "pods" / pod_uid

    def volume_dir(self, pod_uid: str, volume: str, plugin: str = "projected") -> Path:
        """The directory the kubelet populated for volume `volume` of a Pod (`plugin` is
        the volume source's field name: projected, secret, configMap, ...)."""
        return self.pod_dir(pod_uid) / "volumes" / VOLUME_PLUGINS[plugin] / volume
