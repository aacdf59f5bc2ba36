"""What distributing one trust ConfigMap to N namespaces costs: API requests,
seconds at the default client QPS, and the process's RSS.

Run: `.venv/bin/python -m bench.distribution_cost [--namespaces 10000] [--source DIR]`.
On the local control plane it creates N namespaces labelled `trust=yes`, one
ClusterTrustBundle and one distribution configuration (docs/trust-consumers.md), then
starts `service-serving-signer run --controllers=injector,trust-distributor` with default
flags (`--kube-api-qps=50 --kube-api-burst=100`) from `--source` (a checkout: the code
measured; default this one), and waits until every namespace holds a copy whose `ca.crt`
is the bundle. It reports the seconds from the process's start to that point, the
requests the API server counted meanwhile (apiserver_request_total by verb and resource,
for configmaps, events and clustertrustbundles), and the process's RSS then and settled
15 s later. Prints one JSON line.

To compare with an older tree: `git archive <commit> | tar -x -C /tmp/before` and pass
`--source /tmp/before` (the venv's packages serve both).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from bench.harness import apiserver_metrics, parallel, rss_bytes
from controlplane import ControlPlane
from controlplane.server import free_port, http_ok
from trust.bundle import normalize_bundle
from trust.ca import generate_ca

SIGNER = "example.com/distribution-bench"
HOME = "sss-home"
RESOURCES = ("configmaps", "events", "clustertrustbundles")
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
LAUNCH = "import sys; from cli.main import main; sys.argv[0] = 'service-serving-signer'; main()"


def requests(plane: ControlPlane) -> Counter[str]:
    totals: Counter[str] = Counter()
    for line in apiserver_metrics(plane).splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("resource") in RESOURCES and not labels.get("subresource"):
            totals[f"{labels['verb']} {labels['resource']}"] += int(float(m.group("value")))
    return totals


def held(client: Any, bundle: str) -> int:
    count, token = 0, ""
    while True:
        params = {"labelSelector": "service-serving-signer/distributed-from", "limit": 2000}
        if token:
            params["continue"] = token
        page = client.get("/api/v1/configmaps", params=params)
        count += sum(1 for i in page["items"] if (i.get("data") or {}).get("ca.crt") == bundle)
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return count


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=10_000)
    parser.add_argument("--source", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"namespaces": args.namespaces, "source": str(args.source)}
    plane = ControlPlane.start()
    try:
        client = plane.client()
        pem = generate_ca("distribution bench").cert.public_bytes(Encoding.PEM).decode()
        bundle = normalize_bundle(pem)
        started = time.monotonic()
        client.create("/api/v1/namespaces", {"metadata": {"name": HOME}})

        def namespace(i: int) -> None:
            client.create(
                "/api/v1/namespaces",
                {"metadata": {"name": f"d-{i:05d}", "labels": {"trust": "yes"}}},
            )

        parallel(namespace, args.namespaces, threads=16)
        result["namespaces_created_seconds"] = round(time.monotonic() - started, 1)
        client.create(
            "/apis/certificates.k8s.io/v1beta1/clustertrustbundles",
            {
                "metadata": {"name": f"{SIGNER.replace('/', ':')}:bench"},
                "spec": {"signerName": SIGNER, "trustBundle": bundle},
            },
        )
        client.create(
            f"/api/v1/namespaces/{HOME}/configmaps",
            {
                "metadata": {
                    "name": "trust",
                    "labels": {"service-serving-signer/distribute": "true"},
                    "annotations": {
                        "service-serving-signer/ca-bundle-from": json.dumps(
                            {"signerName": SIGNER, "labelSelector": {}}
                        )
                    },
                },
                "data": {
                    "configMapName": "trust-bundle.crt",
                    "namespaceSelector": json.dumps({"matchLabels": {"trust": "yes"}}),
                },
            },
        )
        before = requests(plane)
        health = free_port()
        with tempfile.TemporaryDirectory(prefix="distribution-cost-") as tmp:
            log = open(Path(tmp) / "process.log", "wb")  # noqa: SIM115 - lives with the process
            env = {**os.environ, "PYTHONPATH": str(args.source)}
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    LAUNCH,
                    "run",
                    "--controllers=injector,trust-distributor",
                    f"--kubeconfig={plane.kubeconfig}",
                    "--leader-elect=false",
                    f"--leader-elect-resource-namespace={HOME}",
                    f"--metrics-bind-address=127.0.0.1:{free_port()}",
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                ],
                cwd=args.source,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            t0 = time.monotonic()
            try:
                deadline = t0 + args.timeout
                count = 0
                while time.monotonic() < deadline:
                    if proc.poll() is not None:
                        raise RuntimeError(f"the process exited; see {log.name}")
                    count = held(client, bundle)
                    if count >= args.namespaces:
                        break
                    time.sleep(10)
                result["seconds_to_all_filled"] = round(time.monotonic() - t0, 1)
                result["filled"] = count
                result["rss_mib_at_done"] = round(rss_bytes(proc.pid) / 2**20, 1)
                after = requests(plane)
                result["requests"] = {
                    k: v - before.get(k, 0)
                    for k, v in sorted(after.items())
                    if v - before.get(k, 0) and not k.lower().startswith(("list ", "watch "))
                }
                result["ready"] = http_ok(f"http://127.0.0.1:{health}/readyz")
                time.sleep(15)
                result["rss_mib_settled"] = round(rss_bytes(proc.pid) / 2**20, 1)
            finally:
                proc.terminate()
                proc.wait(60)
    finally:
        plane.stop()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
