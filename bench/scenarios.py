"""The six benchmark scenarios of bench/README.md "Scenarios"; each returns one flat dict.

Every scenario builds its own namespace (and the big ones their own control plane, see
`bench.__main__`), starts the signer it measures as a subprocess, builds every request
body before the clock starts, and stops the signer before returning, so scenarios do not
feed each other's caches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.harness import (
    Creator,
    KeyPool,
    Population,
    Watcher,
    apiserver_pid,
    cpu_seconds,
    monotonic,
    pcr_bodies,
    populate,
    presign_status,
    request_totals,
    rss_bytes,
    signer_requests,
    status_key,
    timing,
)
from bench.signers import (
    OUR_SIGNER_NAME,
    PEER_SIGNER_NAME,
    BenchedProcess,
    CeilingSigner,
    OurSigner,
    PeerSigner,
)
from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from kube.client import ApiError, Client
from kube.types import JSON
from trust.ca import write_ca
from trust.files import load_material
from trust.material import SigningMaterial

Result = dict[str, Any]
BURST_PODS, BURST_GROUPS = 200, 20
QUEUE = 'name="service_serving_signer"'


@dataclass
class Context:
    plane: ControlPlane
    client: Client
    keys: KeyPool
    workdir: Path
    n: int
    workers: int
    quick: bool
    auth: str = "cert"  # how our signer authenticates: "cert" or "token" (see token_kubeconfig)
    scale_pods: int = 150_000
    scale_services: int = 10_000
    scale_burst: int = 10_000
    scale_prefix: str = "scale"
    rounds: int = 1  # drains: interleaved repetitions

    def dir(self, name: str) -> Path:
        path = self.workdir / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def _wait_timeout(n: int) -> float:
    return max(120.0, n / 10)


def _burst(
    ctx: Context,
    label: str,
    signer_name: str,
    start_signer: Callable[[Population, list[JSON]], BenchedProcess],
    *,
    scenario: str | None = None,
    pop: Population | None = None,
) -> Result:
    """`ctx.n` PCRs POSTed by concurrent creators while `start_signer(pop, bodies)` serves
    them; first POST sent → last Issued seen."""
    if pop is None:
        pop = populate(ctx.client, f"bench-{label}", pods=BURST_PODS, groups=BURST_GROUPS)
    bodies = pcr_bodies(pop, ctx.keys, ctx.n, signer_name=signer_name)
    signer = start_signer(pop, bodies)
    try:
        signer.wait_ready()
        watcher = Watcher(ctx.client, pop.namespace).start()
        time.sleep(1.0)  # let the signer's watches settle after the initial list
        api_pid = apiserver_pid(ctx.plane)
        before = request_totals(ctx.plane)
        cpu0 = cpu_seconds(signer.pid)
        api0 = cpu_seconds(api_pid) if api_pid else 0.0
        creator = Creator(ctx.client, pop.namespace)
        creator.burst(bodies)
        complete = watcher.wait_all([c.name for c in creator.created], _wait_timeout(ctx.n))
        cpu1 = cpu_seconds(signer.pid)
        api1 = cpu_seconds(api_pid) if api_pid else 0.0
        time.sleep(0.5)  # let request counters of the last writes land
        after = request_totals(ctx.plane)
        watcher.stop()
        rss = rss_bytes(signer.pid)
    finally:
        signer.stop()
    t = timing(creator.created, watcher)
    reqs = signer_requests(before, after, watcher.requests)
    return {
        "scenario": scenario or ("burst" if label == "ours" else "peer"),
        "signer": label,
        "n": ctx.n,
        "workers": getattr(signer, "workers", 1),
        "complete": complete,
        **asdict(t),
        "cpu_s_per_1000": round((cpu1 - cpu0) / max(t.issued, 1) * 1000, 3),
        "apiserver_cpu_s_per_1000": round((api1 - api0) / max(t.issued, 1) * 1000, 3),
        "api_requests_per_pcr": round(sum(reqs.values()) / max(t.issued, 1), 3),
        "api_requests": reqs,
        "create_errors": dict(creator.errors),
        "rss_mib": round(rss / 2**20, 1),
    }


def cluster_admin_token(
    client: Client, namespace: str, expiration_seconds: int | None = None
) -> str:
    """A token (TokenRequest) of ServiceAccount `bench-signer` in `namespace`, bound to
    cluster-admin; the namespace, account and binding are made if missing."""
    name = "bench-signer"
    binding = f"{name}-{namespace}"
    for path, body in (
        (
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        ),
        (
            f"/api/v1/namespaces/{namespace}/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": binding},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        ),
    ):
        try:
            client.create(path, body)
        except ApiError as err:
            if err.status != 409:
                raise
    spec = {} if expiration_seconds is None else {"expirationSeconds": expiration_seconds}
    answer = client.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return str(answer["status"]["token"])


def token_kubeconfig(ctx: Context, directory: Path) -> Path:
    """A kubeconfig whose user is a bearer token read from a `tokenFile` — the
    ServiceAccount token of a `bench-signer` account bound to cluster-admin — the way a
    signer outside its cluster, or behind a token-issuing proxy, authenticates."""
    token_file = directory / "token"
    token_file.write_text(cluster_admin_token(ctx.client, "bench-auth"))
    config = ctx.plane.kubeconfig_for()
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    kubeconfig = directory / "token.kubeconfig"
    kubeconfig.write_text(json.dumps(config))
    return kubeconfig


def burst(ctx: Context) -> Result:
    """Scenario 1: N PCRs as fast as concurrent creators can POST them, our signer
    (authenticating with a client certificate, or with `--auth token` a token file)."""
    directory = ctx.dir("burst")
    kubeconfig = token_kubeconfig(ctx, directory) if ctx.auth == "token" else None
    result = _burst(
        ctx,
        "ours",
        OUR_SIGNER_NAME,
        lambda pop, bodies: OurSigner(
            ctx.plane, directory, workers=ctx.workers, kubeconfig=kubeconfig
        ).start(),
    )
    return {**result, "auth": ctx.auth}


def peer(ctx: Context) -> Result:
    """Scenario 5: the same burst served by the Kubernetes project's Go test signer."""
    return _burst(
        ctx,
        "go-peer",
        PEER_SIGNER_NAME,
        lambda pop, bodies: PeerSigner(ctx.plane, ctx.dir("peer")).start(),
    )


