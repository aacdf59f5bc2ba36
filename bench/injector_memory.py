"""The injector's memory with many unlabelled ConfigMaps in the cluster: it
watches only ConfigMaps labelled `service-serving-signer/inject-ca-bundle=true`, so
10,000 others must not grow it.

Run: `.venv/bin/python -m bench.injector_memory [--configmaps 10000] [--size 1024]`.
On the local control plane it measures the RSS (VmRSS) of `service-serving-signer run
--controllers=injector`, settled after its caches synced:

1. `empty`: a fresh injector, no extra ConfigMaps;
2. `after_create`: the same process after N unlabelled ConfigMaps (`--size` bytes of
   data each, in 10 namespaces) were created while it ran;
3. `fresh_with`: a new injector started with the N ConfigMaps present;
4. for contrast, a bare process holding one informer of ConfigMaps with the injector's
   record transform, with the label selector (`labelled_informer`) and without it
   (`all_configmaps_informer`): what watching without the label would cost.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import create_namespace, parallel, rss_bytes
from bench.signers import cli_path
from controlplane import ControlPlane
from controlplane.server import free_port, http_ok
from injector.configmaps import LABEL_SELECTOR

SETTLE = 15.0

ALL_CONFIGMAPS = """
import sys, threading, time
from kube.client import Client
from kube.informer import Informer
from injector.configmaps import to_target
client = Client.from_kubeconfig(sys.argv[1])
selector = sys.argv[2] or None
informer = Informer(
    client, "/api/v1/configmaps", name="cm", transform=to_target, label_selector=selector
)
stop = threading.Event()
threading.Thread(target=informer.run, args=(stop,), daemon=True).start()
while not informer.has_synced():
    time.sleep(0.1)
print(len(informer.keys()), flush=True)
time.sleep(3600)
"""


def injector(plane: ControlPlane, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    health = free_port()
    log = open(workdir / f"injector-{health}.log", "ab")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(
        [
            cli_path(),
            "run",
            "--controllers=injector",
            f"--kubeconfig={plane.kubeconfig}",
            "--leader-elect=false",
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


def settled_rss(pid: int) -> int:
    time.sleep(SETTLE)
    return rss_bytes(pid)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configmaps", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args(argv)
    plane = ControlPlane.start()
    result: dict[str, Any] = {"configmaps": args.configmaps, "bytes_each": args.size}
    try:
        client = plane.client()
        with tempfile.TemporaryDirectory(prefix="injector-memory-") as tmp:
            workdir = Path(tmp)
            first, _ = injector(plane, workdir)
            try:
                result["empty_rss_mib"] = settled_rss(first.pid) / 2**20
                namespaces = [create_namespace(client, "cm") for _ in range(10)]
                payload = "x" * args.size
                started = time.monotonic()

                def create(i: int) -> None:
                    client.create(
                        f"/api/v1/namespaces/{namespaces[i % 10]}/configmaps",
                        {"metadata": {"name": f"cm-{i}"}, "data": {"payload": payload}},
                    )

                parallel(create, args.configmaps, threads=16)
                result["create_seconds"] = round(time.monotonic() - started, 1)
                result["after_create_rss_mib"] = settled_rss(first.pid) / 2**20
            finally:
                first.terminate()
                first.wait(30)
            second, _ = injector(plane, workdir)
            try:
                result["fresh_with_rss_mib"] = settled_rss(second.pid) / 2**20
            finally:
                second.terminate()
                second.wait(30)
            for label, selector in (("labelled", LABEL_SELECTOR), ("all_configmaps", "")):
                contrast = subprocess.Popen(
                    [sys.executable, "-c", ALL_CONFIGMAPS, str(plane.kubeconfig), selector],
                    stdout=subprocess.PIPE,
                )
                try:
                    assert contrast.stdout is not None
                    result[f"{label}_cached"] = int(contrast.stdout.readline())
                    result[f"{label}_informer_rss_mib"] = settled_rss(contrast.pid) / 2**20
                finally:
                    contrast.terminate()
                    contrast.wait(30)
    finally:
        plane.stop()
    for key, value in list(result.items()):
        if key.endswith("_mib"):
            result[key] = round(value, 1)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
