"""Pod start-up through the real kubelet: what a `podCertificate` volume adds to the time
from a Pod's creation to `Running`, and where that time goes, for three signers in the same
plane and run (docs/performance.md, "Pod start-up with a certificate").

    python -m bench.startup                         # 4 nodes, 20 Pods/s, 3 rounds
    python -m bench.startup --nodes 10 --rates 20,50 --rounds 3

One plane for the whole run: kube-apiserver with APF on and the saturated scenario's
small concurrency (`bench.saturation.APF_ARGS`, 12 seats), kube-controller-manager and
`--nodes` hollow kubelets (the release's own kubelet with a fake runtime,
`controlplane.hollow_node`). The signers (`--signers`), each under the identity that
decides its API Priority and Fairness placement:

- `ours`: a ServiceAccount bound to cluster-admin, at the shipped client budget
  (`--kube-api-qps=50 --kube-api-burst=100`) and `--workers` workers (default 5, the
  KCM-shaped signer's, so the two compare at equal workers) → `workload-low`;
- `kcm`: the kube-controller-manager-shaped Go signer (`bench/kcmsigner`: client-go, a
  shared informer, a rate-limited work queue, 5 workers, 20 QPS / 30 burst) as the user
  `system:kube-controller-manager` → the bootstrap `kube-controller-manager` FlowSchema
  (precedence 800) → `workload-high`, where kube-controller-manager is placed;
- `peer`: the hermetic Go peer (`bench/peer`, one worker: its package fixes it) as a
  ServiceAccount → `workload-low`.

Each run creates Pods at a steady rate (each of `--rates` in turn, spread round-robin over
the nodes, so each node starts `rate / nodes` Pods a second), cycling through one Pod per
signer with a projected `podCertificate` volume for that signer (the Service it names
selects them) and the same Pod **without** it — the control, in the same run. Per Pod, from
this process's watches (one clock): created (the POST returned) → PodCertificateRequest
created (the kubelet) → Issued (the signer) → `Running` (the kubelet's mount retry after
issuance). Runs:

- `quiet`: no other load;
- `noise`: LISTs of 1,500 ConfigMaps by 24 ServiceAccounts (`bench.saturation.Noise`) in
  `workload-low` at a constant offered rate (`--noise-rate`; by default the rate the same
  noise reached back to back, unpaced, in a calibration before the first round);
- `noise+flowschema`: the same noise, config/flowcontrol applied, its FlowSchema naming
  every signer's identity (ours and the peer's ServiceAccounts; for `kcm`, a copy at
  precedence 799, before the bootstrap schema it would otherwise tie with) — every signer
  in the signer's own level.

`--rounds` rounds, the runs interleaved in each (every run kind at every rate, then the
next round in the reverse order). Each run records the seats every priority level had at
its end (`apiserver_flowcontrol_current_limit_seats`, borrowing included), the noise's
offered and achieved LIST rates and the machine's load average before and after. One JSON
line per run on stdout and the whole run in `--out` (default
bench/results/startup-<UTC time>.json; bench/results/ is not committed).
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
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
    _ensure,
    _flowcontrol_path,
    account_token,
    flowcontrol_objects,
    noise_clients,
)
from bench.signers import (
    KCM_SIGNER_NAME,
    OUR_SIGNER_NAME,
    PEER_SIGNER_NAME,
    BenchedProcess,
    BenchedProcessError,
    KcmSigner,
    OurSigner,
    PeerSigner,
)
from controlplane import binaries
from controlplane.cluster import Cluster
from controlplane.kubelet import pod_manifest
from controlplane.workload import cert_volume, wait_service_account
from kube.client import ApiError, Client
from kube.discovery import served_version
from kube.transport import StreamCanceller
from kube.types import JSON

RESULTS = Path(__file__).with_name("results")
SERVICE = "web"
SHIPPED_QPS, SHIPPED_BURST = 50, 100
RUNS = ("quiet", "noise", "noise+flowschema")
SIGNERS = {"ours": OUR_SIGNER_NAME, "kcm": KCM_SIGNER_NAME, "peer": PEER_SIGNER_NAME}
CONTROL = "none"
PEER_NAMESPACE, PEER_ACCOUNT = "bench-peer", "peer-signer"
KCM_USER = "system:kube-controller-manager"
GIVE_UP = 240.0  # a Pod not Running by then counts as not started
CALIBRATION_SECONDS = 20.0


def _log(message: str) -> None:
    print(f"[startup {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _load() -> list[str]:
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


@dataclass
class PodTimes:
    kind: str  # a key of SIGNERS, or CONTROL
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


def pcr_path(client: Client, namespace: str) -> str:
    """The namespace's PodCertificateRequests in the newest version the plane serves (1.36:
    v1beta1 only)."""
    version = served_version(
        client, "certificates.k8s.io", "podcertificaterequests", ["v1", "v1beta1"]
    )
    return (
        f"/apis/certificates.k8s.io/{version or 'v1'}/namespaces/{namespace}/podcertificaterequests"
    )


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
                args=(pcr_path(client, namespace), self._pcr, self.cancellers[1]),
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


def pod(name: str, namespace: str, node: str, *, signer_name: str | None) -> JSON:
    """A Pod on `node`; with a `podCertificate` volume for `signer_name` unless None."""
    manifest = pod_manifest(name, namespace, labels={"app": SERVICE}, node_name=node)
    spec = manifest["spec"]
    spec["automountServiceAccountToken"] = False
    spec["terminationGracePeriodSeconds"] = 0
    if signer_name is not None:
        spec["containers"][0]["volumeMounts"] = [
            {"name": "tls", "mountPath": "/var/run/tls", "readOnly": True}
        ]
        spec["volumes"] = [
            cert_volume(
                signer_name=signer_name,
                annotations={"kubernetes.io/service-names": SERVICE},
                trust_bundle=False,
            )
        ]
    return manifest


def placement(i: int, nodes: list[str], kinds: list[str]) -> tuple[str, str]:
    """The node and kind of the `i`-th Pod: nodes round-robin, kinds round-robin shifted by
    one at every lap of the nodes, so every node starts every kind alike (a plain `i % n`
    for both puts each kind on the nodes congruent to it: with 10 nodes and 4 kinds, two
    signers' Pods share the even nodes while the third's share the odd ones with the
    control)."""
    return nodes[i % len(nodes)], kinds[(i + i // len(nodes)) % len(kinds)]


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _stats(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": _quantile(values, 0.5), "p99": _quantile(values, 0.99)}


def _spans(group: list[PodTimes], start: str, end: str) -> list[float]:
    out = []
    for p in group:
        a, b = getattr(p, start), getattr(p, end)
        if a is not None and b is not None:
            out.append(b - a)
    return out


def summarise(observed: Observed) -> dict[str, Any]:
    """The control's start-up, and per signer its Pods' start-up, what it adds over the
    control and the three parts."""
    with observed.lock:
        pods = list(observed.pods.values())
    plain = [p for p in pods if p.kind == CONTROL]
    without = _stats(_spans(plain, "created", "running"))
    per_signer: dict[str, Any] = {}
    for kind in sorted({p.kind for p in pods} - {CONTROL}):
        mine = [p for p in pods if p.kind == kind]
        with_cert = _stats(_spans(mine, "created", "running"))
        per_signer[kind] = {
            "startup_with_cert": with_cert,
            "added_p50": _diff(with_cert["p50"], without["p50"]),
            "added_p99": _diff(with_cert["p99"], without["p99"]),
            "pod_to_pcr_kubelet": _stats(_spans(mine, "created", "pcr")),
            "pcr_to_issued_signer": _stats(_spans(mine, "pcr", "issued")),
            "issued_to_running_kubelet": _stats(_spans(mine, "issued", "running")),
            "not_running": sum(1 for p in mine if p.running is None),
        }
    return {
        "startup_without_cert": without,
        "control_not_running": sum(1 for p in plain if p.running is None),
        "signers": per_signer,
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
    kubeconfigs: dict[str, Path]  # by signer kind
    noise_clients: list[Client]
    noise_namespace: str
    workdir: Path
    signers: list[str]
    our_workers: int
    noise_rate: float


def run_once(setup: Setup, label: str, round_: int, pods: int, rate: float) -> dict[str, Any]:
    client = setup.client
    namespace = f"startup-{label.replace('+', '-')}-r{int(rate)}-{round_}"
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
    kinds = [*setup.signers, CONTROL]
    observed = Observed()
    directory = setup.workdir / f"{namespace}"
    directory.mkdir(parents=True, exist_ok=True)
    noisy = label != "quiet"
    load_before = _load()
    running: dict[str, BenchedProcess] = {}
    restarts = 0
    noise = Noise(setup.noise_clients, setup.noise_namespace, rate=setup.noise_rate)
    try:
        for kind in setup.signers:
            running[kind], tries = start_signer(setup, kind, directory)
            restarts += tries
        watches = Watches(client, namespace, observed).start()
        with _maybe(noise.running() if noisy else None):
            if noisy:
                time.sleep(3.0)  # the noise's queues fill
            noise_before, began = noise.done, time.monotonic()
            for i in range(pods):
                due = began + i / rate
                time.sleep(max(0.0, due - time.monotonic()))
                name = f"p-{i}"
                node, kind = placement(i, nodes, kinds)
                signer_name = SIGNERS.get(kind)
                body = pod(name, namespace, node, signer_name=signer_name)
                client.create(f"/api/v1/namespaces/{namespace}/pods", body)
                with observed.lock:
                    observed.pods[name] = PodTimes(kind=kind, created=time.monotonic())
            created_in = time.monotonic() - began
            complete = observed.wait_all_running(GIVE_UP)
            elapsed = time.monotonic() - began
            seats = level_seats(setup.cluster)
            noise_rate = (noise.done - noise_before) / max(elapsed, 1e-9)
        watches.stop()
        budget: dict[str, float] = {}
        ours = running.get("ours")
        if isinstance(ours, OurSigner):
            limiter = ours.metric("rest_client_rate_limiter_duration_seconds_sum")
            writes = ours.metric("rest_client_rate_limiter_duration_seconds_count")
            budget["ours"] = round(1000 * limiter / writes, 1) if writes else 0.0
    finally:
        for process in running.values():
            process.stop()
    result = {
        "run": label,
        "round": round_,
        "pods": pods,
        "rate": rate,
        "achieved_create_rate": round(pods / max(created_in, 1e-9), 1),
        "nodes": len(nodes),
        "signers": setup.signers,
        "our_workers": setup.our_workers,
        "complete": complete,
        **summarise(observed),
        "seats": seats,
        "noise_offered_lists_per_second": setup.noise_rate if noisy else 0.0,
        "noise_lists_per_second": round(noise_rate, 1) if noisy else 0.0,
        "noise_rejected": noise.rejected,
        "signer_mean_budget_wait_ms": budget,
        "signer_restarts": restarts,
        "load_before": load_before,
        "load_after": _load(),
    }
    # Free the nodes for the next run (the Pods' requests stay until the cleaner's 15 min).
    client.delete(f"/api/v1/namespaces/{namespace}")
    return result


def start_signer(
    setup: Setup, kind: str, directory: Path, attempts: int = 5
) -> tuple[BenchedProcess, int]:
    """Signer `kind`, ready; started again (as a Deployment would restart it) when it exits
    during start-up — a 429 from a saturated level can end a start-up."""
    kubeconfig = setup.kubeconfigs[kind]
    make: Callable[[], BenchedProcess]
    if kind == "ours":

        def make() -> BenchedProcess:
            return OurSigner(
                setup.cluster.plane,
                directory,
                workers=setup.our_workers,
                kubeconfig=kubeconfig,
                qps=SHIPPED_QPS,
                burst=SHIPPED_BURST,
            )
    elif kind == "kcm":

        def make() -> BenchedProcess:
            return KcmSigner(directory, kubeconfig=kubeconfig)
    else:

        def make() -> BenchedProcess:
            return PeerSigner(setup.cluster.plane, directory, kubeconfig=kubeconfig)

    for attempt in range(attempts):
        signer = make().start()
        try:
            signer.wait_ready()
            return signer, attempt
        except BenchedProcessError as err:
            signer.stop()
            _log(f"{kind} start-up failed ({attempt + 1}/{attempts}): {str(err).splitlines()[-1]}")
            time.sleep(2.0)
    raise BenchedProcessError(f"signer {kind} did not start in {attempts} attempts")


def signer_flowcontrol_objects() -> list[JSON]:
    """config/flowcontrol with its FlowSchema naming every benched signer's identity: the
    peer's ServiceAccount beside ours, and a copy for the KCM-shaped signer's user at
    precedence 799 (at 800 it would tie with the bootstrap `kube-controller-manager`
    schema)."""
    objects = copy.deepcopy(flowcontrol_objects())
    extra: list[JSON] = []
    for obj in objects:
        if obj["kind"] == "FlowSchema" and obj["metadata"]["name"] == "service-serving-signer":
            obj["spec"]["rules"][0]["subjects"].append(
                {
                    "kind": "ServiceAccount",
                    "serviceAccount": {"namespace": PEER_NAMESPACE, "name": PEER_ACCOUNT},
                }
            )
            kcm = copy.deepcopy(obj)
            kcm["metadata"]["name"] = "service-serving-signer-bench-kcm-shaped"
            kcm["spec"]["matchingPrecedence"] = 799
            kcm["spec"]["rules"][0]["subjects"] = [{"kind": "User", "user": {"name": KCM_USER}}]
            extra.append(kcm)
    return objects + extra


@contextmanager
def flow_schemas(client: Client, applied: bool) -> Iterator[None]:
    objects = signer_flowcontrol_objects() if applied else []
    for obj in objects:
        client.create(_flowcontrol_path(obj).rsplit("/", 1)[0], obj)
    try:
        if objects:
            time.sleep(3)  # the API server's APF config controller takes them up
        yield
    finally:
        for obj in reversed(objects):
            client.delete(_flowcontrol_path(obj))


@contextmanager
def _maybe(context: Any) -> Iterator[None]:
    if context is None:
        yield
    else:
        with context:
            yield


def identities(cluster: Cluster, client: Client, workdir: Path) -> dict[str, Path]:
    """A kubeconfig per signer kind: ours and the peer as ServiceAccounts bound to
    cluster-admin, the KCM-shaped signer as the user `system:kube-controller-manager`
    (a client certificate) bound to cluster-admin too."""
    plane = cluster.plane
    out: dict[str, Path] = {}
    for kind, (namespace, account) in {
        "ours": (SIGNER_NAMESPACE, SIGNER_ACCOUNT),
        "peer": (PEER_NAMESPACE, PEER_ACCOUNT),
    }.items():
        token = account_token(client, namespace, account, "cluster-admin")
        out[kind] = workdir / f"{kind}.kubeconfig"
        out[kind].write_text(json.dumps(plane.kubeconfig_for(token=token)))
    _ensure(
        client,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "bench-kcm-shaped-signer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KCM_USER}
            ],
        },
    )
    out["kcm"] = workdir / "kcm.kubeconfig"
    out["kcm"].write_text(json.dumps(plane.kubeconfig_for(user=plane.pki.client_cert(KCM_USER))))
    return out


def calibrate_noise(clients: list[Client], namespace: str) -> float:
    """The LIST rate the noise reaches back to back on the quiet plane: the constant rate
    the noisy runs then offer."""
    noise = Noise(clients, namespace)
    with noise.running():
        time.sleep(3.0)
        before, began = noise.done, time.monotonic()
        time.sleep(CALIBRATION_SECONDS)
        rate = (noise.done - before) / (time.monotonic() - began)
    return round(rate, 1)


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (run kind, rate, signer): the median over rounds of each figure."""
    out: list[dict[str, Any]] = []
    keys = sorted(
        {(r["run"], r["rate"], s) for r in runs for s in r["signers"]},
        key=lambda k: (RUNS.index(k[0]) if k[0] in RUNS else 9, k[1], list(SIGNERS).index(k[2])),
    )
    for label, rate, kind in keys:
        mine = [r for r in runs if r["run"] == label and r["rate"] == rate]

        def med(path: tuple[str, ...], rs: list[dict[str, Any]] = mine) -> float | None:
            values = []
            for r in rs:
                v: Any = r
                for key in path:
                    v = v.get(key) if isinstance(v, dict) else None
                if isinstance(v, (int, float)):
                    values.append(float(v))
            return round(statistics.median(values), 3) if values else None

        sig = ("signers", kind)
        out.append(
            {
                "run": label,
                "rate": rate,
                "signer": kind,
                "rounds": len(mine),
                "startup_with_cert_p50": med((*sig, "startup_with_cert", "p50")),
                "startup_with_cert_p99": med((*sig, "startup_with_cert", "p99")),
                "startup_without_cert_p50": med(("startup_without_cert", "p50")),
                "startup_without_cert_p99": med(("startup_without_cert", "p99")),
                "added_p99": med((*sig, "added_p99")),
                "pod_to_pcr_p50": med((*sig, "pod_to_pcr_kubelet", "p50")),
                "pod_to_pcr_p99": med((*sig, "pod_to_pcr_kubelet", "p99")),
                "pcr_to_issued_p50": med((*sig, "pcr_to_issued_signer", "p50")),
                "pcr_to_issued_p99": med((*sig, "pcr_to_issued_signer", "p99")),
                "issued_to_running_p50": med((*sig, "issued_to_running_kubelet", "p50")),
                "issued_to_running_p99": med((*sig, "issued_to_running_kubelet", "p99")),
                "noise_lists_per_second": med(("noise_lists_per_second",)),
            }
        )
    return out


