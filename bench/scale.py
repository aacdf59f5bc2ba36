"""The `scale` scenario: the Kubernetes scalability envelope on one local control plane.

`python -m bench --scenario scale` (not part of `make bench`'s default set: it builds
150,000 Pods, `--pods`/`--services` change that) builds the cluster once and measures,
on it and in this order:

1. **Memory by watch**: our signer started on the empty cluster, then every Pod and
   Service created (`bench/populate`, client-go, bound Pods: `spec.nodeName` set, so no
   scheduler or kubelet) → RSS once quiet.
2. **Relist peak**: the same signer made to relist everything (SIGSTOP, kube-apiserver
   SIGKILLed and restarted, etcd moved on and compacted, SIGCONT → 410 Gone), RSS
   sampled every 50 ms; the ratio is the peak over the steady figure before.
3. **Start-up and memory by LIST**: a fresh signer, process start → `/readyz` 200, and
   RSS once quiet. Bytes per Pod divide the RSS growth over the empty signer by the
   Pods (the Services' share included).
4. **Churn**: 1,000 PCRs waiting on Services that do not select their Pods, while
   annotation-only updates go to the Services at 100/s; signer CPU as a fraction of one
   core, work-queue adds (re-drives) and Event POSTs in that window.
5. **Throughput**, each a backlog drain (`scenarios.drain`: PCRs created first, the
   signer started after, timed first → last Issued, CPU from ready to done): the Go
   ceiling with JSON and with protobuf, ours with QPS/burst raised by client
   certificate and by bearer token, ours at the shipped QPS/burst defaults (a smaller
   backlog: it is rate-limited by design), and the Go peer.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench import probe
from bench.harness import (
    Population,
    apiserver_metrics,
    apiserver_pid,
    cpu_seconds,
    monotonic,
    pcr_bodies,
    populate,
    request_totals,
    rss_bytes,
    sum_samples,
)
from bench.scenarios import (
    BURST_GROUPS,
    BURST_PODS,
    CEILING_SIGNER_NAME,
    QUEUE,
    Context,
    Result,
    ceiling_material,
    ceiling_starter,
    cluster_admin_token,
    drain,
    quiesce,
)
from bench.signers import (
    OUR_SIGNER_NAME,
    PEER_SIGNER_NAME,
    BenchedProcess,
    OurSigner,
    PeerSigner,
    go_tool,
)
from controlplane.kubelet import pcr_path
from kube.client import Client

SERVICES_PER_NAMESPACE = 100
CHURN_RATE, CHURN_SECONDS, CHURN_WAITING, CHURN_WRITERS = 100.0, 30.0, 1000, 32
DEFAULTS_BACKLOG = 2000  # at the shipped 50 QPS this alone is ~40 s
SHIPPED_QPS, SHIPPED_BURST = 50, 100  # manager/options.py defaults


def _log(message: str) -> None:
    print(f"[bench scale {time.strftime('%H:%M:%S')}] {message}", flush=True, file=sys.stderr)


def layout(pods: int, services: int) -> tuple[int, int, int]:
    """(namespaces, Pods per namespace, Services per namespace)."""
    namespaces = max(1, services // SERVICES_PER_NAMESPACE)
    return namespaces, max(1, pods // namespaces), services // namespaces


def build_cluster(ctx: Context, prefix: str, pods: int, services: int) -> tuple[int, int]:
    """Create the namespaces, Services and bound Pods; returns the (Pods, Services) made."""
    namespaces, per_ns, svc_per_ns = layout(pods, services)
    started = monotonic()
    out = subprocess.run(
        [
            str(go_tool("bench-populate")),
            f"--kubeconfig={ctx.plane.kubeconfig}",
            f"--prefix={prefix}",
            f"--namespaces={namespaces}",
            f"--pods-per-namespace={per_ns}",
            f"--services-per-namespace={svc_per_ns}",
            "--workers=48",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    _log(f"populated in {monotonic() - started:.0f}s: {summary}")
    return namespaces * per_ns, namespaces * svc_per_ns


class RssSampler:
    """Samples a process's RSS every `interval` seconds in a thread; keeps the peak."""

    # Thread start/stop as in the managed-CA test prober.
    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval, self.peak = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except OSError:
                return
            self._stop.wait(self.interval)


