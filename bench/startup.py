"""Pod start-up through the real kubelet: what a `podCertificate` volume adds to the time
from a Pod's creation to `Running`, and where that time goes (docs/performance.md,
"Pod start-up with a certificate").

    python -m bench.startup                         # 4 nodes, 20 Pods/s, 3 rounds
    python -m bench.startup --nodes 2 --rate 10 --pods 100 --rounds 3

One plane for the whole run: kube-apiserver with APF on and the saturated scenario's
small concurrency (`bench.saturation.APF_ARGS`, 12 seats), kube-controller-manager and
`--nodes` hollow kubelets (the release's own kubelet with a fake runtime,
`controlplane.hollow_node`). The signer is ours, as a ServiceAccount bound to
cluster-admin, at the shipped client budget (`--kube-api-qps=50 --kube-api-burst=100
--concurrent-syncs=4`), so API Priority and Fairness classifies it as it would an
installed signer.

Each run creates `--pods` Pods at a steady `--rate` (spread round-robin over the nodes, so
each node starts `rate / nodes` Pods a second), alternating Pods **with** a projected
`podCertificate` volume (our signer; the Service it names selects them) and the same Pods
**without** it — the control, in the same run. Per Pod, from this process's watches (one
clock): created (the POST returned) → PodCertificateRequest created (the kubelet) →
Issued (the signer) → `Running` (the kubelet's mount retry after issuance). Runs:

- `quiet`: no other load;
- `noise`: the saturated scenario's noise (`bench.saturation.Noise`: 24 ServiceAccounts,
  48 threads LISTing 1,500 ConfigMaps) in `workload-low`, the signer there too;
- `noise+flowschema`: the same noise, config/flowcontrol applied (the signer in its own
  level, its Leases in `leader-election`).

`--rounds` rounds, the runs interleaved in each (quiet, noise, noise+flowschema, then the
next round in the reverse order). Each run records the seats every priority level had at
its end (`apiserver_flowcontrol_current_limit_seats`, borrowing included) and the noise's
LIST rate. One JSON line per run on stdout and the whole run in `--out` (default
bench/results/startup-<UTC time>.json; bench/results/ is not committed).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import apiserver_metrics
from bench.saturation import (
    APF_ARGS,
    SIGNER_ACCOUNT,
    SIGNER_NAMESPACE,
    Noise,
    account_token,
    flow_schema,
    noise_clients,
)
from bench.signers import OUR_SIGNER_NAME, BenchedProcessError, OurSigner
from controlplane import binaries
from controlplane.cluster import Cluster
from controlplane.kubelet import pod_manifest
from controlplane.workload import cert_volume, wait_service_account
from kube.client import ApiError, Client
from kube.transport import StreamCanceller
from kube.types import JSON

RESULTS = Path(__file__).with_name("results")
SERVICE = "web"
SHIPPED_QPS, SHIPPED_BURST, SHIPPED_WORKERS = 50, 100, 4
RUNS = ("quiet", "noise", "noise+flowschema")
GIVE_UP = 240.0  # a Pod not Running by then counts as not started


def _log(message: str) -> None:
    print(f"[startup {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class PodTimes:
    cert: bool
    created: float
    pcr: float | None = None
    issued: float | None = None
    running: float | None = None


@dataclass
class Observed:
    """What the watches saw, by Pod name; one lock for all."""

    pods: dict[str, PodTimes] = field(default_factory=dict)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def pod_running(self, name: str, at: float) -> None:
        with self.lock:
            times = self.pods.get(name)
            if times is not None and times.running is None:
                times.running = at
                self.lock.notify_all()

    def pcr_seen(self, pod: str, at: float, issued: bool) -> None:
        with self.lock:
            times = self.pods.get(pod)
            if times is None:
                return
            if times.pcr is None:
                times.pcr = at
            if issued and times.issued is None:
                times.issued = at

    def wait_all_running(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.lock:
            while any(t.running is None for t in self.pods.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.lock.wait(remaining)
            return True


class Watches:
    """A watch of the namespace's Pods (phase Running) and one of its
    PodCertificateRequests (created, Issued)."""

    def __init__(self, client: Client, namespace: str, observed: Observed) -> None:
        self.client = client
        self.observed = observed
        self.cancellers = [StreamCanceller(), StreamCanceller()]
        self.stop_event = threading.Event()
        self.threads = [
            threading.Thread(
                target=self._run,
                args=(f"/api/v1/namespaces/{namespace}/pods", self._pod, self.cancellers[0]),
                daemon=True,
            ),
            threading.Thread(
                target=self._run,
                args=(
                    f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests",
                    self._pcr,
                    self.cancellers[1],
                ),
                daemon=True,
            ),
        ]

    def _pod(self, obj: JSON, at: float) -> None:
        if (obj.get("status") or {}).get("phase") == "Running":
            self.observed.pod_running(obj["metadata"]["name"], at)

    def _pcr(self, obj: JSON, at: float) -> None:
        conditions = (obj.get("status") or {}).get("conditions") or []
        issued = any(c.get("type") == "Issued" and c.get("status") == "True" for c in conditions)
        self.observed.pcr_seen(str((obj.get("spec") or {}).get("podName")), at, issued)

    def _run(self, path: str, handle: Any, canceller: StreamCanceller) -> None:
        rv = str(self.client.get(path)["metadata"]["resourceVersion"])
        while not self.stop_event.is_set():
            try:
                params = {"resourceVersion": rv, "allowWatchBookmarks": True}
                for event in self.client.watch(path, params, read_timeout=120, canceller=canceller):
                    obj = event.get("object") or {}
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        handle(obj, time.monotonic())
            except ApiError:
                if self.stop_event.is_set():
                    return
                time.sleep(0.2)

    def start(self) -> Watches:
        for thread in self.threads:
            thread.start()
        time.sleep(1.0)  # both watches open before the first Pod
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for canceller in self.cancellers:
            canceller.cancel()
        for thread in self.threads:
            thread.join(timeout=10)


def pod(name: str, namespace: str, node: str, *, cert: bool) -> JSON:
    manifest = pod_manifest(name, namespace, labels={"app": SERVICE}, node_name=node)
    spec = manifest["spec"]
    spec["automountServiceAccountToken"] = False
    spec["terminationGracePeriodSeconds"] = 0
    if cert:
        spec["containers"][0]["volumeMounts"] = [
            {"name": "tls", "mountPath": "/var/run/tls", "readOnly": True}
        ]
        spec["volumes"] = [
            cert_volume(
                signer_name=OUR_SIGNER_NAME,
                annotations={"kubernetes.io/service-names": SERVICE},
                trust_bundle=False,
            )
        ]
    return manifest


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _stats(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": _quantile(values, 0.5), "p99": _quantile(values, 0.99)}


def summarise(observed: Observed) -> dict[str, Any]:
    with observed.lock:
        pods = list(observed.pods.values())
    cert = [p for p in pods if p.cert]
    plain = [p for p in pods if not p.cert]

    def spans(group: list[PodTimes], start: str, end: str) -> list[float]:
        out = []
        for p in group:
            a, b = getattr(p, start), getattr(p, end)
            if a is not None and b is not None:
                out.append(b - a)
        return out

    with_cert = _stats(spans(cert, "created", "running"))
    without = _stats(spans(plain, "created", "running"))
    return {
        "startup_with_cert": with_cert,
        "startup_without_cert": without,
        "added_p50": _diff(with_cert["p50"], without["p50"]),
        "added_p99": _diff(with_cert["p99"], without["p99"]),
        "pod_to_pcr_kubelet": _stats(spans(cert, "created", "pcr")),
        "pcr_to_issued_signer": _stats(spans(cert, "pcr", "issued")),
        "issued_to_running_kubelet": _stats(spans(cert, "issued", "running")),
        "not_running": sum(1 for p in pods if p.running is None),
    }


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def level_seats(cluster: Cluster) -> dict[str, float]:
    text = apiserver_metrics(cluster.plane)
    seats: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("apiserver_flowcontrol_current_limit_seats{"):
            labels, _, value = line.partition("} ")
            level = labels.split('priority_level="', 1)[1].split('"', 1)[0]
            seats[level] = float(value)
    return seats


@dataclass
class Setup:
    cluster: Cluster
    client: Client
    kubeconfig: Path
    noise_clients: list[Client]
    noise_namespace: str
    workdir: Path


def run_once(setup: Setup, label: str, round_: int, pods: int, rate: float) -> dict[str, Any]:
    client = setup.client
    namespace = f"startup-{label.replace('+', '-')}-{round_}"
    client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    wait_service_account(client, namespace)  # kube-controller-manager makes it
    client.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "metadata": {"name": SERVICE},
            "spec": {"selector": {"app": SERVICE}, "ports": [{"port": 443}]},
        },
    )
    nodes = [n.name for n in setup.cluster.nodes]
    observed = Observed()
    directory = setup.workdir / f"{namespace}"
    directory.mkdir(parents=True, exist_ok=True)
    noisy = label != "quiet"
    signer, restarts = start_signer(setup, directory)
    noise = Noise(setup.noise_clients, setup.noise_namespace)
    try:
        watches = Watches(client, namespace, observed).start()
        with _maybe(noise.running() if noisy else None):
            if noisy:
                time.sleep(3.0)  # the noise's queues fill
            noise_before, began = noise.done, time.monotonic()
            for i in range(pods):
                due = began + i / rate
                time.sleep(max(0.0, due - time.monotonic()))
                name = f"p-{i}"
                body = pod(name, namespace, nodes[i % len(nodes)], cert=i % 2 == 0)
                client.create(f"/api/v1/namespaces/{namespace}/pods", body)
                with observed.lock:
                    observed.pods[name] = PodTimes(cert=i % 2 == 0, created=time.monotonic())
            complete = observed.wait_all_running(GIVE_UP)
            elapsed = time.monotonic() - began
            seats = level_seats(setup.cluster)
            noise_rate = (noise.done - noise_before) / max(elapsed, 1e-9)
        watches.stop()
        limiter = signer.metric("rest_client_rate_limiter_duration_seconds_sum")
        writes = signer.metric("rest_client_rate_limiter_duration_seconds_count")
    finally:
        signer.stop()
    result = {
        "run": label,
        "round": round_,
        "pods": pods,
        "rate": rate,
        "nodes": len(nodes),
        "complete": complete,
        **summarise(observed),
        "seats": seats,
        "noise_lists_per_second": round(noise_rate, 1) if noisy else 0.0,
        "noise_rejected": noise.rejected,
        "signer_mean_budget_wait_ms": round(1000 * limiter / writes, 1) if writes else 0.0,
        "signer_restarts": restarts,
    }
    # Free the nodes for the next run (the Pods' requests stay until the cleaner's 15 min).
    client.delete(f"/api/v1/namespaces/{namespace}")
    return result


def start_signer(setup: Setup, directory: Path, attempts: int = 5) -> tuple[OurSigner, int]:
    """Ours at the shipped budget, ready; started again (as a Deployment would restart it)
    when it exits during start-up — a 429 from a saturated level ends its start-up."""
    for attempt in range(attempts):
        signer = OurSigner(
            setup.cluster.plane,
            directory,
            workers=SHIPPED_WORKERS,
            kubeconfig=setup.kubeconfig,
            qps=SHIPPED_QPS,
            burst=SHIPPED_BURST,
        ).start()
        try:
            signer.wait_ready()
            return signer, attempt
        except BenchedProcessError as err:
            signer.stop()
            _log(f"signer start-up failed ({attempt + 1}/{attempts}): {str(err).splitlines()[-1]}")
            time.sleep(2.0)
    raise BenchedProcessError(f"the signer did not start in {attempts} attempts")


@contextmanager
def _maybe(context: Any) -> Iterator[None]:
    if context is None:
        yield
    else:
        with context:
            yield


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label in RUNS:
        mine = [r for r in runs if r["run"] == label]
        if not mine:
            continue

        def med(path: tuple[str, ...], rs: list[dict[str, Any]] = mine) -> float | None:
            values = []
            for r in rs:
                v: Any = r
                for key in path:
                    v = v.get(key) if isinstance(v, dict) else None
                if isinstance(v, (int, float)):
                    values.append(float(v))
            return round(statistics.median(values), 3) if values else None

        out[label] = {
            "rounds": len(mine),
            "startup_with_cert_p50": med(("startup_with_cert", "p50")),
            "startup_with_cert_p99": med(("startup_with_cert", "p99")),
            "startup_without_cert_p50": med(("startup_without_cert", "p50")),
            "startup_without_cert_p99": med(("startup_without_cert", "p99")),
            "added_p99": med(("added_p99",)),
            "pod_to_pcr_p50": med(("pod_to_pcr_kubelet", "p50")),
            "pod_to_pcr_p99": med(("pod_to_pcr_kubelet", "p99")),
            "pcr_to_issued_p50": med(("pcr_to_issued_signer", "p50")),
            "pcr_to_issued_p99": med(("pcr_to_issued_signer", "p99")),
            "issued_to_running_p50": med(("issued_to_running_kubelet", "p50")),
            "issued_to_running_p99": med(("issued_to_running_kubelet", "p99")),
            "noise_lists_per_second": med(("noise_lists_per_second",)),
        }
    return out


def table(summary: dict[str, Any]) -> str:
    rows = [
        "| run | start-up p50 / p99 with cert | without | added p99 | Pod→PCR p50/p99 (kubelet) "
        "| PCR→Issued p50/p99 (signer) | Issued→Running p50/p99 (kubelet) | noise LISTs/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, m in summary.items():
        rows.append(
            f"| {label} | {m['startup_with_cert_p50']} / {m['startup_with_cert_p99']} s "
            f"| {m['startup_without_cert_p50']} / {m['startup_without_cert_p99']} s "
            f"| {m['added_p99']} s | {m['pod_to_pcr_p50']} / {m['pod_to_pcr_p99']} s "
            f"| {m['pcr_to_issued_p50']} / {m['pcr_to_issued_p99']} s "
            f"| {m['issued_to_running_p50']} / {m['issued_to_running_p99']} s "
            f"| {m['noise_lists_per_second']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--nodes", type=int, default=4, help="hollow kubelets")
    parser.add_argument("--rate", type=float, default=20.0, help="Pods created per second")
    parser.add_argument("--pods", type=int, default=200, help="Pods per run (half with a cert)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated of {RUNS}")
    parser.add_argument("--version", default=binaries.KUBERNETES_VERSION, help="Kubernetes")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    args = parser.parse_args(argv)
    # SIGTERM ends the run through the context managers: the cluster's processes stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    labels = [r for r in args.runs.split(",") if r]
    out = args.out or RESULTS / f"startup-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    _log(f"starting a cluster: {args.nodes} hollow kubelets, {args.version}, load {load_before}")
    runs: list[dict[str, Any]] = []
    with Cluster.start(nodes=args.nodes, version=args.version, extra_args=APF_ARGS) as cluster:
        client: Client = cluster.plane.client()
        token = account_token(client, SIGNER_NAMESPACE, SIGNER_ACCOUNT, "cluster-admin")
        workdir = cluster.plane.workdir / "startup"
        workdir.mkdir(parents=True, exist_ok=True)
        kubeconfig = workdir / "signer.kubeconfig"
        kubeconfig.write_text(json.dumps(cluster.plane.kubeconfig_for(token=token)))
        clients, noise_namespace = noise_clients(client)
        setup = Setup(cluster, client, kubeconfig, clients, noise_namespace, workdir)
        for round_ in range(args.rounds):
            order = labels if round_ % 2 == 0 else list(reversed(labels))
            for label in order:
                try:
                    with flow_schema(client, label.endswith("+flowschema")):
                        result = run_once(setup, label, round_, args.pods, args.rate)
                except Exception as err:  # one failed run must not lose the others
                    _log(f"{label} round {round_} failed: {err!r}")
                    continue
                runs.append(result)
                print(json.dumps(result), flush=True)
                _log(
                    f"{label} round {round_}: with cert p50/p99 "
                    f"{result['startup_with_cert']['p50']}/{result['startup_with_cert']['p99']} s, "
                    f"without {result['startup_without_cert']['p50']}/"
                    f"{result['startup_without_cert']['p99']} s"
                )
    with open("/proc/loadavg") as f:
        load_after = f.read().split()[:3]
    summary = medians(runs)
    document = {
        "scenario": "startup",
        "version": args.version,
        "nodes": args.nodes,
        "rate": args.rate,
        "pods_per_run": args.pods,
        "rounds": args.rounds,
        "signer": {"qps": SHIPPED_QPS, "burst": SHIPPED_BURST, "workers": SHIPPED_WORKERS},
        "load_before": load_before,
        "load_after": load_after,
        "medians": summary,
        "runs": runs,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(table(summary))
    _log(f"written {out}; load {load_before} → {load_after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
