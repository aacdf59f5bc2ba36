"""A hostile tenant against the injector: one labelled ConfigMap whose
PKCS#12 truststore claims 2^31-1 KDF iterations (selecting a ClusterTrustBundle), and N
labelled 1 MB ConfigMaps whose selection matches nothing (so their 1 MB `ca.crt` stays).

Run: `.venv/bin/python -m bench.injector_tenant [--configmaps 300] [--size 1048576]
[--source DIR] [--timeout SECONDS] [--no-kdf-bomb]` (`--source`: a checkout whose code
runs, e.g. an older tree from `git archive <commit> | tar -x -C DIR`; `--timeout`: how
long to wait for the injector to sync them; `--no-kdf-bomb`: the big ConfigMaps only).
On the local control plane it runs `service-serving-signer run --controllers=injector`
with leader election on, settles, and records its RSS (`baseline`); then creates the
ConfigMaps while polling `/readyz` every 0.5 s and the leader Lease's `renewTime`. It
reports the RSS once the injector has synced every big ConfigMap (its
`cabundle_injector_sync_total{kind="ConfigMap",result="empty"}`) and filled the hostile
one, settled; how many `/readyz` polls failed; and the longest time the Lease went
unrenewed. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from bench.harness import create_namespace, parallel, rss_bytes
from bench.signers import cli_path
from controlplane import ControlPlane
from controlplane.server import free_port, http_ok
from kube.client import Client
from tests.hostile import with_mac_iterations
from trust.bundle import normalize_bundle
from trust.ca import generate_ca
from trust.consumers import ANNOTATION, LABEL, TRUSTSTORE_ANNOTATION, TRUSTSTORE_PASSWORD_ANNOTATION
from trust.truststore import java_truststore

SETTLE = 15.0
SIGNER = "example.com/bench-tenant"
LEASE = "service-serving-signer-injector"


LAUNCH = "import sys; from cli.main import main; sys.argv[0] = 'service-serving-signer'; main()"


def injector(
    plane: ControlPlane, workdir: Path, namespace: str, source: Path | None
) -> tuple[Any, int, int]:
    health, metrics = free_port(), free_port()
    log = open(workdir / "injector.log", "ab")  # noqa: SIM115 - lives with the process
    command = [cli_path()] if source is None else [sys.executable, "-c", LAUNCH]
    env = {**os.environ, "PYTHONPATH": str(source)} if source is not None else None
    proc = subprocess.Popen(
        [
            *command,
            "run",
            "--controllers=injector",
            f"--kubeconfig={plane.kubeconfig}",
            f"--leader-elect-resource-namespace={namespace}",
            f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--health-probe-bind-address=127.0.0.1:{health}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=source,
        env=env,
    )
    deadline = time.monotonic() + 120
    while not http_ok(f"http://127.0.0.1:{health}/readyz"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"injector not ready; see {log.name}")
        time.sleep(0.2)
    return proc, health, metrics


def empty_syncs(metrics: int) -> float:
    """cabundle_injector_sync_total{kind="ConfigMap",result=~"empty|invalid"}: syncs that
    wrote nothing (a tenant's own long selector is `invalid` in a checkout that bounds
    it, `empty` in one that kept it whole); 0 when unreadable."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("cabundle_injector_sync_total{")
            and 'kind="ConfigMap"' in line
            and ('result="empty"' in line or 'result="invalid"' in line)
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def own_selector(i: int) -> str:
    """Tenant ConfigMap `i`'s own selector, ~3.9 KB, distinct from every other one's (a
    signer nothing publishes: it selects nothing, so nothing is written)."""
    labels = {f"k{j:03d}": f"{i:08d}-{j:03d}" for j in range(150)}
    selector = {"signerName": "example.com/none", "labelSelector": {"matchLabels": labels}}
    return json.dumps(selector, separators=(",", ":"))[:4000]


class Watch(threading.Thread):
    """Polls /readyz and the Lease until stopped."""

    def __init__(self, client: Client, health: int, namespace: str) -> None:
        super().__init__(daemon=True)
        self.client, self.health, self.namespace = client, health, namespace
        self.stop = threading.Event()
        self.polls = self.failed = 0
        self.renewals: list[float] = []
        self.ended = 0.0

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
        self.ended = time.time()

    def longest_gap(self, *, from_first_renewal: bool = False) -> float:
        """The longest time the Lease went unrenewed, up to the end of the watch (from the
        first renewal seen during the watch: not from the value a previous process left)."""
        times = [*self.renewals[1 if from_first_renewal else 0 :], self.ended]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        return round(max(gaps, default=0.0), 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--scenario",
        choices=("content", "metadata"),
        default="content",
        help="content: the KDF bomb and big labelled ConfigMaps; metadata: the mark label, "
        "managedFields and 10,000 tenant ConfigMaps (BENCH_BEFORE=<checkout> too)",
    )
    parser.add_argument("--marked", type=int, default=100)
    parser.add_argument("--bloated", type=int, default=50)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--configmaps", type=int, default=300)
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--no-kdf-bomb", dest="kdf_bomb", action="store_false", help="only the big ConfigMaps"
    )
    args = parser.parse_args(argv)
    if args.scenario == "metadata":
        return metadata_main(args)
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
            proc, health, metrics = injector(plane, Path(tmp), home, args.source)
            watch = Watch(client, health, home)
            try:
                time.sleep(SETTLE)
                result["baseline_rss_mib"] = rss_bytes(proc.pid) / 2**20
                watch.start()
                tenant = create_namespace(client, "tenant")
                store = base64.b64encode(
                    with_mac_iterations(java_truststore(bundle, "changeit"), 2**31 - 1)
                ).decode()
                bombs = 1 if args.kdf_bomb else 0
                for _ in range(bombs):
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
                # Selecting nothing: the injector keeps their 1 MB ca.crt (an empty
                # selection never drops a value), the worst case for a cache of content.
                nothing = json.dumps({"name": "no-such-bundle"})
                started = time.monotonic()

                def create(i: int) -> None:
                    client.create(
                        f"/api/v1/namespaces/{tenant}/configmaps",
                        {
                            "metadata": {
                                "name": f"big-{i}",
                                "labels": {LABEL: "true"},
                                "annotations": {ANNOTATION: nothing},
                            },
                            "data": {"ca.crt": payload},
                        },
                    )

                parallel(create, args.configmaps, threads=4)
                result["create_seconds"] = round(time.monotonic() - started, 1)

                def bomb_holds_bundle() -> bool:
                    path = f"/api/v1/namespaces/{tenant}/configmaps/kdf-bomb"
                    return bool((client.get(path).get("data") or {}).get("ca.crt") == bundle)

                deadline = time.monotonic() + args.timeout
                while time.monotonic() < deadline:
                    synced = empty_syncs(metrics) >= args.configmaps
                    if synced and (not bombs or bomb_holds_bundle()):
                        break
                    time.sleep(2)
                result["synced_seconds"] = round(time.monotonic() - started, 1)
                result["big_synced"] = int(empty_syncs(metrics))
                result["bomb_holds_bundle"] = bool(bombs) and bomb_holds_bundle()
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