def force_relist(ctx: Context, signer: OurSigner, scratch: str) -> None:
    """Make every informer of `signer` relist: its resourceVersions compacted away while
    it is stopped and the API server (and its watch cache) restarted."""
    os.kill(signer.pid, signal.SIGSTOP)
    try:
        client = ctx.plane.client(qps=0)
        for i in range(50):  # move etcd's revision past every informer's
            client.create(
                f"/api/v1/namespaces/{scratch}/configmaps",
                {"metadata": {"name": f"relist-{i}"}, "data": {"i": str(i)}},
            )
        ctx.plane.compact_etcd()
        # The new watch cache starts at today's revision, newer than any the signer holds.
        pid = apiserver_pid(ctx.plane)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)  # no graceful last BOOKMARK to the watchers
        ctx.plane.stop_apiserver()
        ctx.plane.start_apiserver(timeout=900)
    finally:
        os.kill(signer.pid, signal.SIGCONT)


def cluster_lists(ctx: Context) -> float:
    """Cluster-scoped lists of Pods since the API server started (our relists): paged
    LISTs, and streaming lists once their initial events have been sent (kube-apiserver
    itself caches no Pods)."""
    text = apiserver_metrics(ctx.plane)

    def pods(lb: dict[str, str]) -> bool:
        return lb.get("resource") == "pods" and lb.get("scope") == "cluster"

    paged = sum_samples(
        text, "apiserver_request_total", lambda lb: lb.get("verb") == "LIST" and pods(lb)
    )
    return paged + sum_samples(text, "apiserver_watch_list_duration_seconds_count", pods)


def churn(ctx: Context, signer: OurSigner, namespaces: int, svc_per_ns: int) -> Result:
    """Annotation-only Service updates at CHURN_RATE/s while CHURN_WAITING PCRs wait."""
    ns0 = f"{ctx.scale_prefix}-000"
    client: Client = ctx.client
    pods = client.get(f"/api/v1/namespaces/{ns0}/pods", {"limit": 500})["items"]
    # Pod of app-k names Service app-(k+1): it exists and does not select the Pod → waits.
    population = Population(ns0, pods, [])

    def other_service(i: int) -> str:
        app = int(pods[i % len(pods)]["metadata"]["labels"]["app"].split("-")[1])
        return f"app-{(app + 1) % svc_per_ns}"

    bodies = pcr_bodies(
        population, ctx.keys, CHURN_WAITING, signer_name=OUR_SIGNER_NAME, service=other_service
    )
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda b: client.create(pcr_path(ns0), b), bodies))
    deadline = monotonic() + 300
    while monotonic() < deadline:
        if signer.metric("service_serving_ca_controller_pending_requests") >= CHURN_WAITING:
            break
        time.sleep(0.5)
    quiesce(signer.pid)
    targets = [
        (f"{ctx.scale_prefix}-{i % namespaces:03d}", f"app-{(i // namespaces) % svc_per_ns}")
        for i in range(int(CHURN_RATE * CHURN_SECONDS))
    ]
    adds0 = signer.metric("workqueue_adds_total", QUEUE)
    before = request_totals(ctx.plane)
    cpu0, t0 = cpu_seconds(signer.pid), monotonic()
    errors: list[str] = []

    def touch(i: int) -> None:
        ns, name = targets[i]
        try:
            client.patch(
                f"/api/v1/namespaces/{ns}/services/{name}",
                {"metadata": {"annotations": {"bench.example.com/churn": str(i)}}},
            )
        except Exception as err:  # a figure, not a test: count and go on
            errors.append(str(err))

    # Enough writers that the offered rate is the achieved one on a loaded machine (8
    # reached 33/s at 150,000 Pods); the achieved rate is reported beside it.
    with ThreadPoolExecutor(CHURN_WRITERS) as pool:
        for i in range(len(targets)):
            delay = t0 + i / CHURN_RATE - monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(touch, i)
    time.sleep(2.0)  # the last events reach the signer
    cpu1, t1 = cpu_seconds(signer.pid), monotonic()
    after = request_totals(ctx.plane)
    adds1 = signer.metric("workqueue_adds_total", QUEUE)
    waiting = int(signer.metric("service_serving_ca_controller_pending_requests"))
    # Gone before the drains: every later start of our signer would sync these 1,000
    # again (and on) and charge that to the drain's certificates.
    client.delete(pcr_path(ns0))
    events = after[("POST", "events", "")] - before[("POST", "events", "")]
    events += after[("PATCH", "events", "")] - before[("PATCH", "events", "")]
    return {
        "churn_updates": len(targets) - len(errors),
        "churn_seconds": round(t1 - t0, 1),
        "churn_updates_per_second": round((len(targets) - len(errors)) / (t1 - t0 - 2.0), 1),
        "churn_cpu_fraction": round((cpu1 - cpu0) / (t1 - t0), 4),
        "churn_redrives": int(adds1 - adds0),
        "churn_event_writes": int(events),
        "churn_waiting": waiting,
    }


def _token_kubeconfig(ctx: Context) -> Path:
    """A kubeconfig with a bearer token (TokenRequest) of a cluster-admin ServiceAccount."""
    token = cluster_admin_token(ctx.client, "kube-system", expiration_seconds=86400)
    return ctx.plane.write_kubeconfig(ctx.workdir / "token.kubeconfig", token=token)


