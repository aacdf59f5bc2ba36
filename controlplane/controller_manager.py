"""The real kube-controller-manager beside a local control plane.

Decides how KCM runs here: the plane's own release (`plane.kube_version`), its default
controller set (`--controllers=*`: ServiceAccount and token controllers, the garbage
collector, namespace deletion, the root-CA publisher that writes `kube-root-ca.crt`, the
PodCertificateRequest cleaner, the Deployment / ReplicaSet / StatefulSet controllers, node
lifecycle, ...), leader election off (one instance), no serving port (`--secure-port=0`:
nothing listens, so nothing to secure), the admin identity from the plane's kubeconfig
with one client for all controllers (as `--use-service-account-credentials=false`, KCM's
default), the plane's service-account key for the legacy token controller and the plane's
serving CA as the root CA that Pods get in `kube-root-ca.crt`.

Ready means: the namespace `default` has its `default` ServiceAccount and its
`kube-root-ca.crt` ConfigMap (the two things a Pod with a ServiceAccount volume needs).
"""

from __future__ import annotations

from typing import Any

from controlplane import binaries
from controlplane.child import ChildProcess
from controlplane.server import ControlPlane


class ControllerManager(ChildProcess):
    """One kube-controller-manager process for `plane`; `stop()` ends it."""

    what = "kube-controller-manager"

    def __init__(self, plane: ControlPlane, *, extra_args: tuple[str, ...] = ()) -> None:
        super().__init__(plane, plane.workdir / "kube-controller-manager.log")
        self.binary = binaries.tool("kube-controller-manager", plane.kube_version)
        self.extra_args = extra_args

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
        self._launch()
        return self

    def ready(self, client: Any) -> bool:
        return _exists(client, "/api/v1/namespaces/default/serviceaccounts/default") and _exists(
            client, "/api/v1/namespaces/default/configmaps/kube-root-ca.crt"
        )


def _exists(client: Any, path: str) -> bool:
    try:
        client.get(path)
        return True
    except Exception:
        return False