# --- the metadata scenario: what a tenant writes besides content ---------------------------

MARK_LABEL = "service-serving-signer/ca-injected"
CM = "/api/v1/namespaces/{}/configmaps"
TARGET_MARK_MIB = 20.0
TARGET_RECORD_BYTES = 2048


def peak_rss_bytes(pid: int) -> int:
    """VmHWM: the most the process has held (what an OOM kill is about)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def marked_left(client: Client, namespace: str) -> int:
    """How many ConfigMaps of `namespace` still bear the mark (one object per page)."""
    left = 0
    params: dict[str, Any] = {"labelSelector": f"{MARK_LABEL}=true", "limit": 1}
    while True:
        page = client.get(CM.format(namespace), params)
        left += len(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return left
        params = {**params, "continue": token}


def wait_for(check: Any, timeout: float) -> float:
    """Seconds until `check()` held, or -1 after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return round(time.monotonic() - started, 1)
        time.sleep(1)
    return -1.0


def hostile_meta(name: str, nothing: str) -> dict[str, Any]:
    """Labelled and annotated (selecting nothing: no writes), with every annotation the
    injector reads at the most a record would once have kept."""
    note = json.dumps({"sha256": "0" * 64, "anchors": ["f" * 64] * 100, "notAfter": 1})
    return {
        "name": name,
        "labels": {LABEL: "true"},
        "annotations": {
            ANNOTATION: nothing,
            "service-serving-signer/injected": note.ljust(8_000),
            TRUSTSTORE_ANNOTATION: "truststore.p12",
            TRUSTSTORE_PASSWORD_ANNOTATION: "p" * 1_024,
        },
    }


