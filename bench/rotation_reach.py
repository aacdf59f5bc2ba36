"""Rotation reach through the real kubelet: the time from a ClusterTrustBundle change to
the file the kubelet rewrites in a running Pod, for the two ways a Pod can project the
signer's anchors (docs/trust-consumers.md, "Which projection").

    python -m bench.rotation_reach                       # 1.37 and 1.38, 3 changes each
    python -m bench.rotation_reach --versions v1.37.2 --changes 2

For each Kubernetes version: a node-capable cluster of its own (kube-apiserver,
kube-controller-manager and one hollow kubelet built from that release's kubelet
packages, `controlplane.cluster`), a signer-linked ClusterTrustBundle named like the
project's stable bundle (`<signer>:trust-anchors`, spec.signerName set, label
`reach=live`), and one Pod with two projected volumes of it:

- `by-signer`: `clusterTrustBundle: {signerName, labelSelector: {matchLabels: {reach: live}}}`;
- `by-name`: `clusterTrustBundle: {name: <signer>:trust-anchors}`.

Then `--changes` times: replace the bundle's content in place with a new root (as the
publisher does in a rotation) and poll both files every 0.1 s until each holds the new
root; the seconds from the update's return to each file's change are the figures. No
signer runs: the kubelet's side alone is measured.

The hollow kubelet resyncs Pods every 10 s (`controlplane/hollownode/kubelet.go`,
`SyncFrequency`; a real kubelet's default is 1 min, jittered by up to 0.5), so a
projection that follows the next resync shows ~10 s here and up to 90 s on a default
kubelet; a cached answer shows its cache's age either way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from controlplane import binaries
from controlplane.cluster import Cluster
from controlplane.workload import VolumeFiles, volume_files, wait_running, wait_service_account
from kube.client import Client
from trust.bundle import anchor_ders, normalize_bundle, stable_bundle_name
from trust.ca import cert_pem, generate_ca

SIGNER = "reach.example.com/serving"
CTB_API = "/apis/certificates.k8s.io/v1/clustertrustbundles"
FILE = "ca.pem"
POLL = 0.1
# Longer than any cache the kubelet keeps (5 min) plus a default resync (1 min, +50 %).
GIVE_UP = 900.0


@dataclass
class VersionResult:
    version: str
    by_signer: list[float] = field(default_factory=list)
    by_name: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        def stats(values: list[float]) -> dict[str, Any]:
            return {
                "seconds": [round(v, 1) for v in values],
                "median": round(statistics.median(values), 1) if values else None,
                "max": round(max(values), 1) if values else None,
            }

        return {
            "version": self.version,
            "by_signer_name": stats(self.by_signer),
            "by_name": stats(self.by_name),
        }


def _log(message: str) -> None:
    print(f"[reach {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _pem(root_name: str) -> str:
    return normalize_bundle(cert_pem(generate_ca(root_name).cert)).strip() + "\n"


def reach_pod(namespace: str, name: str) -> dict[str, Any]:
    def volume(volume_name: str, source: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": volume_name,
            "projected": {"sources": [{"clusterTrustBundle": {**source, "path": FILE}}]},
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "reach", "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            # kubelet mounts only the volumes a container mounts.
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "volumeMounts": [
                        {"name": "by-signer", "mountPath": "/trust/by-signer", "readOnly": True},
                        {"name": "by-name", "mountPath": "/trust/by-name", "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                volume(
                    "by-signer",
                    {"signerName": SIGNER, "labelSelector": {"matchLabels": {"reach": "live"}}},
                ),
                volume("by-name", {"name": name}),
            ],
        },
    }


def holds(files: VolumeFiles, pem: str) -> bool:
    try:
        return anchor_ders(files.text(FILE)) == anchor_ders(pem)
    except (OSError, ValueError):
        return False


def measure(version: str, changes: int) -> VersionResult:
    result = VersionResult(version)
    _log(f"{version}: starting a cluster with one hollow kubelet")
    with Cluster.start(nodes=1, version=version) as cluster:
        client: Client = cluster.plane.client()
        name = stable_bundle_name(SIGNER)
        pem = _pem("reach root 0")
        client.create(
            CTB_API,
            {
                "apiVersion": "certificates.k8s.io/v1",
                "kind": "ClusterTrustBundle",
                "metadata": {"name": name, "labels": {"reach": "live"}},
                "spec": {"signerName": SIGNER, "trustBundle": pem},
            },
        )
        namespace = client.create("/api/v1/namespaces", {"metadata": {"generateName": "reach-"}})[
            "metadata"
        ]["name"]
        wait_service_account(client, namespace)
        client.create(f"/api/v1/namespaces/{namespace}/pods", reach_pod(namespace, name))
        pod = wait_running(client, namespace, "reach", 180)
        node = cluster.node_of(pod)
        by_signer = volume_files(node, pod, "by-signer")
        by_name = volume_files(node, pod, "by-name")
        deadline = time.monotonic() + 120
        while not (holds(by_signer, pem) and holds(by_name, pem)):
            if time.monotonic() > deadline:
                raise TimeoutError("the kubelet never wrote the first bundle")
            time.sleep(POLL)
        # Each change right after the previous one was seen: a cache refreshed to show it
        # is then as young as it can be, so the figures are each projection's worst case.
        for change in range(1, changes + 1):
            pem = _pem(f"reach root {change}")
            path = f"{CTB_API}/{name}"
            current = client.get(path)
            current["spec"]["trustBundle"] = pem
            client.replace(path, current)
            changed = time.monotonic()
            seen: dict[str, float] = {}
            while len(seen) < 2 and time.monotonic() - changed < GIVE_UP:
                for label, files in (("by-signer", by_signer), ("by-name", by_name)):
                    if label not in seen and holds(files, pem):
                        seen[label] = time.monotonic() - changed
                time.sleep(POLL)
            result.by_signer.append(seen.get("by-signer", float("inf")))
            result.by_name.append(seen.get("by-name", float("inf")))
            _log(
                f"{version}: change {change}: by signerName "
                f"{result.by_signer[-1]:.1f} s, by name {result.by_name[-1]:.1f} s"
            )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rotation_reach", description=__doc__)
    parser.add_argument(
        "--versions",
        default=f"{binaries.KUBERNETES_VERSION},{binaries.NEXT_VERSION}",
        help="comma-separated Kubernetes versions (each a cluster of its own)",
    )
    parser.add_argument("--changes", type=int, default=3, help="bundle changes per version")
    args = parser.parse_args(argv)
    for version in (v for v in args.versions.split(",") if v):
        print(json.dumps(measure(version, args.changes).summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