def _our_starter(
    ctx: Context, label: str, workers: int, kw: dict[str, Any]
) -> Callable[[list[Any]], BenchedProcess]:
    def start(bodies: list[Any]) -> BenchedProcess:
        return OurSigner(ctx.plane, ctx.dir(f"scale-{label}"), workers=workers, **kw).start()

    return start


PROBE_SECONDS = 20.0  # the quiet probe; the other lasts as long as its drain
THROUGHPUT_ROUNDS = 2  # `--rounds` for scale; each round is four 10,000-PCR drains


def throughput(ctx: Context) -> Result:
    """Backlog drains, same API server, same run. `rounds` times and interleaved (so the
    machine's and the API server's drift falls on every signer alike): the Go ceiling
    (JSON), ours with raised QPS by client certificate and by bearer token, the Go peer.
    Once: the Go ceiling with protobuf, ours at the shipped QPS/burst defaults. Each
    figure is the median over rounds; each ratio the median of the same-round ratios."""
    material = ceiling_material(ctx.workdir)
    n = ctx.scale_burst
    rounds = max(1, ctx.rounds)
    token_kubeconfig = _token_kubeconfig(ctx)
    drains_run = 0

    def fresh(label: str) -> Population:
        nonlocal drains_run
        drains_run += 1
        # Headless Services: the bench plane's Service range is a /24 (controlplane),
        # and a decision reads a headless Service exactly as a ClusterIP one.
        return populate(
            ctx.client,
            f"scale-{label}-{drains_run}",
            pods=BURST_PODS,
            groups=BURST_GROUPS,
            headless=True,
        )

    def ceiling(ct: str) -> Result:
        pop = fresh(f"ceiling-{ct}")

        start = ceiling_starter(ctx, pop.namespace, material, "scale", ct)
        return drain(ctx, pop, n, CEILING_SIGNER_NAME, start)

    def ours(label: str, count: int, kw: dict[str, Any]) -> Result:
        pop = fresh(label.replace("_", "-"))
        kw = dict(kw)
        workers = kw.pop("workers", ctx.workers)
        return drain(ctx, pop, count, OUR_SIGNER_NAME, _our_starter(ctx, label, workers, kw))

    def peer() -> Result:
        pop = fresh("peer")
        return drain(
            ctx,
            pop,
            n,
            PEER_SIGNER_NAME,
            lambda bodies: PeerSigner(ctx.plane, ctx.dir("scale-peer")).start(),
        )

    interleaved: dict[str, Callable[[], Result]] = {
        "go_ceiling_json": lambda: ceiling("json"),
        "ours": lambda: ours("ours", n, {}),
        "ours_token": lambda: ours("ours_token", n, {"kubeconfig": token_kubeconfig}),
        "peer": peer,
    }
    per_round: dict[str, list[Result]] = {label: [] for label in interleaved}
    for round_ in range(rounds):
        for label, run in interleaved.items():
            d = run()
            _log(f"round {round_ + 1}/{rounds} {label}: {d}")
            per_round[label].append(d)
    once = {
        "go_ceiling_protobuf": lambda: ceiling("protobuf"),
        "ours_defaults": lambda: ours(
            "ours_defaults",
            DEFAULTS_BACKLOG,
            {"qps": SHIPPED_QPS, "burst": SHIPPED_BURST, "workers": 4},
        ),
    }
    for label, run in once.items():
        d = run()
        _log(f"{label}: {d}")
        per_round[label] = [d]

    # The same unit of our work, timed quiet and beside one more (uncounted) Go ceiling
    # drain: how much dearer every CPU figure above is for sharing the machine.
    quiet_probe = probe.quiet(ctx.dir("probe"), PROBE_SECONDS)
    with probe.Beside(ctx.dir("probe")) as beside:
        beside_drain = ceiling("json")
    _log(f"probe quiet {quiet_probe}, beside a drain {beside.result} ({beside_drain})")

    out: Result = {"throughput_rounds": rounds}
    out["probe_cpu_ms_quiet"] = quiet_probe["cpu_ms_per_unit"]
    out["probe_cpu_ms_beside_drain"] = beside.result["cpu_ms_per_unit"]
    out["cpu_interference_ratio"] = round(
        beside.result["cpu_ms_per_unit"] / quiet_probe["cpu_ms_per_unit"], 3
    )
    for label, runs in per_round.items():
        out[f"{label}_per_second"] = _median(r["per_second"] for r in runs)
        out[f"{label}_cpu_s_per_1000"] = _median(r["cpu_s_per_1000"] for r in runs)
        out[f"{label}_ready_seconds"] = _median(r["ready_seconds"] for r in runs)
        out[f"{label}_rounds"] = [
            {k: r[k] for k in ("per_second", "cpu_s_per_1000", "ready_seconds", "complete")}
            for r in runs
        ]
    ceilings, peers = per_round["go_ceiling_json"], per_round["peer"]
    for label, key in (("ours", "burst_over_go_ceiling"), ("ours_token", "token_over_go_ceiling")):
        out[key] = _median(
            r["per_second"] / c["per_second"]
            for r, c in zip(per_round[label], ceilings, strict=True)
        )
    for label, key in (("ours", "cpu_over_peer"), ("ours_token", "token_cpu_over_peer")):
        out[key] = _median(
            r["cpu_s_per_1000"] / p["cpu_s_per_1000"]
            for r, p in zip(per_round[label], peers, strict=True)
        )
    return out