class Run:
    """One checkout's injector processes against the shared control plane."""

    def __init__(self, plane: ControlPlane, client: Client, source: Path | None) -> None:
        self.plane, self.client, self.source = plane, client, source
        self.result: dict[str, Any] = {"readyz_failed": 0, "lease_longest_gap_seconds": 0.0}

    def start(self, workdir: Path, home: str) -> tuple[Any, int, Watch]:
        proc, health, metrics = injector(self.plane, workdir, home, self.source)
        watch = Watch(self.client, health, home)
        watch.start()
        return proc, metrics, watch

    def stop(self, proc: Any, watch: Watch) -> None:
        watch.stop.set()
        watch.join(5)
        proc.terminate()
        proc.wait(30)
        self.result["readyz_failed"] += watch.failed
        gap = watch.longest_gap(from_first_renewal=True)
        self.result["lease_longest_gap_seconds"] = max(
            self.result["lease_longest_gap_seconds"], gap
        )

    def mark_through_restart(self, workdir: Path, home: str, args: argparse.Namespace) -> None:
        """100 x 1 MiB ConfigMaps bearing only the mark label, created under a running
        injector, then marked again while none runs, then a start with them present."""
        client = self.client
        marked = create_namespace(client, "marked")
        proc, _, watch = self.start(workdir, home)
        time.sleep(SETTLE)
        baseline = rss_bytes(proc.pid)
        payload = "x" * ((1 << 20) - 4096)

        def create(i: int) -> None:
            client.create(
                CM.format(marked),
                {
                    "metadata": {"name": f"big-{i}", "labels": {MARK_LABEL: "true"}},
                    "data": {"blob": payload},
                },
            )

        parallel(create, args.marked, threads=4)
        released = wait_for(lambda: marked_left(client, marked) == 0, 60)
        self.result["mark_released_running_seconds"] = released
        self.result["mark_running_peak_growth_mib"] = (peak_rss_bytes(proc.pid) - baseline) / 2**20
        print(json.dumps({"partial": self.result}), file=sys.stderr, flush=True)
        self.stop(proc, watch)
        # While no injector runs, the tenant marks them all again.
        for i in range(args.marked):
            client.patch(
                f"{CM.format(marked)}/big-{i}", {"metadata": {"labels": {MARK_LABEL: "true"}}}
            )
        proc, _, watch = self.start(workdir, home)
        released = wait_for(lambda: marked_left(client, marked) == 0, 180)
        time.sleep(5)
        self.result["mark_released_after_restart_seconds"] = released
        self.result["mark_restart_peak_growth_mib"] = (peak_rss_bytes(proc.pid) - baseline) / 2**20
        self.stop(proc, watch)
        # Left in place, released (deleting 100 MiB of ConfigMaps takes the server longer
        # than the run); the next checkout's baselines include them, its deltas do not.

    def records(self, workdir: Path, home: str, args: argparse.Namespace) -> None:
        """ConfigMaps with 6,000 crafted managedFields entries, then 10,000 labelled
        tenant ConfigMaps with hostile annotations, each its own long selector: RSS per
        record."""
        client = self.client
        tenant = create_namespace(client, "records")
        nothing = json.dumps({"name": "no-such-bundle"})
        proc, metrics, watch = self.start(workdir, home)
        time.sleep(SETTLE)
        baseline = rss_bytes(proc.pid)
        seen = empty_syncs(metrics)  # an earlier checkout's ConfigMaps, synced at start
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        managers = [
            {
                "manager": f"m{i:05d}-".ljust(128, "x"),
                "operation": "Apply",
                "apiVersion": "v1",
                "time": now,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:ca.crt": {}}},
            }
            for i in range(6_000)
        ]

        def bloat(i: int) -> None:
            made = client.create(
                CM.format(tenant),
                {"metadata": {"name": f"bloat-{i}"}, "data": {"ca.crt": "x"}},
            )
            made["metadata"]["managedFields"] = managers
            made["metadata"].update(hostile_meta(f"bloat-{i}", nothing))
            client.replace(f"{CM.format(tenant)}/bloat-{i}", made)

        def create(i: int) -> None:
            # Each tenant ConfigMap with its own long selector: nothing shared between
            # records (a record that kept the text kept ~4 KB of it each).
            client.create(
                CM.format(tenant),
                {"metadata": hostile_meta(f"t-{i}", own_selector(i)), "data": {"app.conf": "x"}},
            )

        # The records first, in a fresh process: memory freed by decoding big objects
        # would otherwise be reused by them and hide their cost.
        started = time.monotonic()
        parallel(create, args.tenants, threads=8)
        self.result["tenants_create_seconds"] = round(time.monotonic() - started, 1)
        self.result["tenants_synced_seconds"] = wait_for(
            lambda: empty_syncs(metrics) >= seen + args.tenants, 600
        )
        time.sleep(SETTLE)
        tenants = rss_bytes(proc.pid)
        self.result["tenant_bytes_each"] = round((tenants - baseline) / args.tenants)
        parallel(bloat, args.bloated, threads=4)
        self.result["bloated_synced_seconds"] = wait_for(
            lambda: empty_syncs(metrics) >= seen + args.tenants + args.bloated, 120
        )
        time.sleep(SETTLE)
        self.result["bloated_bytes_each"] = round((rss_bytes(proc.pid) - tenants) / args.bloated)
        print(json.dumps({"partial": self.result}), file=sys.stderr, flush=True)
        self.stop(proc, watch)