CEILING_SIGNER_NAME = "bench.example.com/ceiling"


def presigned_statuses(
    material: SigningMaterial, namespace: str, keys: KeyPool, bodies: list[JSON]
) -> dict[str, JSON]:
    """`status_key → Issued status` for `bodies` (made before any clock starts)."""
    table: dict[str, JSON] = {}
    for i, body in enumerate(bodies):
        key = status_key(body)
        if key not in table:
            _, private, _ = keys.pick(i)
            meta = {**body["metadata"], "namespace": namespace}
            table[key] = presign_status(material, {**body, "metadata": meta}, private)
    return table


def ceiling_starter(
    ctx: Context,
    namespace: str,
    material: SigningMaterial,
    label: str,
    content_type: str,
    verb: str = "put",
) -> Callable[[list[JSON]], BenchedProcess]:
    """Starts the ceiling for `bodies` (created in `namespace`), their Issued statuses
    pre-signed before it starts; its files in `ctx.dir(label)`."""

    def start(bodies: list[JSON]) -> BenchedProcess:
        statuses = presigned_statuses(material, namespace, ctx.keys, bodies)
        return CeilingSigner(
            ctx.plane,
            ctx.dir(label),
            namespace=namespace,
            statuses=statuses,
            content_type=content_type,
            verb=verb,
        ).start()

    return start


def ceiling_material(workdir: Path) -> SigningMaterial:
    ca_dir = workdir / "ceiling-ca"
    if not (ca_dir / "ca.key").exists():
        write_ca(ca_dir)
    return load_material(
        str(ca_dir / "ca.key"), str(ca_dir / "ca.crt"), str(ca_dir / "trust-bundle.pem")
    )


def drain(
    ctx: Context,
    pop: Population,
    count: int,
    signer_name: str,
    start_signer: Callable[[list[JSON]], BenchedProcess],
) -> Result:
    """A backlog: `count` PCRs created with nobody serving them, then the signer started.
    Rate = (issued - 1) / (last Issued - first Issued) as our watch saw them, so neither
    the creators nor the signer's start-up are in it; CPU from ready to the last Issued."""
    bodies = pcr_bodies(pop, ctx.keys, count, signer_name=signer_name)
    watcher = Watcher(ctx.client, pop.namespace).start()
    try:
        creator = Creator(ctx.client, pop.namespace)
        creator.burst(bodies)
        names = [c.name for c in creator.created]
        signer = start_signer(bodies)
        try:
            started = monotonic()
            signer.wait_ready(timeout=600)
            ready_s = monotonic() - started
            cpu0 = cpu_seconds(signer.pid)
            complete = watcher.wait_all(names, _wait_timeout(count) * 2)
            cpu1 = cpu_seconds(signer.pid)
        finally:
            signer.stop()
    finally:
        watcher.stop()
    times = sorted(
        t for n in names for kind, t in [watcher.terminal.get(n, ("", 0.0))] if kind == "Issued"
    )
    seconds = (times[-1] - times[0]) if len(times) > 1 else float("nan")
    return {
        "n": count,
        "issued": len(times),
        "complete": complete,
        "per_second": round((len(times) - 1) / seconds, 1) if len(times) > 1 else 0.0,
        "seconds": round(seconds, 3),
        "ready_seconds": round(ready_s, 3),
        "cpu_s_per_1000": round((cpu1 - cpu0) / max(len(times), 1) * 1000, 3),
        "create_errors": dict(creator.errors),
    }


