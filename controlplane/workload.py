"""Workload Pods for hollow nodes: a Pod that projects a `podCertificate` source (key and
chain, or one credential bundle) and the signer's ClusterTrustBundle into one volume,
and what the real kubelet wrote for it.

Decides how a Pod is judged: by `status.phase == "Running"` (a hollow kubelet reports
containers Ready early, and its Events are discarded) and by the files in its volume
directory. Used by the integration tests, the demo and the soak run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.hollow_node import HollowNode
from controlplane.kubelet import pod_manifest
from trust import keys

SIGNER_NAME = "kubernetes.io/service-serving"
VOLUME = "tls"
MOUNT = "/var/run/tls"
KEY_FILE = "tls.key"
CHAIN_FILE = "tls.crt"
BUNDLE_FILE = "ca.pem"
CREDENTIAL_FILE = "credential.pem"


def cert_volume(
    *,
    key_type: str = keys.DEFAULT_KEY_TYPE,
    annotations: dict[str, str] | None = None,
    signer_name: str = SIGNER_NAME,
    max_expiration_seconds: int | None = None,
    credential_bundle: bool = False,
    trust_bundle: bool = True,
    name: str = VOLUME,
) -> dict[str, Any]:
    """A projected volume: the `podCertificate` source (`tls.key` + `tls.crt`, or
    `credential.pem` when `credential_bundle`) and, unless `trust_bundle=False`, the
    signer's ClusterTrustBundles (`labelSelector: {}` = all of them) as `ca.pem`."""
    source: dict[str, Any] = {"signerName": signer_name, "keyType": key_type}
    if credential_bundle:
        source["credentialBundlePath"] = CREDENTIAL_FILE
    else:
        source["keyPath"] = KEY_FILE
        source["certificateChainPath"] = CHAIN_FILE
    if annotations:
        source["userAnnotations"] = annotations
    if max_expiration_seconds is not None:
        source["maxExpirationSeconds"] = max_expiration_seconds
    sources: list[dict[str, Any]] = [{"podCertificate": source}]
    if trust_bundle:
        sources.append(
            {
                "clusterTrustBundle": {
                    "signerName": signer_name,
                    "labelSelector": {},
                    "path": BUNDLE_FILE,
                }
            }
        )
    return {"name": name, "projected": {"sources": sources}}


def cert_pod(
    name: str,
    namespace: str,
    *,
    node: str | None,
    labels: dict[str, str] | None = None,
    hostname: str | None = None,
    subdomain: str | None = None,
    service_account: str = "default",
    automount_token: bool = False,
    **volume: Any,
) -> dict[str, Any]:
    """A Pod with one container mounting `cert_volume(**volume)` at /var/run/tls, bound to
    `node` (None: left for the scheduler stand-in)."""
    pod = pod_manifest(
        name,
        namespace,
        labels=labels,
        hostname=hostname,
        subdomain=subdomain,
        service_account=service_account,
        node_name=node,
    )
    spec = pod["spec"]
    spec["automountServiceAccountToken"] = automount_token
    spec["terminationGracePeriodSeconds"] = 0
    spec["containers"][0]["volumeMounts"] = [{"name": VOLUME, "mountPath": MOUNT, "readOnly": True}]
    spec["volumes"] = [cert_volume(**volume)]
    return pod


def get_pod(client: Any, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = client.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def wait_running(client: Any, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """Poll until the Pod exists (a controller may create it) and its phase is Running;
    raise TimeoutError with its last status."""
    from kube.client import is_not_found

    deadline = time.monotonic() + timeout
    pod: dict[str, Any] = {}
    while True:
        try:
            pod = get_pod(client, namespace, name)
        except Exception as err:
            if not is_not_found(err):
                raise
        if phase(pod) == "Running":
            return pod
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"Pod {namespace}/{name} not Running after {timeout:.0f}s: "
                f"phase={phase(pod)!r} status={pod.get('status')}"
            )
        time.sleep(0.25)


def wait_service_account(
    client: Any, namespace: str, name: str = "default", timeout: float = 60
) -> dict[str, Any]:
    """Wait for KCM's ServiceAccount controller (a Pod naming a missing ServiceAccount is
    refused by the ServiceAccount admission plugin)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sa: dict[str, Any] = client.get(
                f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"
            )
            return sa
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass(frozen=True)
class VolumeFiles:
    """What the kubelet wrote into one projected volume of a Pod."""

    directory: Path

    def read(self, path: str) -> bytes:
        return (self.directory / path).read_bytes()

    def text(self, path: str) -> str:
        return self.read(path).decode()

    def exists(self, path: str) -> bool:
        return (self.directory / path).is_file()

    def names(self) -> list[str]:
        """The user-visible files (not the `..data` / `..<timestamp>` machinery)."""
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.iterdir() if not p.name.startswith(".."))

    # One property a file the kubelet writes (a test reads `files.key`).
    @property
    def key(self) -> bytes:
        return self.read(KEY_FILE)

    @property
    def chain(self) -> bytes:
        return self.read(CHAIN_FILE)

    @property
    def bundle(self) -> bytes:
        return self.read(BUNDLE_FILE)

    @property
    def credential_bundle(self) -> bytes:
        return self.read(CREDENTIAL_FILE)


def volume_files(
    node: HollowNode, pod: dict[str, Any], volume: str = VOLUME, plugin: str = "projected"
) -> VolumeFiles:
    return VolumeFiles(node.volume_dir(pod["metadata"]["uid"], volume, plugin))
