"""The injector's idle RSS in a Pod, with and without the official `kubernetes` package.

`run` in a Pod reads its ServiceAccount token, CA and the API address itself
(`kube.incluster`) and never imports `kubernetes`; a kubeconfig still goes through the
official loader. This measures what that saves: `service-serving-signer run
--controllers=injector`, configured as in a Pod (`KUBERNETES_SERVICE_HOST`/`_PORT`, a
ServiceAccount token from a TokenRequest and the API server's CA, in files), no target in
the cluster, RSS (VmRSS) settled 15 s after `/readyz` — once as it runs (`ours`), once
with the official client imported first as the process did before (`official`: the
modules `kube/client.py` imported), interleaved over `--rounds`, medians.

Run: `.venv/bin/python -m bench.incluster_rss [--rounds 3]` (prints one JSON line).
`--code DIR` runs the process from another checkout (a commit before the change, as
`git worktree add DIR <commit>`), in-cluster as that code reads it, as a third column.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import create_namespace, rss_bytes
from controlplane import ControlPlane
from controlplane.server import free_port, http_ok

SETTLE = 15.0

# The process as `run` in a Pod starts it, its ServiceAccount files moved to a temporary
# directory. `official`: the modules the client imported before (kube/client.py).
IN_A_POD = """
import sys
variant, token, ca, *args = sys.argv[1:]
if variant == "official":
    import kubernetes.client, kubernetes.config, kubernetes.utils.keepalive  # noqa: F401
if variant == "code":
    from kubernetes.config import incluster_config
    incluster_config.SERVICE_TOKEN_FILENAME, incluster_config.SERVICE_CERT_FILENAME = token, ca
else:
    from kube import incluster
    incluster.TOKEN_FILE, incluster.CA_FILE = token, ca
from cli.main import main
main(["run", *args])
"""


def start(
    plane: ControlPlane, variant: str, files: Path, namespace: str, code: Path | None
) -> tuple[subprocess.Popen[bytes], Path]:
    health = free_port()
    log = files / f"{variant}-{health}.log"
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(plane.port),
        "POD_NAMESPACE": namespace,
    }
    if code is not None and variant == "code":
        env["PYTHONPATH"] = str(code)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            IN_A_POD,
            variant,
            str(files / "token"),
            str(files / "ca.crt"),
            "--controllers=injector",
            "--leader-elect=false",
            f"--metrics-bind-address=127.0.0.1:{free_port()}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(code) if code is not None and variant == "code" else None,
    )
    deadline = time.monotonic() + 120
    while not http_ok(f"http://127.0.0.1:{health}/readyz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{variant}: injector not ready; see {log}")
        time.sleep(0.2)
    return proc, log


def service_account_token(plane: ControlPlane, namespace: str) -> str:
    """A token of a ServiceAccount bound to cluster-admin (the measure is memory, not RBAC)."""
    client = plane.client()
    client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": "injector"}}
    )
    client.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"{namespace}-injector"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "injector", "namespace": namespace}],
        },
    )
    answer = client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/injector/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--code", type=Path, default=None, help="another checkout to measure")
    args = parser.parse_args(argv)
    variants = ["ours", "official", *(["code"] if args.code else [])]
    rss: dict[str, list[float]] = {v: [] for v in variants}
    plane = ControlPlane.start()
    try:
        namespace = create_namespace(plane.client(), "rss")
        with tempfile.TemporaryDirectory(prefix="incluster-rss-") as tmp:
            files = Path(tmp)
            (files / "token").write_text(service_account_token(plane, namespace))
            (files / "ca.crt").write_bytes(plane.pki.serving_ca.cert_pem)
            for _ in range(args.rounds):
                for variant in variants:
                    proc, _log = start(plane, variant, files, namespace, args.code)
                    try:
                        time.sleep(SETTLE)
                        rss[variant].append(rss_bytes(proc.pid) / 2**20)
                    finally:
                        proc.terminate()
                        proc.wait(30)
    finally:
        plane.stop()
    result: dict[str, Any] = {"rounds": args.rounds, "settle_s": SETTLE}
    for variant, values in rss.items():
        result[f"{variant}_rss_mib"] = round(statistics.median(values), 1)
        result[f"{variant}_rss_mib_all"] = [round(v, 1) for v in values]
    result["saved_mib"] = round(result["official_rss_mib"] - result["ours_rss_mib"], 1)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