def ceiling(ctx: Context) -> Result:
    """Scenario 6: the Go ceiling signer (`bench/ceiling`: client-go, 16 workers, status
    pre-signed before the clock, no decisions), in the same run as `burst` and `peer`.

    * `per_second` (the ceiling for `burst`): the same burst from the same creators,
      served by the ceiling with JSON; `protobuf_per_second` the same with protobuf.
    * `drain_*_per_second`: `n` PCRs created first, then the ceiling started — only the
      status writes are timed (JSON PUT, protobuf PUT, and JSON merge patch, our verb).
    """
    material = ceiling_material(ctx.workdir)
    pop = populate(ctx.client, "bench-ceiling", pods=BURST_PODS, groups=BURST_GROUPS)

    def start(content_type: str, verb: str = "put") -> Callable[[list[JSON]], BenchedProcess]:
        return ceiling_starter(ctx, pop.namespace, material, "ceiling", content_type, verb)

    served = {
        ct: _burst(
            ctx,
            f"go-ceiling-{ct}",
            CEILING_SIGNER_NAME,
            lambda pop, bodies, ct=ct: start(ct)(bodies),  # type: ignore[misc]
            scenario="ceiling",
            pop=pop,
        )
        for ct in ("json", "protobuf")
    }
    drains = {
        f"{ct}_{verb}": drain(ctx, pop, ctx.n, CEILING_SIGNER_NAME, start(ct, verb))
        for ct, verb in (("json", "put"), ("protobuf", "put"), ("json", "patch"))
    }
    result = {**served["json"], "signer": "go-ceiling (json, 16 workers)"}
    result["protobuf_per_second"] = served["protobuf"]["per_second"]
    result["protobuf_cpu_s_per_1000"] = served["protobuf"]["cpu_s_per_1000"]
    for name, d in drains.items():
        result[f"drain_{name}_per_second"] = d["per_second"]
        result[f"drain_{name}_cpu_s_per_1000"] = d["cpu_s_per_1000"]
    return result


def steady(ctx: Context, rate: float = 50.0) -> Result:
    """Scenario 2: `rate` PCR/s offered (open loop) for 60 s (10 s with BENCH_QUICK)."""
    duration = 10.0 if ctx.quick else 60.0
    count = int(rate * duration)
    pop = populate(ctx.client, "bench-steady", pods=BURST_PODS, groups=BURST_GROUPS)
    bodies = pcr_bodies(pop, ctx.keys, count, signer_name=OUR_SIGNER_NAME)
    signer = OurSigner(ctx.plane, ctx.dir("steady"), workers=ctx.workers).start()
    try:
        signer.wait_ready()
        watcher = Watcher(ctx.client, pop.namespace).start()
        time.sleep(1.0)
        cpu0 = cpu_seconds(signer.pid)
        creator = Creator(ctx.client, pop.namespace)
        creator.paced(bodies, rate)
        complete = watcher.wait_all([c.name for c in creator.created], _wait_timeout(count))
        cpu1 = cpu_seconds(signer.pid)
        watcher.stop()
    finally:
        signer.stop()
    t = timing(creator.created, watcher)
    return {
        "scenario": "steady",
        "signer": "ours",
        "n": count,
        "offered_per_second": rate,
        "duration_s": duration,
        "complete": complete,
        **asdict(t),
        "cpu_s_per_1000": round((cpu1 - cpu0) / max(t.issued, 1) * 1000, 3),
    }


