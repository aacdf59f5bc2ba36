"""Rotation reach through the real kubelet: the time from a ClusterTrustBundle change to
the file the kubelet rewrites in a running Pod, for the three ways a Pod can project the
signer's anchors (docs/trust-consumers.md, "Which projection").

    python -m bench.rotation_reach                       # 1.37 and 1.38, 3 changes each
    python -m bench.rotation_reach --versions v1.37.2 --changes 2
    python -m bench.rotation_reach --resync 60           # a kubelet's default Pod resync

For each Kubernetes version: a node-capable cluster of its own (kube-apiserver,
kube-controller-manager and one hollow kubelet built from that release's kubelet
packages, `controlplane.cluster`), two ClusterTrustBundles with the same content — one
signer-linked, named like the project's stable bundle (`<signer>:trust-anchors`,
spec.signerName set, label `reach=live`), and one without a signerName named like the
publisher's opt-in unlinked bundle (`trust.bundle.unlinked_bundle_name`) — and one Pod
with three projected volumes:

- `by-signer`: `clusterTrustBundle: {signerName, labelSelector: {matchLabels: {reach: live}}}`;
- `by-name`: `clusterTrustBundle: {name: <signer>:trust-anchors}`;
- `by-unlinked-name`: `clusterTrustBundle: {name: <the unlinked bundle>}`.

Then `--changes` times: replace both bundles' content in place with a new root, the
linked one first (as the publisher does in a rotation), and poll the files every 0.1 s
until each holds the new root; the seconds from the first update's return to each file's
change are the figures. No signer runs: the kubelet's side alone is measured.

The hollow kubelet resyncs Pods every 10 s (`controlplane/hollownode/kubelet.go`,
`SyncFrequency`); `--resync 60` runs the same kubelet built with a real kubelet's default
of 1 min (`controlplane.binaries.hollow_node_binary`; kubelet jitters it by up to 0.5), so
a projection that follows the next resync shows up to 15 s or up to 90 s; a cached answer
shows its cache's age either way.
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
from trust.bundle import anchor_ders, normalize_bundle, stable_bundle_name, unlinked_bundle_name
from trust.ca import cert_pem, generate_ca
from trust.clustertrustbundles import bundles_path, served_version

SIGNER = "reach.example.com/serving"
FILE = "ca.pem"
POLL = 0.1
# Longer than any cache the kubelet keeps (5 min) plus a default resync (1 min, +50 %).
GIVE_UP = 900.0


PROJECTIONS = ("by-signer", "by-name", "by-unlinked-name")


@dataclass
class VersionResult:
    version: str
    resync_seconds: int
    seconds: dict[str, list[float]] = field(
        default_factory=lambda: {label: [] for label in PROJECTIONS}
    )

    def summary(self) -> dict[str, Any]:
        def stats(values: list[float]) -> dict[str, Any]:
            return {
                "seconds": [round(v, 1) for v in values],
                "median": round(statistics.median(values), 1) if values else None,
                "max": round(max(values), 1) if values else None,
            }

        return {
            "version": self.version,
            "kubelet_resync_seconds": self.resync_seconds,
            "by_signer_name": stats(self.seconds["by-signer"]),
            "by_name": stats(self.seconds["by-name"]),
            "by_unlinked_name": stats(self.seconds["by-unlinked-name"]),
        }


def _log(message: str) -> None:
    print(f"[reach {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _pem(root_name: str) -> str:
    return normalize_bundle(cert_pem(generate_ca(root_name).cert)).strip() + "\n"


def reach_pod(namespace: str, name: str, unlinked: str) -> dict[str, Any]:
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
                        {
                            "name": "by-unlinked-name",
                            "mountPath": "/trust/by-unlinked-name",
                            "readOnly": True,
                        },
                    ],
                }
            ],
            "volumes": [
                volume(
                    "by-signer",
                    {"signerName": SIGNER, "labelSelector": {"matchLabels": {"reach": "live"}}},
                ),
                volume("by-name", {"name": name}),
                volume("by-unlinked-name", {"name": unlinked}),
            ],
        },
    }


def holds(files: VolumeFiles, pem: str) -> bool:
    try:
        return anchor_ders(files.text(FILE)) == anchor_ders(pem)
    except (OSError, ValueError):
        return False


def _bundle(name: str, pem: str, signer: str | None, version: str) -> dict[str, Any]:
    spec = {"trustBundle": pem, **({"signerName": signer} if signer else {})}
    return {
        "apiVersion": f"certificates.k8s.io/{version}",
        "kind": "ClusterTrustBundle",
        "metadata": {"name": name, "labels": {"reach": "live"}},
        "spec": spec,
    }


def measure(
    version: str,
    changes: int,
    resync_seconds: int | None = None,
    projections: tuple[str, ...] = PROJECTIONS,
) -> VersionResult:
    """`changes` bundle changes on a cluster of `version`, timed through `projections`."""
    result = VersionResult(version, resync_seconds or 10)
    _log(
        f"{version}: starting a cluster with one hollow kubelet ({result.resync_seconds} s resync)"
    )
    with Cluster.start(nodes=1, version=version, node_resync_seconds=resync_seconds) as cluster:
        client: Client = cluster.plane.client()
        ctb = served_version(client)
        if ctb is None:
            raise RuntimeError(f"{version} serves no ClusterTrustBundle API")
        api = bundles_path(ctb)
        name, unlinked = stable_bundle_name(SIGNER), unlinked_bundle_name(SIGNER)
        pem = _pem("reach root 0")
        client.create(api, _bundle(name, pem, SIGNER, ctb))
        client.create(api, _bundle(unlinked, pem, None, ctb))
        namespace = client.create("/api/v1/namespaces", {"metadata": {"generateName": "reach-"}})[
            "metadata"
        ]["name"]
        wait_service_account(client, namespace)
        client.create(f"/api/v1/namespaces/{namespace}/pods", reach_pod(namespace, name, unlinked))
        pod = wait_running(client, namespace, "reach", 180)
        node = cluster.node_of(pod)
        files = {label: volume_files(node, pod, label) for label in projections}
        deadline = time.monotonic() + 120
        while not all(holds(f, pem) for f in files.values()):
            if time.monotonic() > deadline:
                raise TimeoutError("the kubelet never wrote the first bundle")
            time.sleep(POLL)
        # Each change right after the previous one was seen: a cache refreshed to show it
        # is then as young as it can be, so the figures are each projection's worst case.
        for change in range(1, changes + 1):
            pem = _pem(f"reach root {change}")
            changed = 0.0
            for bundle in (name, unlinked):
                path = f"{api}/{bundle}"
                current = client.get(path)
                current["spec"]["trustBundle"] = pem
                client.replace(path, current)
                changed = changed or time.monotonic()
            seen: dict[str, float] = {}
            while len(seen) < len(files) and time.monotonic() - changed < GIVE_UP:
                for label, projected in files.items():
                    if label not in seen and holds(projected, pem):
                        seen[label] = time.monotonic() - changed
                time.sleep(POLL)
            for label in projections:
                result.seconds[label].append(seen.get(label, float("inf")))
            _log(
                f"{version}: change {change}: "
                + ", ".join(f"{label} {result.seconds[label][-1]:.1f} s" for label in projections)
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
    parser.add_argument(
        "--resync",
        type=int,
        default=None,
        help="the hollow kubelet's Pod resync in seconds (default: hollownode's 10; a real "
        "kubelet's default is 60)",
    )
    parser.add_argument(
        "--projections",
        default=",".join(PROJECTIONS),
        help="which projections to time (comma-separated; by-name on a kubelet <= 1.37 waits "
        "out its 5 min cache at every change)",
    )
    args = parser.parse_args(argv)
    projections = tuple(p for p in args.projections.split(",") if p)
    if not projections or set(projections) - set(PROJECTIONS):
        parser.error(f"--projections: some of {', '.join(PROJECTIONS)}")
    for version in (v for v in args.versions.split(",") if v):
        result = measure(version, args.changes, args.resync, projections)
        print(json.dumps(result.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
