"""A hostile tenant against the injector (issue 30, item 1): one labelled ConfigMap whose
PKCS#12 truststore claims 2^31-1 KDF iterations, and N labelled 1 MB ConfigMaps, all
selecting a ClusterTrustBundle.

Run: `.venv/bin/python -m bench.injector_tenant [--configmaps 300] [--size 1048576]`.
On the local control plane it runs `service-serving-signer run --controllers=injector`
with leader election on, settles, and records its RSS (`baseline`); then creates the
ConfigMaps while polling `/readyz` every 0.5 s and the leader Lease's `renewTime`. It
reports the RSS after the injector wrote every ConfigMap and settled, how many `/readyz`
polls failed, the longest gap between two observed Lease renewals, and whether every
ConfigMap holds the bundle. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from bench.harness import create_namespace, parallel, rss_bytes
from bench.signers import cli_path
from controlplane import ControlPlane
from controlplane.server import free_port, http_ok
from kube.client import Client
from trust.bundle import normalize_bundle
from trust.ca import generate_ca
from trust.consumers import ANNOTATION, LABEL, TRUSTSTORE_ANNOTATION, TRUSTSTORE_PASSWORD_ANNOTATION
from trust.truststore import java_truststore

SETTLE = 15.0
SIGNER = "example.com/bench-tenant"
LEASE = "service-serving-signer-injector"


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(size)]) + size + content


def _children(der: bytes) -> list[bytes]:
    i = 2 + (der[1] & 0x7F if der[1] & 0x80 else 0)
    out = []
    while i < len(der):
        head = der[i + 1]
        extra = head & 0x7F if head & 0x80 else 0
        length = int.from_bytes(der[i + 2 : i + 2 + extra], "big") if extra else head
        out.append(der[i : i + 2 + extra + length])
        i += 2 + extra + length
    return out


def hostile_pkcs12(bundle: str) -> bytes:
    """A truststore whose MacData claims 2^31-1 iterations."""
    version, auth_safe, mac = _children(java_truststore(bundle, "changeit"))
    digest, salt, _ = _children(mac)
    count = _der(0x02, (2**31 - 1).to_bytes(4, "big"))
    return _der(0x30, version + auth_safe + _der(0x30, digest + salt + count))


def injector(plane: ControlPlane, workdir: Path, namespace: str) -> tuple[Any, int]:
    health = free_port()
    log = open(workdir / "injector.log", "ab")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [
            cli_path(),
            "run",
            "--controllers=injector",
            f"--kubeconfig={plane.kubeconfig}",
            f"--leader-elect-resource-namespace={namespace}",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not http_ok(f"http://127.0.0.1:{health}/readyz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"injector not ready; see {log.name}")
        time.sleep(0.2)
    return proc, health


class Watch(threading.Thread):
    """Polls /readyz and the Lease until stopped."""

    def __init__(self, client: Client, health: int, namespace: str) -> None:
        super().__init__(daemon=True)
        self.client, self.health, self.namespace = client, health, namespace
        self.stop = threading.Event()
        self.polls = self.failed = 0
        self.renewals: list[float] = []

    def run(self) -> None:
        last = ""
        while not self.stop.wait(0.5):
            self.polls += 1
            if not http_ok(f"http://127.0.0.1:{self.health}/readyz"):
                self.failed += 1
            lease = self.client.get(
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{LEASE}"
            )
            renew = str(lease["spec"].get("renewTime", ""))
            if renew != last:
                last = renew
                self.renewals.append(datetime.fromisoformat(renew).timestamp())

    def longest_gap(self) -> float:
        gaps = [b - a for a, b in zip(self.renewals, self.renewals[1:], strict=False)]
        return round(max(gaps, default=0.0), 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configmaps", type=int, default=300)
    parser.add_argument("--size", type=int, default=1 << 20)
    args = parser.parse_args(argv)
    plane = ControlPlane.start()
    result: dict[str, Any] = {"configmaps": args.configmaps, "bytes_each": args.size}
    bundle = normalize_bundle(generate_ca("bench tenant").cert.public_bytes(Encoding.PEM).decode())
    try:
        client = plane.client()
        home = create_namespace(client, "injector")
        client.create(
            "/apis/certificates.k8s.io/v1beta1/clustertrustbundles",
            {
                "metadata": {"name": f"{SIGNER.replace('/', ':')}:bench"},
                "spec": {"signerName": SIGNER, "trustBundle": bundle},
            },
        )
        selector = json.dumps({"signerName": SIGNER, "labelSelector": {}})
        with tempfile.TemporaryDirectory(prefix="injector-tenant-") as tmp:
            proc, health = injector(plane, Path(tmp), home)
            watch = Watch(client, health, home)
            try:
                time.sleep(SETTLE)
                result["baseline_rss_mib"] = rss_bytes(proc.pid) / 2**20
                watch.start()
                tenant = create_namespace(client, "tenant")
                store = base64.b64encode(hostile_pkcs12(bundle)).decode()
                client.create(
                    f"/api/v1/namespaces/{tenant}/configmaps",
                    {
                        "metadata": {
                            "name": "kdf-bomb",
                            "labels": {LABEL: "true"},
                            "annotations": {
                                ANNOTATION: selector,
                                TRUSTSTORE_ANNOTATION: "truststore.p12",
                                TRUSTSTORE_PASSWORD_ANNOTATION: "changeit",
                            },
                        },
                        "binaryData": {"truststore.p12": store},
                    },
                )
                payload = "x" * (args.size - 4096)
                started = time.monotonic()

                def create(i: int) -> None:
                    client.create(
                        f"/api/v1/namespaces/{tenant}/configmaps",
                        {
                            "metadata": {
                                "name": f"big-{i}",
                                "labels": {LABEL: "true"},
                                "annotations": {ANNOTATION: selector},
                            },
                            "data": {"ca.crt": payload},
                        },
                    )

                parallel(create, args.configmaps, threads=4)
                result["create_seconds"] = round(time.monotonic() - started, 1)

                def done() -> int:
                    items = client.get(f"/api/v1/namespaces/{tenant}/configmaps")["items"]
                    return sum((i.get("data") or {}).get("ca.crt") == bundle for i in items)

                deadline = time.monotonic() + 600
                while (held := done()) < args.configmaps + 1 and time.monotonic() < deadline:
                    time.sleep(2)
                result["converged_seconds"] = round(time.monotonic() - started, 1)
                result["holding_bundle"] = held
                time.sleep(SETTLE)
                result["after_rss_mib"] = rss_bytes(proc.pid) / 2**20
                result["rss_delta_mib"] = result["after_rss_mib"] - result["baseline_rss_mib"]
            finally:
                watch.stop.set()
                watch.join(5)
                proc.terminate()
                proc.wait(30)
            result["readyz_polls"] = watch.polls
            result["readyz_failed"] = watch.failed
            result["lease_renewals_seen"] = len(watch.renewals)
            result["lease_longest_gap_seconds"] = watch.longest_gap()
    finally:
        plane.stop()
    for key, value in list(result.items()):
        if key.endswith("_mib"):
            result[key] = round(value, 1)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
