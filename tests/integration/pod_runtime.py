"""A stand-in for the kubelet and the container runtime of the shipped signer's Pods.

The hollow nodes' kubelet runs no container. `Runtime` does what the kubelet and the
runtime would for the Deployment's Pods: a `ShippedSigner` for each Running Pod (on the
volumes the kubelet wrote, its ServiceAccount token, in-cluster: the signer holds
exactly the shipped RBAC), restarted when it exits on its own while its Pod runs; once
the Pod is being deleted, SIGTERM, and the Pod object goes only after the process has
exited — the runtime holds a finalizer on each Pod it runs a signer for, as the kubelet
keeps a terminating Pod until its containers have stopped. So a rollout or an uninstall
proceeds at the pace of the signers' own shutdown (a leader releases its Lease while its
RBAC is still there), not faster.

Each Pod's signer logs to `<logs>/<pod name>.log` (a restart appends); `log_tails`
reads every one, including those of signers already stopped.
"""

from __future__ import annotations

import threading
from pathlib import Path

from controlplane.cluster import Cluster
from kube.client import ApiError, Client, is_not_found
from kube.types import JSON
from tests.integration.shipped import NS, ShippedPod, ShippedSigner

PODS = f"/api/v1/namespaces/{NS}/pods"
SELECTOR = "app.kubernetes.io/name=service-serving-signer"
HELD = "test.service-serving-signer/container-running"


class Runtime:
    """The kubelet and container runtime for the signer's Pods: a `ShippedSigner` per
    Running Pod, held by a finalizer; once the Pod is being deleted, SIGTERM, and the
    finalizer removed after the process exits (the Pod object outlives its container)."""

    def __init__(self, cluster: Cluster, client: Client, logs: Path) -> None:
        self.cluster, self.client, self.logs = cluster, client, logs
        logs.mkdir(parents=True, exist_ok=True)
        self.signers: dict[str, ShippedSigner] = {}
        self.exits: list[tuple[str, int]] = []  # (Pod, exit code) of signers stopped with it
        self.restarts = 0  # a signer that exited on its own while its Pod ran
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pod-runtime")

    def start(self) -> Runtime:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.sync()
            except Exception as err:  # a read racing a delete: next round
                print(f"runtime: {err}")

    def pods(self) -> list[JSON]:
        items: list[JSON] = self.client.get(PODS, {"labelSelector": SELECTOR})["items"]
        return items

    def sync(self) -> None:
        by_uid = {p["metadata"]["uid"]: p for p in self.pods()}
        for uid in list(self.signers):
            pod = by_uid.get(uid)
            if not self.signers[uid].alive():
                # It exited on its own, not with its Pod: started again below while its
                # Pod runs, as the kubelet would.
                self.restarts += 1
                self.signers.pop(uid)
            elif pod is None or pod["metadata"].get("deletionTimestamp"):
                name = pod["metadata"]["name"] if pod else uid
                self.exits.append((name, self.signers.pop(uid).stop()))
        for uid, pod in by_uid.items():
            held = HELD in (pod["metadata"].get("finalizers") or [])
            if pod["metadata"].get("deletionTimestamp"):
                if held and uid not in self.signers:  # its container has stopped
                    self.release(pod)
                continue
            if uid in self.signers or (pod.get("status") or {}).get("phase") != "Running":
                continue
            name = pod["metadata"]["name"]
            if not held:
                self.client.patch(f"{PODS}/{name}", {"metadata": {"finalizers": [HELD]}})
            shipped = ShippedPod(pod, self.cluster.node_of(pod))
            self.signers[uid] = ShippedSigner(self.cluster, shipped, self.logs / f"{name}.log")

    def release(self, pod: JSON) -> None:
        name = pod["metadata"]["name"]
        try:
            self.client.patch(f"{PODS}/{name}", {"metadata": {"finalizers": None}})
        except ApiError as err:
            if not is_not_found(err):
                raise

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for signer in self.signers.values():
            signer.stop()
        self.signers.clear()
        for pod in self.client.get(PODS)["items"]:
            if HELD in (pod["metadata"].get("finalizers") or []):
                self.release(pod)

    def leader(self) -> ShippedSigner | None:
        return next((s for s in list(self.signers.values()) if s.leading()), None)

    def clean_exits(self) -> bool:
        """Every signer stopped with its Pod exited 0."""
        return all(code == 0 for _, code in self.exits)

    def log_tails(self, lines: int = 15) -> str:
        """The last `lines` lines of every Pod's signer log, each under its file name."""
        return "\n".join(
            f"--- {path.name} (last {lines} lines)\n"
            + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
            for path in sorted(self.logs.glob("*.log"))
        )