def wakeup(ctx: Context) -> Result:
    """Scenario 3: `target` PCRs wait on one missing Service among `others` waiting on
    other missing Services; create that Service and time its PCRs to Issued."""
    target, others = (100, 1000) if ctx.quick else (1000, 10000)
    pop = populate(ctx.client, "bench-wakeup", pods=BURST_PODS, groups=2, create_services=False)
    wake_service = pop.services[0]  # selects the even Pods (group g0)
    evens = [p for i, p in enumerate(pop.pods) if i % 2 == 0]
    odds = [p for i, p in enumerate(pop.pods) if i % 2 == 1]

    def bodies(pods: list[dict[str, Any]], count: int, service: Callable[[int], str]) -> list[Any]:
        sub = type(pop)(pop.namespace, pods, pop.services)
        return pcr_bodies(sub, ctx.keys, count, signer_name=OUR_SIGNER_NAME, service=service)

    target_bodies = bodies(evens, target, lambda i: wake_service)
    other_bodies = bodies(odds, others, lambda i: f"missing-{i % 100}")
    signer = OurSigner(ctx.plane, ctx.dir("wakeup"), workers=ctx.workers).start()
    try:
        signer.wait_ready()
        watcher = Watcher(ctx.client, pop.namespace).start()
        creator = Creator(ctx.client, pop.namespace)
        creator.burst(other_bodies)
        targets = Creator(ctx.client, pop.namespace)
        targets.burst(target_bodies)
        total = len(creator.created) + len(targets.created)
        deadline = monotonic() + _wait_timeout(total) * 2
        pending = 0.0
        while monotonic() < deadline:
            pending = signer.metric("service_serving_ca_controller_pending_requests")
            if pending >= total:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        target_names = [c.name for c in targets.created]
        adds0 = signer.metric("workqueue_adds_total", QUEUE)
        cpu0 = cpu_seconds(signer.pid)
        start = monotonic()
        Kubelet(ctx.client).create_service(wake_service, pop.namespace, selector={"group": "g0"})
        complete = watcher.wait_all(target_names, 120)
        seconds = monotonic() - start
        time.sleep(1.0)
        adds1 = signer.metric("workqueue_adds_total", QUEUE)
        cpu1 = cpu_seconds(signer.pid)
        others_terminal = watcher.count_terminal(c.name for c in creator.created)
        watcher.stop()
    finally:
        signer.stop()
    return {
        "scenario": "wakeup",
        "signer": "ours",
        "target": target,
        "others": others,
        "pending_before": int(pending),
        "complete": complete,
        "seconds_to_all_issued": round(seconds, 3),
        "syncs": int(adds1 - adds0),
        "others_terminal": others_terminal,
        "cpu_s": round(cpu1 - cpu0, 3),
    }


def quiesce(pid: int, idle: float = 0.05, timeout: float = 300) -> None:
    """Wait until `pid` used < `idle` CPU seconds over a second (caches filled)."""
    deadline = monotonic() + timeout
    last = cpu_seconds(pid)
    while monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_seconds(pid)
        if now - last < idle:
            return
        last = now


def memory(ctx: Context) -> Result:
    """Scenario 4: controller RSS with 20,000 Pods and 2,000 Services in its caches."""
    pods, services = (2000, 200) if ctx.quick else (20000, 2000)
    kubelet = Kubelet(ctx.client)
    empty = OurSigner(ctx.plane, ctx.dir("memory-empty"), workers=ctx.workers).start()
    try:
        empty.wait_ready()
        quiesce(empty.pid)
        rss0 = rss_bytes(empty.pid)
        pop = populate(ctx.client, "bench-memory", pods=0, groups=services, headless=True)
        ns = pop.namespace

        def pod(i: int) -> None:
            kubelet.create_pod(
                f"pod-{i}",
                ns,
                labels={"app": "bench", "group": f"g{i % services}"},
            )

        with ThreadPoolExecutor(max_workers=32) as pool:
            list(pool.map(pod, range(pods)))
        quiesce(empty.pid)
        rss_watch = rss_bytes(empty.pid)
    finally:
        empty.stop()
    fresh = OurSigner(ctx.plane, ctx.dir("memory-list"), workers=ctx.workers).start()
    try:
        fresh.wait_ready()
        quiesce(fresh.pid)
        rss_list = rss_bytes(fresh.pid)
    finally:
        fresh.stop()
    objects = pods + services
    return {
        "scenario": "memory",
        "signer": "ours",
        "pods": pods,
        "services": services,
        "rss_empty_mib": round(rss0 / 2**20, 1),
        "rss_after_watch_mib": round(rss_watch / 2**20, 1),
        "rss_after_list_mib": round(rss_list / 2**20, 1),
        "bytes_per_pod_watch": round((rss_watch - rss0) / pods),
        "bytes_per_pod_list": round((rss_list - rss0) / pods),
        "bytes_per_object_list": round((rss_list - rss0) / objects),
    }


SCENARIOS: dict[str, Callable[[Context], Result]] = {
    "burst": burst,
    "peer": peer,
    "ceiling": ceiling,
    "steady": steady,
    "wakeup": wakeup,
    "memory": memory,
}
# Scenarios that fill the API server with tens of thousands of objects get their own.
OWN_CONTROL_PLANE = frozenset({"wakeup", "memory"})
