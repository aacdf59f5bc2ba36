"""Benchmark plumbing: populate a namespace, create PCRs as kubelet does, watch them reach
a terminal condition, and read process and API-server counters.

What it decides:

* **What is timed.** Keys, stub CSRs and PCR bodies are built before the clock starts
  (key generation is kubelet's cost, not the signer's); a PCR's latency runs from the
  moment its POST returned (the object exists) to the moment our watch saw `Issued`.
* **How Issued is seen.** One namespace-scoped watch (resumed from the last
  resourceVersion, relisting on 410), never polling.
* **What counts as the signer's API requests.** The apiserver's own
  `apiserver_request_total`, restricted to the resources a signer touches, minus what the
  benchmark itself sent (PCR creates, its own list/watch).
* **CPU and memory.** `/proc/<pid>/stat` utime+stime and `/proc/<pid>/status` VmRSS of the
  signer process, so ours and the Go peer are measured the same way.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import ssl
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from controlplane import ControlPlane
from controlplane.kubelet import (
    KEY_TYPES,
    Kubelet,
    PrivateKey,
    generate_key,
    pcr_manifest,
    pcr_path,
    stub_csr,
)
from kube.client import ApiError, Client, is_gone
from kube.transport import StreamCanceller
from kube.types import JSON
from signer import authority
from signer.policy import sans_for
from trust.material import SigningMaterial

# Keys per key type in the pool; RSA-4096 generation takes ~1 s each, so it is reused.
POOL_SIZES = {"RSA3072": 4, "RSA4096": 3, "ECDSAP256": 16, "ECDSAP384": 8, "ECDSAP521": 8}
CREATORS = 16


def monotonic() -> float:
    return time.monotonic()


# --- population ---------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyPool:
    """Pre-generated keys and their stub CSRs, cycled over the six kubelet key types."""

    entries: tuple[tuple[str, PrivateKey, bytes], ...]

    @classmethod
    def generate(cls, key_types: Sequence[str] = KEY_TYPES) -> KeyPool:
        entries = []
        for key_type in key_types:
            for _ in range(POOL_SIZES.get(key_type, 8)):
                key = generate_key(key_type)
                entries.append((key_type, key, stub_csr(key)))
        return cls(tuple(entries))

    def pick(self, i: int) -> tuple[str, PrivateKey, bytes]:
        """Round-robin over key types, then over keys of that type."""
        types = sorted({t for t, _, _ in self.entries})
        by_type = [[e for e in self.entries if e[0] == t] for t in types]
        same = by_type[i % len(types)]
        return same[(i // len(types)) % len(same)]


@dataclass
class Population:
    """A namespace with `groups` Services, each selecting its share of `pods` Pods."""

    namespace: str
    pods: list[JSON]
    services: list[str]

    def service_for(self, pod_index: int) -> str:
        return self.services[pod_index % len(self.services)]


def parallel(fn: Callable[[int], Any], count: int, threads: int = CREATORS) -> list[Any]:
    """`fn(i)` for i in range(count) on a thread pool, results in order."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, range(count)))