def _median(values: Iterable[float]) -> float:
    return round(float(statistics.median(list(values))), 3)


def scale(ctx: Context) -> Result:
    pods_wanted, services_wanted = ctx.scale_pods, ctx.scale_services
    namespaces, _, svc_per_ns = layout(pods_wanted, services_wanted)
    scratch = populate(ctx.client, "scale-scratch", pods=0, groups=0).namespace
    # 1. memory by watch
    watching = OurSigner(ctx.plane, ctx.dir("scale-watch"), workers=ctx.workers).start()
    try:
        watching.wait_ready()
        quiesce(watching.pid)
        rss_empty = rss_bytes(watching.pid)
        pods, services = build_cluster(ctx, ctx.scale_prefix, pods_wanted, services_wanted)
        quiesce(watching.pid, timeout=600)
        rss_watch = rss_bytes(watching.pid)
        _log(f"by watch: {rss_empty / 2**20:.1f} → {rss_watch / 2**20:.1f} MiB")
        # 2. relist peak
        with RssSampler(watching.pid) as sampler:
            force_relist(ctx, watching, scratch)
            deadline = monotonic() + 600
            while cluster_lists(ctx) < 1 and monotonic() < deadline:
                time.sleep(0.5)
            quiesce(watching.pid, timeout=600)
        relists = cluster_lists(ctx)
        rss_after_relist = rss_bytes(watching.pid)
        _log(f"relist: peak {sampler.peak / 2**20:.1f} MiB, after {rss_after_relist / 2**20:.1f}")
    finally:
        watching.stop()
    # 3. start-up and memory by LIST; 4. churn on the same process
    fresh = OurSigner(ctx.plane, ctx.dir("scale-list"), workers=ctx.workers)
    started = monotonic()
    fresh.start()
    try:
        fresh.wait_ready(timeout=600)
        startup = monotonic() - started
        quiesce(fresh.pid, timeout=600)
        rss_list = rss_bytes(fresh.pid)
        _log(f"start-up {startup:.1f}s, by LIST {rss_list / 2**20:.1f} MiB")
        churned = churn(ctx, fresh, namespaces, svc_per_ns)
        _log(f"churn: {churned}")
    finally:
        fresh.stop()
    # 5. throughput
    rates = throughput(ctx)
    per_pod_list = (rss_list - rss_empty) / pods
    per_pod_watch = (rss_watch - rss_empty) / pods
    return {
        "scenario": "scale",
        "signer": "ours",
        "pods": pods,
        "services": services,
        "namespaces": namespaces,
        "rss_bytes_per_pod": round(max(per_pod_list, per_pod_watch)),
        "rss_bytes_per_pod_list": round(per_pod_list),
        "rss_bytes_per_pod_watch": round(per_pod_watch),
        "rss_empty_mib": round(rss_empty / 2**20, 1),
        "rss_after_list_mib": round(rss_list / 2**20, 1),
        "rss_after_watch_mib": round(rss_watch / 2**20, 1),
        "relist_peak_mib": round(sampler.peak / 2**20, 1),
        "rss_after_relist_mib": round(rss_after_relist / 2**20, 1),
        "relist_peak_ratio": round(sampler.peak / rss_watch, 3),
        "relists_seen": int(relists),
        "startup_seconds": round(startup, 2),
        "burst_n": ctx.scale_burst,
        "burst_per_second": rates["ours_per_second"],
        "go_ceiling_json_per_second": rates["go_ceiling_json_per_second"],
        "burst_over_go_ceiling": rates["burst_over_go_ceiling"],
        "cpu_s_per_1000": rates["ours_cpu_s_per_1000"],
        "peer_cpu_s_per_1000": rates["peer_cpu_s_per_1000"],
        "cpu_over_peer": rates["cpu_over_peer"],
        **churned,
        **{k: v for k, v in rates.items() if k not in ("ours_per_second",)},
    }
