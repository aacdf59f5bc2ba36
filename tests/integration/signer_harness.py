"""Running the signer in-process against the real API server, and waiting on what it wrote.

`RunningSigner` owns one SignerController (own registry, own event recorder, own signing
files in a temp dir) in a thread with a stop Event. Tests default to a signer name unique
to the test (`<random>.kubernetes.io/service-serving`: still a Kubernetes signer for the
API server's 24-hour rule) so requests left pending by other tests in the shared control
plane can never move this test's counters.
"""

from __future__ import annotations

import datetime as dt
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from controlplane.kubelet import Kubelet, pcr_path
from kube.client import Client
from kube.events import EventRecorder
from kube.factory import InformerFactory
from kube.types import JSON
from signer.controller import WAITING_RESYNC_PERIOD, SignerController, informers
from signer.records import terminal_condition
from trust.ca import CaFiles, CertificateAuthority, generate_ca, write_ca
from trust.files import FileMaterialSource

PRODUCT_SIGNER = "kubernetes.io/service-serving"


def unique_signer_name() -> str:
    return f"t{uuid.uuid4().hex[:10]}.kubernetes.io/service-serving"


def expiring_ca(minutes: int = 30) -> CertificateAuthority:
    """A CA valid since yesterday that expires in `minutes`."""
    return generate_ca(
        "expiring test CA",
        not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=1),
        validity=dt.timedelta(days=1, minutes=minutes),
    )