def create_namespace(client: Client, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    client.create(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    return name


def populate(
    client: Client,
    prefix: str,
    *,
    pods: int,
    groups: int,
    create_services: bool = True,
    service_prefix: str = "svc",
    headless: bool = False,
) -> Population:
    """Namespace + `pods` Pods labelled `group=g<k>` + (optionally) one Service per group
    (`headless` ones need no ClusterIP: the test server's range has 254)."""
    kubelet = Kubelet(client)
    namespace = create_namespace(client, prefix)
    services = [f"{service_prefix}-{k}" for k in range(groups)]
    if create_services:
        parallel(
            lambda k: kubelet.create_service(
                services[k], namespace, selector={"group": f"g{k}"}, headless=headless
            ),
            groups,
        )
    created = parallel(
        lambda i: kubelet.create_pod(
            f"pod-{i}", namespace, labels={"app": "bench", "group": f"g{i % groups}"}
        ),
        pods,
    )
    return Population(namespace, created, services)


def pcr_bodies(
    population: Population,
    keys: KeyPool,
    count: int,
    *,
    signer_name: str,
    service: Callable[[int], str] | None = None,
) -> list[JSON]:
    """`count` PCR bodies spread over the Pods, each naming its Pod's Service."""
    bodies = []
    for i in range(count):
        pod_index = i % len(population.pods)
        pod = population.pods[pod_index]
        _, key, stub = keys.pick(i)
        name = service(i) if service else population.service_for(pod_index)
        bodies.append(
            pcr_manifest(
                pod,
                key,
                signer_name=signer_name,
                annotations={"kubernetes.io/service-names": name},
                stub=stub,
            )
        )
    return bodies


# --- creating and watching ---------------------------------------------------------------


@dataclass
class Created:
    name: str
    sent: float
    returned: float


class Creator:
    """POSTs PCR bodies from `threads` threads, recording when each POST returned."""

    def __init__(self, client: Client, namespace: str, threads: int = CREATORS) -> None:
        self.client = client
        self.path = pcr_path(namespace)
        self.threads = threads
        self.created: list[Created] = []
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()

    def create_one(self, body: JSON) -> Created | None:
        sent = monotonic()
        try:
            obj = self.client.create(self.path, body)
        except ApiError as err:
            with self._lock:
                self.errors[str(err.status)] += 1
            return None
        record = Created(obj["metadata"]["name"], sent, monotonic())
        with self._lock:
            self.created.append(record)
        return record

    def burst(self, bodies: Sequence[JSON]) -> None:
        parallel(lambda i: self.create_one(bodies[i]), len(bodies), self.threads)

    def paced(self, bodies: Sequence[JSON], rate: float) -> None:
        """Offer `rate` creations per second (open loop: a slow server does not slow the
        offered load down, it makes the requests queue)."""
        start = monotonic()
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            for i, body in enumerate(bodies):
                delay = start + i / rate - monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(self.create_one, body)


class Watcher:
    """Watches one namespace's PCRs and timestamps the first terminal condition of each."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.path = pcr_path(namespace)
        self.terminal: dict[str, tuple[str, float]] = {}
        self.requests = Counter[str]()
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._canceller = StreamCanceller()
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        self._ready = threading.Event()

    def start(self) -> Watcher:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("bench watch did not start")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._canceller.cancel()
        self._thread.join(timeout=10)

    def _list(self) -> str:
        self.requests["LIST"] += 1
        listed = self.client.get(self.path)
        for item in listed.get("items", []):
            self._observe(item)
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = self._list()
        self._ready.set()
        while not self._stop.is_set():
            try:
                self.requests["WATCH"] += 1
                params = {"resourceVersion": rv, "allowWatchBookmarks": True, "timeoutSeconds": 600}
                for event in self.client.watch(
                    self.path, params, read_timeout=120, canceller=self._canceller
                ):
                    obj = event.get("object", {})
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            rv = self._list()
                        break
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._observe(obj)
            except ApiError as err:
                if self._stop.is_set():
                    return
                if is_gone(err):
                    rv = self._list()
                else:
                    time.sleep(0.2)

    def _observe(self, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        if name in self.terminal:
            return
        for cond in obj.get("status", {}).get("conditions") or []:
            if cond.get("type") in ("Issued", "Denied", "Failed") and cond.get("status") == "True":
                now = monotonic()
                with self._cond:
                    self.terminal[name] = (cond["type"], now)
                    self._cond.notify_all()
                return

    def wait_all(self, names: Iterable[str], timeout: float) -> bool:
        wanted = set(names)
        deadline = monotonic() + timeout
        with self._cond:
            while not wanted.issubset(self.terminal):
                left = deadline - monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 1.0))
        return True

    def count_terminal(self, names: Iterable[str]) -> int:
        with self._cond:
            return sum(1 for n in names if n in self.terminal)


# --- results ------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


@dataclass
class Timing:
    issued: int
    not_issued: int
    seconds: float
    per_second: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    create_seconds: float
    outcomes: dict[str, int] = field(default_factory=dict)


def timing(created: Sequence[Created], watcher: Watcher) -> Timing:
    """Throughput (first POST sent → last Issued seen) and creation → Issued latencies."""
    latencies = []
    outcomes: Counter[str] = Counter()
    last = 0.0
    for c in created:
        seen = watcher.terminal.get(c.name)
        if seen is None:
            outcomes["none"] += 1
            continue
        outcomes[seen[0]] += 1
        if seen[0] == "Issued":
            latencies.append(max(0.0, seen[1] - c.returned))
            last = max(last, seen[1])
    latencies.sort()
    first = min((c.sent for c in created), default=0.0)
    seconds = max(last - first, 1e-9)
    issued = outcomes["Issued"]
    return Timing(
        issued=issued,
        not_issued=len(created) - issued,
        seconds=round(seconds, 3),
        per_second=round(issued / seconds, 1),
        p50_ms=round(percentile(latencies, 50) * 1000, 1),
        p95_ms=round(percentile(latencies, 95) * 1000, 1),
        p99_ms=round(percentile(latencies, 99) * 1000, 1),
        max_ms=round((latencies[-1] if latencies else float("nan")) * 1000, 1),
        create_seconds=round(max((c.returned for c in created), default=first) - first, 3),
        outcomes=dict(outcomes),
    )


# --- processes ----------------------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (threads included, children not)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def apiserver_pid(plane: ControlPlane) -> int | None:
    proc = getattr(plane, "_apiserver", None)  # the lead's ControlPlane keeps it private
    return int(proc.pid) if proc is not None else None


# --- API server request counts ------------------------------------------------------------

_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SIGNER_RESOURCES = ("podcertificaterequests", "pods", "services", "events", "clustertrustbundles")


def _ssl(plane: ControlPlane) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(plane.files["serving-ca.crt"]))
    ctx.load_cert_chain(str(plane.files["admin.crt"]), str(plane.files["admin.key"]))
    return ctx


def request_totals(plane: ControlPlane) -> Counter[tuple[str, str, str]]:
    """`apiserver_request_total` summed over codes, by (verb, resource, subresource), for
    the resources a signer touches."""
    with urllib.request.urlopen(f"{plane.host}/metrics", context=_ssl(plane), timeout=10) as r:
        text = r.read().decode()
    totals: Counter[tuple[str, str, str]] = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        if labels.get("resource") in SIGNER_RESOURCES:
            key = (labels["verb"], labels["resource"], labels.get("subresource", ""))
            totals[key] += int(float(m.group("value")))
    return totals


def signer_requests(
    before: Counter[tuple[str, str, str]],
    after: Counter[tuple[str, str, str]],
    bench: Counter[str],
) -> dict[str, int]:
    """Requests in the window that the benchmark did not send, by `VERB resource[/sub]`:
    PCR creates are the benchmark's, and so are its own PCR list/watch calls."""
    out: dict[str, int] = {}
    for key in set(after) | set(before):
        delta = after[key] - before[key]
        verb, resource, sub = key
        if resource == "podcertificaterequests" and not sub:
            if verb == "POST":
                continue
            if verb in ("LIST", "WATCH"):
                delta -= bench.get(verb, 0)
        if delta > 0:
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] = delta
    return dict(sorted(out.items()))


# --- pre-signed certificates (the ceiling) ------------------------------------------------


def status_key(pcr: JSON) -> str:
    """What a pre-signed status is looked up by: the stub CSR (base64, as on the wire)
    and the Service annotation (bench/ceiling/main.go computes the same)."""
    spec = pcr["spec"]
    service = (spec.get("unverifiedUserAnnotations") or {}).get("kubernetes.io/service-names")
    return f"{spec.get('stubPKCS10Request', '')}|{service}"


def presign_status(
    material: SigningMaterial, obj: JSON, key: PrivateKey, domain: str = "cluster.local"
) -> JSON:
    """An `Issued` status for the stored PCR `obj`, made by our own `signer.authority`
    (the same certificate profile the signer writes), so only the signing time is moved
    out of the clock."""
    ns = obj["metadata"]["namespace"]
    svc = obj["spec"]["unverifiedUserAnnotations"]["kubernetes.io/service-names"]
    now = dt.datetime.now(dt.UTC)
    max_seconds = int(obj["spec"].get("maxExpirationSeconds", 86400))
    issued = authority.issue(
        material,
        key.public_key(),
        sans_for(ns, domain, [svc], None),
        max_seconds,
        max_seconds,
        now,
    )
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    return {
        "conditions": [
            {
                "type": "Issued",
                "status": "True",
                "reason": "Issued",
                "message": "pre-signed by the benchmark",
                "lastTransitionTime": now.strftime(fmt),
            }
        ],
        "certificateChain": issued.chain_pem,
        "notBefore": issued.not_before.strftime(fmt),
        "notAfter": issued.not_after.strftime(fmt),
        "beginRefreshAt": issued.begin_refresh_at.strftime(fmt),
    }


def apiserver_metrics(plane: ControlPlane) -> str:
    """The API server's `/metrics` text (admin credentials)."""
    with urllib.request.urlopen(f"{plane.host}/metrics", context=_ssl(plane), timeout=10) as r:
        text: str = r.read().decode()
        return text


def sum_samples(text: str, name: str, match: Callable[[dict[str, str]], bool]) -> float:
    """Sum of the samples of metric `name` whose labels satisfy `match`."""
    total = 0.0
    prefix = name + "{"
    for line in text.splitlines():
        if line.startswith(prefix):
            labels_text, _, value = line[len(prefix) :].rpartition("} ")
            if match(dict(_LABEL.findall(labels_text))):
                total += float(value)
    return total
