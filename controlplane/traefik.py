"""Traefik as a Gateway API data plane beside the local control plane.

Decides how Traefik runs here: its Kubernetes Gateway provider on the experimental
channel (it then also watches TCPRoutes and TLSRoutes, so the experimental CRDs must be
installed: `controlplane.gateway_api.install(..., channel="experimental")`), talking to
the plane with its admin kubeconfig (`KUBECONFIG`, Traefik's out-of-cluster client);
two entry points, both on 127.0.0.1 only — `web` (plain HTTP, the port a Gateway
listener names) and `traefik` (`/ping`, how readiness is seen); no version check and no
usage reporting (no network but loopback); the log in the plane's work directory.

Traefik resolves a Service's backends from its EndpointSlices, and kube-apiserver
refuses loopback addresses there; a Service annotated `traefik.io/service.nativelb:
"true"` is dialled at its ClusterIP instead, which this control plane allocates from a
loopback /24 (`controlplane.server`), so a test's backend listens on the ClusterIP.

The binary is `controlplane.binaries.traefik()` (built once from the Go module proxy).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Any

from controlplane import binaries
from controlplane.child import ChildProcess
from controlplane.server import ControlPlane, free_port

CONTROLLER_NAME = "traefik.io/gateway-controller"
NATIVE_LB_ANNOTATION = "traefik.io/service.nativelb"


class Traefik(ChildProcess):
    """One Traefik process for `plane`; `web_port` is the Gateway listener's port."""

    what = "traefik"

    def __init__(self, plane: ControlPlane, *, log_level: str = "INFO") -> None:
        super().__init__(plane, plane.workdir / f"traefik-{free_port()}.log")
        self.binary = binaries.traefik()
        self.web_port = free_port()
        self.ping_port = free_port()
        self.log_level = log_level

    def args(self) -> list[str]:
        return [
            str(self.binary),
            "--global.checkNewVersion=false",
            "--global.sendAnonymousUsage=false",
            f"--entryPoints.web.address=127.0.0.1:{self.web_port}",
            f"--entryPoints.traefik.address=127.0.0.1:{self.ping_port}",
            "--ping=true",
            "--providers.kubernetesGateway=true",
            "--providers.kubernetesGateway.experimentalChannel=true",
            "--providers.kubernetesGateway.statusAddress.ip=127.0.0.1",
            f"--log.level={self.log_level}",
        ]

    def env(self) -> dict[str, str]:
        # Traefik's out-of-cluster client reads KUBECONFIG; without the in-cluster
        # variables it would not look there.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
        env["KUBECONFIG"] = str(self.plane.kubeconfig)
        return env

    def start(self) -> Traefik:
        self._launch()
        return self

    def ready(self, client: Any) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ping_port}/ping", timeout=2) as r:
                return int(r.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.web_port}{path}"

    def __enter__(self) -> Traefik:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
