"""Hollow nodes: the real kubelet (kubemark's hollow kubelet, ported into
`controlplane/hollownode/` because 1.38 removed pkg/kubemark, built as `hollow-node` on
the plane's own Kubernetes release) with a fake container runtime and mounter, registered
as a Node of a local control plane.

Decides how a node runs here:
- its kubelet is the plane's release (`plane.kube_version`: 1.37, or 1.38 for the ML-DSA
  projection, or 1.36), so kubelet and kube-apiserver never skew, with the feature gates
  the plane turns on that a kubelet has too (`server.node_feature_gates`: 1.38's
  PodCertificateMLDSA, 1.36's beta projection gates);
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
from pathlib import Path
from typing import Any

from controlplane import binaries
from controlplane.child import ChildProcess
from controlplane.server import ControlPlane, free_port, node_feature_gates

VOLUME_PLUGINS = {
    "projected": "kubernetes.io~projected",
    "secret": "kubernetes.io~secret",
    "configMap": "kubernetes.io~configmap",
    "emptyDir": "kubernetes.io~empty-dir",
    "downwardAPI": "kubernetes.io~downward-api",
}


class HollowNode(ChildProcess):
    """One hollow kubelet named `name`; `start()` waits until its Node is Ready.
    `resync_seconds`: its Pod resync period (`SyncFrequency`), when not hollownode's 10 s
    (a real kubelet's default is 60): a binary of its own, `binaries.hollow_node_binary`."""

    def __init__(
        self, plane: ControlPlane, name: str, *, resync_seconds: int | None = None
    ) -> None:
        self.dir = plane.workdir / "nodes" / name
        super().__init__(plane, self.dir / "kubelet.log")
        self.what = f"hollow node {name}"
        self.name = name
        self.binary = binaries.tool(binaries.hollow_node_binary(resync_seconds), plane.kube_version)
        self.root = self.dir / "root"
        self.port = free_port()
        self.identity = plane.pki.client_cert(f"system:node:{name}", ("system:nodes",))
        self.feature_gates = node_feature_gates(plane.kube_version)

    def args(self) -> list[str]:
        gates = [f"--feature-gates={','.join(self.feature_gates)}"] if self.feature_gates else []
        return [
            str(self.binary),
            f"--kubeconfig={self.dir / 'kubeconfig'}",
            f"--name={self.name}",
            f"--root-dir={self.root}",
            f"--kubelet-port={self.port}",
            *gates,
            "--v=2",
        ]

    def start(self) -> HollowNode:
        self.root.mkdir(parents=True, exist_ok=True)
        self.plane.write_kubeconfig(self.dir / "kubeconfig", user=self.identity)
        self._launch()
        return self

    def ready(self, client: Any) -> bool:
        try:
            node = client.get(f"/api/v1/nodes/{self.name}")
        except Exception:
            return False
        conditions = (node.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # what the kubelet wrote -------------------------------------------------------------

    def pod_dir(self, pod_uid: str) -> Path:
        return self.root / "pods" / pod_uid

    def volume_dir(self, pod_uid: str, volume: str, plugin: str = "projected") -> Path:
        """The directory the kubelet populated for volume `volume` of a Pod (`plugin` is
        the volume source's field name: projected, secret, configMap, ...)."""
        return self.pod_dir(pod_uid) / "volumes" / VOLUME_PLUGINS[plugin] / volume