class RunningSigner:
    def __init__(
        self,
        client: Client,
        *,
        signer_name: str | None = None,
        pcr_version: str = "v1",
        workers: int = 4,
        ca: CertificateAuthority | None = None,
        files: CaFiles | None = None,
        intermediate: bool = False,
        max_lifetime_seconds: int = 86400,
        identity: str = "test",
        waiting_resync_period: float | None = None,
        pod_identity_subject: bool = False,
        cluster_ip_sans: bool = False,
    ) -> None:
        self.client = client
        self.signer_name = signer_name or unique_signer_name()
        self._tmp = tempfile.TemporaryDirectory(prefix="signer-")
        self.files = files or write_ca(
            Path(self._tmp.name) / "ca", ca=ca, intermediate=intermediate
        )
        self.registry = CollectorRegistry()
        self.material = FileMaterialSource(
            self.files.key, self.files.cert, self.files.trust_bundle, self.registry, 0.2
        )
        self.recorder = EventRecorder(client, "service-serving-signer", identity)
        self.informers = InformerFactory(client)
        self.caches = informers(
            self.informers, signer_name=self.signer_name, pcr_version=pcr_version
        )
        self.controller = SignerController(
            client,
            self.caches,
            self.material,
            signer_name=self.signer_name,
            domain="cluster.local",
            pcr_version=pcr_version,
            workers=workers,
            registry=self.registry,
            recorder=self.recorder,
            max_lifetime_seconds=max_lifetime_seconds,
            waiting_resync_period=waiting_resync_period or WAITING_RESYNC_PERIOD,
            pod_identity_subject=pod_identity_subject,
            cluster_ip_sans=cluster_ip_sans,
        )
        self.kubelet = Kubelet(client, self.signer_name)
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> RunningSigner:
        self._threads.extend(self.informers.start(self.stop))
        for target, name in (
            (self.material.run, "material"),
            (self.controller.run, "signer"),
        ):
            thread = threading.Thread(target=target, args=(self.stop,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        assert self.informers.wait_for_sync(self.stop, timeout=30), "informers did not sync"
        return self

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self.recorder.stop()
        self._tmp.cleanup()

    def __enter__(self) -> RunningSigner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # reading what happened

    def count(self, result: str) -> float:
        return self.controller.metrics.count(result)

    def errors(self) -> float:
        """Sync attempts that failed and will be retried: the KEP's
        `requests_total{result="error"}`, always equal to the controller loop's
        `controller_sync_total{controller="signer", result="error"}`."""
        loop = self.registry.get_sample_value(
            "controller_sync_total", {"controller": "signer", "result": "error"}
        )
        assert self.count("error") == float(loop or 0.0)
        return self.count("error")

    def counts(self, settle: float = 5.0) -> tuple[float, float, float]:
        """(issued, failed, error) once the workers are idle: a worker counts a result only
        after its status write returns, so a test that saw the write must let it finish."""
        deadline = time.monotonic() + settle
        while not self.controller.queue.idle() and time.monotonic() < deadline:
            time.sleep(0.01)
        return (self.count("issued"), self.count("failed"), self.errors())

    def denied(self, reason: str) -> float:
        value = self.registry.get_sample_value(
            "service_serving_ca_controller_denied_total", {"reason": reason}
        )
        return float(value or 0.0)

    def anchors(self) -> list[x509.Certificate]:
        return list(self.material.current().anchors)

    def bundle_path(self) -> Path:
        return Path(self.files.trust_bundle)


def eventually(
    check: Callable[[], Any], *, timeout: float = 15.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `check` until it returns something truthy; return it."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}: {last!r}")


def read_pcr(client: Client, pcr: JSON, version: str = "v1") -> JSON:
    meta = pcr["metadata"]
    result: JSON = client.get(pcr_path(meta["namespace"], version, meta["name"]))
    return result


def wait_terminal(client: Client, pcr: JSON, version: str = "v1", timeout: float = 15.0) -> JSON:
    """The request once it has a terminal condition."""

    def check() -> JSON | None:
        current = read_pcr(client, pcr, version)
        return current if terminal_condition(current.get("status") or {}) else None

    result: JSON = eventually(check, timeout=timeout, what=f"{pcr['metadata']['name']} terminal")
    return result


def condition(pcr: JSON) -> JSON:
    conditions = (pcr.get("status") or {}).get("conditions") or []
    assert len(conditions) == 1, conditions
    result: JSON = conditions[0]
    return result


def events_for(client: Client, namespace: str, *, reason: str | None = None) -> list[JSON]:
    items: list[JSON] = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if reason is None or e.get("reason") == reason]


def delete_pcrs(client: Client, namespace: str, version: str = "v1") -> None:
    client.delete(
        f"/apis/certificates.k8s.io/{version}/namespaces/{namespace}/podcertificaterequests"
    )


def pod_fqdn_request(signer: RunningSigner, namespace: str, *, headless: bool) -> JSON:
    """Pod db-0 (hostname db-0, subdomain db), Service db selecting it (headless or not),
    and a request asking for the Pod's FQDN (`add-pod-fqdn`); the request as created."""
    kubelet = signer.kubelet
    pod = kubelet.create_pod(
        "db-0", namespace, labels={"app": "db"}, hostname="db-0", subdomain="db"
    )
    kubelet.create_service("db", namespace, selector={"app": "db"}, headless=headless)
    created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/add-pod-fqdn": "true"})
    return created


@contextmanager
def looping(*steps: Callable[[], object], pause: float = 0.05) -> Iterator[None]:
    """Each step run over and over, `pause` apart, on its own daemon thread while the
    block runs (traffic during a rotation); on leaving, stopped and joined (10 s each)."""
    stop = threading.Event()

    def loop(step: Callable[[], object]) -> None:
        while not stop.is_set():
            step()
            time.sleep(pause)

    threads = [threading.Thread(target=loop, args=(step,), daemon=True) for step in steps]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)


def running_signer_fixture(
    client_fixture: str = "client", **options: Any
) -> Callable[[pytest.FixtureRequest], Iterator[RunningSigner]]:
    """A `signer` fixture for a module: a `RunningSigner(<client_fixture>, **options)`
    per test (`signer = running_signer_fixture(...)` at module level)."""

    @pytest.fixture
    def signer(request: pytest.FixtureRequest) -> Iterator[RunningSigner]:
        with RunningSigner(request.getfixturevalue(client_fixture), **options) as running:
            yield running

    return signer
