"""Scenario `saturated`: certificate-ready latency for a Pod burst while other
ServiceAccounts saturate the API server (docs/performance.md, "API Priority and
Fairness").

Every other scenario runs its signers as `system:masters`, which API Priority and Fairness
exempts; a real signer runs as a ServiceAccount, and outside `kube-system` that is the
`service-accounts` FlowSchema → priority level `workload-low`, shared with every other
workload's controllers. So here:

- **The plane**: its own kube-apiserver with APF on (the default) and a total concurrency
  of `SEATS` (`--max-requests-inflight` + `--max-mutating-requests-inflight`), small
  enough for a 2-core machine to saturate; `workload-low` then has
  ceil(SEATS * 100 / 245) seats.
- **The noise**: `NOISE_ACCOUNTS` ServiceAccounts (bound to a ClusterRole that may list
  ConfigMaps), `NOISE_THREADS` threads between them, each LISTing a namespace of
  `NOISE_OBJECTS` 1 KiB ConfigMaps back to back (the body is not decoded, so the bench
  process's CPU goes to sending). Their flows fill `workload-low`'s seats and queues.
- **The burst**: `n` PodCertificateRequests (1,000 by default) for 200 Pods behind 20
  Services, POSTed by 16 creators as `system:masters` (exempt, like kubelets' `system`
  level it is never the bottleneck), watched likewise; latency is from each POST's return
  to the Issued condition seen on the watch (p50/p99), against the 5 s pod start-up SLO.
- **The signers**, each as a ServiceAccount bound to cluster-admin (a bearer-token
  kubeconfig): ours without and with config/flowcontrol (its own level with
  `workload-high`'s settings, at kube-controller-manager's precedence), and the Go peer
  without (the Kubernetes project's test signer, bench/peer).

Run alone, once: `python -m bench --scenario saturated --n 1000`.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from bench.harness import (
    Creator,
    Population,
    Watcher,
    apiserver_metrics,
    parallel,
    pcr_bodies,
    populate,
    sum_samples,
    timing,
)
from bench.scenarios import BURST_GROUPS, BURST_PODS, Context, Result, _wait_timeout
from bench.signers import OUR_SIGNER_NAME, PEER_SIGNER_NAME, BenchedProcess, OurSigner, PeerSigner
from kube.client import ApiError, Client
from kube.types import JSON

# Total API server concurrency (APF divides it among priority levels by their shares).
MAX_INFLIGHT, MAX_MUTATING = 8, 4
SEATS = MAX_INFLIGHT + MAX_MUTATING
APF_ARGS = (
    f"--max-requests-inflight={MAX_INFLIGHT}",
    f"--max-mutating-requests-inflight={MAX_MUTATING}",
)
NOISE_ACCOUNTS = 24
NOISE_THREADS = 48
NOISE_OBJECTS = 1500
SLO_SECONDS = 5.0  # SIG Scalability: pod start-up p99 <= 5 s (a podCertificate volume blocks it)
FLOWCONTROL = Path(__file__).resolve().parents[1] / "config" / "flowcontrol"
FLOWCONTROL_API = "/apis/flowcontrol.apiserver.k8s.io/v1"
SIGNER_NAMESPACE = "service-serving-signer"
SIGNER_ACCOUNT = "service-serving-signer"


def _ensure(client: Client, path: str, body: JSON) -> None:
    try:
        client.create(path, body)
    except ApiError as err:
        if err.status != 409:
            raise


def account_token(client: Client, namespace: str, name: str, cluster_role: str) -> str:
    """A token of ServiceAccount `namespace/name`, bound to `cluster_role` (made if missing)."""
    _ensure(client, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    _ensure(client, f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    _ensure(
        client,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": f"bench-{namespace}-{name}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    answer = client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    return str(answer["status"]["token"])


def token_kubeconfig(ctx: Context, directory: Path, token: str) -> Path:
    config = ctx.plane.kubeconfig_for(token=token)
    path = directory / "token.kubeconfig"
    path.write_text(json.dumps(config))
    return path


class Noise:
    """`NOISE_THREADS` threads LISTing the noise namespace as `NOISE_ACCOUNTS` accounts:
    back to back, or with `rate`, LISTs started on a fixed schedule of `rate` a second
    between them (an offered load held constant whatever the server does; a thread free
    only after its LIST ends, so the achieved rate, `done`, falls short when the server
    cannot keep up with `NOISE_THREADS` in flight)."""

    def __init__(self, clients: list[Client], namespace: str, rate: float | None = None) -> None:
        self.clients = clients
        self.path = f"/api/v1/namespaces/{namespace}/configmaps"
        self.rate = rate
        self._due = 0.0
        self.done = 0
        self.rejected = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(NOISE_THREADS)
        ]

    def _run(self, i: int) -> None:
        client = self.clients[i % len(self.clients)]
        while not self._stop.is_set():
            if self.rate:
                with self._lock:
                    due = self._due = max(self._due + 1 / self.rate, time.monotonic() - 1.0)
                time.sleep(max(0.0, due - time.monotonic()))
            try:
                client.get_bytes(self.path, timeout=60)
                with self._lock:
                    self.done += 1
            except ApiError as err:
                with self._lock:
                    self.rejected += err.status == 429
                time.sleep(0.05)

    @contextmanager
    def running(self) -> Iterator[None]:
        for thread in self._threads:
            thread.start()
        try:
            yield
        finally:
            self._stop.set()
            for thread in self._threads:
                thread.join(70)


def prepare_noise(ctx: Context) -> tuple[list[Client], str]:
    return noise_clients(ctx.client)


def noise_clients(client: Client) -> tuple[list[Client], str]:
    """The noise's namespace of ConfigMaps and a client per noise ServiceAccount."""
    namespace = "bench-noise"
    _ensure(client, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    _ensure(
        client,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "metadata": {"name": "bench-noise"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    filler = "x" * 1024
    parallel(
        lambda i: _ensure(
            client,
            f"/api/v1/namespaces/{namespace}/configmaps",
            {"metadata": {"name": f"noise-{i}"}, "data": {"filler": filler}},
        ),
        NOISE_OBJECTS,
    )
    clients = [
        client.with_token(account_token(client, namespace, f"noise-{k}", "bench-noise"))
        for k in range(NOISE_ACCOUNTS)
    ]
    return clients, namespace


def flowcontrol_objects() -> list[JSON]:
    return [
        doc
        for name in ("priority_level.yaml", "flow_schema.yaml", "flow_schema_leader_election.yaml")
        for doc in yaml.safe_load_all((FLOWCONTROL / name).read_text())
        if doc
    ]


def _flowcontrol_path(obj: JSON) -> str:
    plural = {
        "FlowSchema": "flowschemas",
        "PriorityLevelConfiguration": "prioritylevelconfigurations",
    }[obj["kind"]]
    return f"{FLOWCONTROL_API}/{plural}/{obj['metadata']['name']}"


@contextmanager
def flow_schema(client: Client, applied: bool) -> Iterator[None]:
    objects = flowcontrol_objects() if applied else []
    for obj in objects:
        client.create(_flowcontrol_path(obj).rsplit("/", 1)[0], obj)
    try:
        if objects:
            # The API server's APF config controller takes them up within a second or so.
            time.sleep(3)
        yield
    finally:
        for obj in reversed(objects):
            client.delete(_flowcontrol_path(obj))


def level_wait_seconds(metrics: str, level: str) -> tuple[float, float]:
    """(sum, count) of `apiserver_flowcontrol_request_wait_duration_seconds` at `level`."""

    def at(name: str) -> float:
        return sum_samples(metrics, name, lambda labels: labels.get("priority_level") == level)

    return (
        at("apiserver_flowcontrol_request_wait_duration_seconds_sum"),
        at("apiserver_flowcontrol_request_wait_duration_seconds_count"),
    )


def _run(
    ctx: Context,
    label: str,
    signer_name: str,
    start: Callable[[Population], BenchedProcess],
    noise: Noise,
    level: str,
) -> Result:
    pop = populate(
        ctx.client, f"sat-{label.replace('+', '-')}", pods=BURST_PODS, groups=BURST_GROUPS
    )
    bodies = pcr_bodies(pop, ctx.keys, ctx.n, signer_name=signer_name)
    signer = start(pop)
    try:
        signer.wait_ready()
        watcher = Watcher(ctx.client, pop.namespace).start()
        with noise.running():
            time.sleep(3.0)  # the noise's queues fill
            before = apiserver_metrics(ctx.plane)
            noise_before = noise.done
            started = time.monotonic()
            creator = Creator(ctx.client, pop.namespace)
            creator.burst(bodies)
            complete = watcher.wait_all([c.name for c in creator.created], _wait_timeout(ctx.n))
            elapsed = time.monotonic() - started
            after = apiserver_metrics(ctx.plane)
            noise_done = noise.done - noise_before
        watcher.stop()
    finally:
        signer.stop()
    t = timing(creator.created, watcher)
    latencies = sorted(
        watcher.terminal[c.name][1] - c.returned
        for c in creator.created
        if c.name in watcher.terminal and watcher.terminal[c.name][0] == "Issued"
    )
    within = sum(1 for seconds in latencies if seconds <= SLO_SECONDS)
    wait_before, wait_after = level_wait_seconds(before, level), level_wait_seconds(after, level)
    waited = wait_after[1] - wait_before[1]
    return {
        "signer": label,
        "priority_level": level,
        "complete": complete,
        **asdict(t),
        "within_slo": round(within / max(len(creator.created), 1), 4),
        "signer_level_mean_wait_ms": round(
            (wait_after[0] - wait_before[0]) / waited * 1000 if waited else 0.0, 1
        ),
        "noise_lists_per_second": round(noise_done / max(elapsed, 1e-9), 1),
        "noise_rejected": noise.rejected,
        "create_errors": dict(creator.errors),
    }


def saturated(ctx: Context) -> Result:
    """Ours without and with the FlowSchema, then the Go peer without, each under the
    same noise (a fresh `Noise` per run: its threads are started once)."""
    clients, noise_namespace = prepare_noise(ctx)
    ours_token = account_token(ctx.client, SIGNER_NAMESPACE, SIGNER_ACCOUNT, "cluster-admin")
    peer_token = account_token(ctx.client, SIGNER_NAMESPACE, "bench-peer", "cluster-admin")
    level = flowcontrol_objects()[0]["metadata"]["name"]
    runs: list[Result] = []

    def ours(name: str) -> Callable[[Population], BenchedProcess]:
        directory = ctx.dir(f"saturated-{name}")
        kubeconfig = token_kubeconfig(ctx, directory, ours_token)
        # The shipped client budget (50 QPS / 100 burst): the server, not the bucket, is
        # what is saturated here.
        return lambda _pop: OurSigner(
            ctx.plane, directory, workers=ctx.workers, kubeconfig=kubeconfig, qps=50, burst=100
        ).start()

    def go_peer(_pop: Population) -> BenchedProcess:
        directory = ctx.dir("saturated-peer")
        peer = PeerSigner(ctx.plane, directory)
        kubeconfig = token_kubeconfig(ctx, directory, peer_token)
        peer.args = [a for a in peer.args if not a.startswith("--kubeconfig=")]
        peer.args.append(f"--kubeconfig={kubeconfig}")
        return peer.start()

    plan: list[tuple[str, str, Callable[[Population], BenchedProcess], bool, str]] = [
        ("ours", OUR_SIGNER_NAME, ours("without"), False, "workload-low"),
        ("ours+flowschema", OUR_SIGNER_NAME, ours("with"), True, level),
        ("go-peer", PEER_SIGNER_NAME, go_peer, False, "workload-low"),
    ]
    for label, signer_name, start, applied, priority in plan:
        with flow_schema(ctx.client, applied):
            noise = Noise(clients, noise_namespace)
            runs.append(_run(ctx, label, signer_name, start, noise, priority))
        # Each run as it ends (a later run's failure must not lose it).
        print(f"[saturated] {json.dumps(runs[-1])}", file=sys.stderr, flush=True)
    by = {r["signer"]: r for r in runs}
    summary: dict[str, Any] = {
        "scenario": "saturated",
        "n": ctx.n,
        "seats": SEATS,
        "noise_accounts": NOISE_ACCOUNTS,
        "noise_threads": NOISE_THREADS,
        "slo_seconds": SLO_SECONDS,
        "runs": runs,
    }
    for label, run in by.items():
        key = label.replace("+", "_").replace("-", "_")
        summary[f"{key}_p50_ms"] = run["p50_ms"]
        summary[f"{key}_p99_ms"] = run["p99_ms"]
        summary[f"{key}_within_slo"] = run["within_slo"]
    return summary