def metadata_main(args: argparse.Namespace) -> dict[str, Any]:
    """The mark label, managedFields and 10,000 tenant ConfigMaps, for this checkout and
    (`BENCH_BEFORE=<checkout>`, or `--source`) another one, in one run on one control
    plane: one JSON line with each one's numbers and the targets."""
    before = os.environ.get("BENCH_BEFORE") or (str(args.source) if args.source else None)
    checkouts: list[tuple[str, Path | None]] = [("now", None)]
    if before:
        checkouts.insert(0, ("before", Path(before)))
    plane = ControlPlane.start()
    result: dict[str, Any] = {
        "marked": args.marked,
        "bloated": args.bloated,
        "tenants": args.tenants,
        "targets": {
            "mark_restart_peak_growth_mib": f"<= {TARGET_MARK_MIB}",
            "tenant_bytes_each": f"<= {TARGET_RECORD_BYTES}",
            "readyz_failed": "0",
            "lease_longest_gap_seconds": "<= the retry period (2 s) + one 0.5 s poll",
        },
    }
    try:
        client = plane.client()
        bundle = normalize_bundle(
            generate_ca("bench tenant").cert.public_bytes(Encoding.PEM).decode()
        )
        client.create(
            "/apis/certificates.k8s.io/v1beta1/clustertrustbundles",
            {
                "metadata": {"name": f"{SIGNER.replace('/', ':')}:bench"},
                "spec": {"signerName": SIGNER, "trustBundle": bundle},
            },
        )
        for label, source in checkouts:
            run = Run(plane, client, source)
            home = create_namespace(client, f"injector-{label}")
            with tempfile.TemporaryDirectory(prefix="injector-tenant-") as tmp:
                run.records(Path(tmp), home, args)
                run.mark_through_restart(Path(tmp), home, args)
            for key, value in list(run.result.items()):
                if key.endswith("_mib"):
                    run.result[key] = round(value, 1)
            r = run.result
            r["targets_met"] = bool(
                r["mark_restart_peak_growth_mib"] <= TARGET_MARK_MIB
                and r["tenant_bytes_each"] <= TARGET_RECORD_BYTES
                and r["readyz_failed"] == 0
                and r["lease_longest_gap_seconds"] <= 2.5
            )
            result[label] = r
            print(json.dumps({label: r}), file=sys.stderr)
    finally:
        plane.stop()
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