def table(summary: list[dict[str, Any]]) -> str:
    rows = [
        "| run | Pods/s | signer | start-up p50 / p99 with cert | without | added p99 "
        "| Pod→PCR p50/p99 (kubelet) | PCR→Issued p50/p99 (signer) "
        "| Issued→Running p50/p99 (kubelet) | noise LISTs/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in summary:
        rows.append(
            f"| {m['run']} | {m['rate']:g} | {m['signer']} "
            f"| {m['startup_with_cert_p50']} / {m['startup_with_cert_p99']} s "
            f"| {m['startup_without_cert_p50']} / {m['startup_without_cert_p99']} s "
            f"| {m['added_p99']} s | {m['pod_to_pcr_p50']} / {m['pod_to_pcr_p99']} s "
            f"| {m['pcr_to_issued_p50']} / {m['pcr_to_issued_p99']} s "
            f"| {m['issued_to_running_p50']} / {m['issued_to_running_p99']} s "
            f"| {m['noise_lists_per_second']} |"
        )
    return "\n".join(rows)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--nodes", type=int, default=4, help="hollow kubelets")
    parser.add_argument(
        "--rates", "--rate", default="20", help="Pods created per second, comma-separated"
    )
    parser.add_argument(
        "--pods-seconds", type=float, default=10.0, help="seconds of Pod creation per run"
    )
    parser.add_argument("--pods", type=int, default=0, help="Pods per run (0: rate x seconds)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated of {RUNS}")
    parser.add_argument(
        "--signers", default=",".join(SIGNERS), help=f"comma-separated of {tuple(SIGNERS)}"
    )
    parser.add_argument("--workers", type=int, default=5, help="our signer's workers")
    parser.add_argument(
        "--noise-rate", type=float, default=0.0, help="noise LISTs/s (0: calibrated)"
    )
    parser.add_argument("--version", default=binaries.KUBERNETES_VERSION, help="Kubernetes")
    parser.add_argument("--out", type=Path, default=None, help="the JSON file to write")
    args = parser.parse_args(argv)
    # SIGTERM ends the run through the context managers: the cluster's processes stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    labels = [r for r in args.runs.split(",") if r]
    signers = [s for s in args.signers.split(",") if s]
    unknown = [s for s in signers if s not in SIGNERS]
    if unknown:
        parser.error(f"unknown signers {unknown}")
    rates = _floats(args.rates)
    out = args.out or RESULTS / f"startup-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    load_before = _load()
    _log(f"starting a cluster: {args.nodes} hollow kubelets, {args.version}, load {load_before}")
    runs: list[dict[str, Any]] = []
    with Cluster.start(nodes=args.nodes, version=args.version, extra_args=APF_ARGS) as cluster:
        client: Client = cluster.plane.client()
        workdir = cluster.plane.workdir / "startup"
        workdir.mkdir(parents=True, exist_ok=True)
        kubeconfigs = identities(cluster, client, workdir)
        clients, noise_namespace = noise_clients(client)
        noisy = any(label != "quiet" for label in labels)
        noise_rate = args.noise_rate or (calibrate_noise(clients, noise_namespace) if noisy else 0)
        if noisy and noise_rate < 1:
            raise SystemExit(f"the noise's calibration reached {noise_rate} LISTs/s")
        _log(f"noise held at {noise_rate} LISTs/s offered")
        setup = Setup(
            cluster,
            client,
            kubeconfigs,
            clients,
            noise_namespace,
            workdir,
            signers,
            args.workers,
            noise_rate,
        )
        plan = [(label, rate) for label in labels for rate in rates]
        for round_ in range(args.rounds):
            order = plan if round_ % 2 == 0 else list(reversed(plan))
            for label, rate in order:
                pods = args.pods or int(rate * args.pods_seconds)
                try:
                    with flow_schemas(client, label.endswith("+flowschema")):
                        result = run_once(setup, label, round_, pods, rate)
                except Exception as err:  # one failed run must not lose the others
                    _log(f"{label} at {rate:g}/s round {round_} failed: {err!r}")
                    continue
                runs.append(result)
                print(json.dumps(result), flush=True)
                parts = ", ".join(
                    f"{k} {v['startup_with_cert']['p99']} s (signer p99 "
                    f"{v['pcr_to_issued_signer']['p99']} s)"
                    for k, v in result["signers"].items()
                )
                _log(
                    f"{label} at {rate:g}/s round {round_}: start-up p99 without cert "
                    f"{result['startup_without_cert']['p99']} s, {parts}; load "
                    f"{result['load_before']} → {result['load_after']}"
                )
    load_after = _load()
    summary = medians(runs)
    document = {
        "scenario": "startup",
        "version": args.version,
        "nodes": args.nodes,
        "rates": rates,
        "pods_seconds": args.pods_seconds,
        "rounds": args.rounds,
        "signers": {
            "ours": {"qps": SHIPPED_QPS, "burst": SHIPPED_BURST, "workers": args.workers},
            "kcm": {"qps": 20, "burst": 30, "workers": 5},
            "peer": {"qps": 1000, "burst": 2000, "workers": 1},
        },
        "noise_offered_lists_per_second": setup.noise_rate,
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
