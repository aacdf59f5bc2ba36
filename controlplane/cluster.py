"""A cluster minus containers: the local control plane (`ControlPlane` with
`controllers=True`), the real kube-controller-manager and N hollow kubelets.

Decides what "a cluster" means here and what stands in for the rest:
- Pods whose spec names a node go straight to that node's kubelet (tests and the demo
  bind their Pods themselves); Pods created by controllers (a Deployment's, a
  StatefulSet's) are bound by `Binder`, a stand-in for kube-scheduler that spreads
  unscheduled Pods round-robin over the nodes through the `pods/binding` subresource —
  what a scheduler does, without the scheduling policies nobody here needs;
- no kube-proxy, no DNS, no CNI: Services are objects, not traffic.

`Cluster.start()` costs a few seconds more than the light plane (KCM and each kubelet
wait for their first sync), so tests that do not need nodes keep the light plane.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from controlplane import binaries
from controlplane.controller_manager import ControllerManager
from controlplane.hollow_node import HollowNode
from controlplane.server import ControlPlane


class Binder:
    """Binds every Pod without `spec.nodeName` to one of `nodes`, round-robin (a
    kube-scheduler stand-in; polls every `interval` seconds)."""

    def __init__(self, client: Any, nodes: list[str], interval: float = 0.5) -> None:
        self.client = client
        self.nodes = nodes
        self.interval = interval
        self._next = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="binder", daemon=True)

    def start(self) -> Binder:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.bind_pending()
            except Exception:
                continue

    def bind_pending(self) -> int:
        pods = self.client.get("/api/v1/pods", {"fieldSelector": "spec.nodeName="})
        bound = 0
        for pod in pods.get("items") or []:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            node = self.nodes[self._next % len(self.nodes)]
            self._next += 1
            try:
                self.client.create(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/binding",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": meta["name"], "uid": meta["uid"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    },
                )
                bound += 1
            except Exception:
                continue
        return bound


class Cluster:
    """A `ControlPlane` plus kube-controller-manager, hollow nodes and a `Binder`."""

    def __init__(self, plane: ControlPlane, nodes: list[HollowNode]) -> None:
        self.plane = plane
        self.controller_manager = ControllerManager(plane)
        self.nodes = nodes
        self.binder = Binder(plane.client(), [n.name for n in nodes])

    @classmethod
    def start(
        cls,
        nodes: int = 2,
        workdir: Path | None = None,
        *,
        version: str = binaries.KUBERNETES_VERSION,
        extra_args: tuple[str, ...] = (),
        node_resync_seconds: int | None = None,
    ) -> Cluster:
        """`version`: the Kubernetes release of every component (kube-apiserver, KCM and the
        hollow kubelets); `extra_args`: kube-apiserver's extra flags; `node_resync_seconds`:
        the kubelets' Pod resync period when not hollownode's 10 s."""
        plane = ControlPlane.start(
            workdir, controllers=True, version=version, extra_args=extra_args
        )
        cluster = cls(
            plane,
            [
                HollowNode(plane, f"hollow-node-{i}", resync_seconds=node_resync_seconds)
                for i in range(nodes)
            ],
        )
        try:
            cluster.controller_manager.start()
            for node in cluster.nodes:
                node.start()
            cluster.binder.start()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def node(self, name: str) -> HollowNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no hollow node {name!r}")

    def node_of(self, pod: dict[str, Any]) -> HollowNode:
        """The hollow node a (bound) Pod runs on."""
        return self.node(pod["spec"]["nodeName"])

    def stop(self) -> None:
        self.binder.stop()
        for node in self.nodes:
            node.stop()
        self.controller_manager.stop()
        self.plane.stop()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
