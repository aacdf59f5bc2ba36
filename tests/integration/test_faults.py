"""Fault injection against the real control plane: the signer (the real CLI, as a
subprocess) survives each fault, and the API server's end state proves it.

The module has control planes of its own, never the session's: its tests restart
kube-apiserver, compact etcd or count the API server's request metrics, which other
modules' work would muddle. Tests 1-3 and 5 share one (each counts from its own start,
and a restart leaves a working server behind); the throttling test has one configured
for it. Each runs `service-serving-signer run --leader-elect=false` with a signer name
of its own. What each asserts on the API server:

1. kube-apiserver SIGKILLed and restarted mid-burst: every PCR in the namespace (created
   before, during and after the outage) ends Issued; `/healthz` answered 200 throughout;
   the signer counted at most one issuance per PCR.
2. etcd compacted past the signer's resourceVersion while its watch was down (signer
   SIGSTOPped, apiserver SIGKILLed and restarted, PCRs created, etcd compacted, signer
   SIGCONTed): the reconnecting watches get 410 Gone, the informers relist (a cluster-wide
   LIST on the restarted server proves it), and the PCRs created while it was away — never
   sent on its old watch — are Issued.
3. The signer SIGKILLed mid-burst and started again: every PCR Issued, and the API server
   accepted exactly one successful status write per PCR.
4. Throttling (`--max-requests-inflight=1 --max-mutating-requests-inflight=1`, APF off, the
   signer running as a non-`system:masters` user so the limit applies to it): the API
   server answered 429s, the signer's `/metrics` counted them as the KEP's
   `requests_total{result="error"}` (equal to `controller_sync_total`'s), every PCR ends
   Issued (`result="issued"`) and a request with an invalid annotation ends Denied
   (`result="failed"`); the 429 count stays bounded, which it would not if
   `Retry-After: 1` were ignored.
5. The signing key replaced by garbage mid-burst, then key+cert+bundle replaced by a new
   CA: every PCR Issued, each leaf verifies against exactly the CA (old or new) named by
   its issuer and authority key identifier — none was signed with mixed material.
6. A stalled watch (server accepts, sends nothing) is detected by the read timeout and
   re-established: covered at the informer level by
   `tests/unit/kube/test_informer.py::test_stalled_watch_is_detected_by_the_read_timeout_and_reestablished`
   (an in-process fake server can stall on demand; a real kube-apiserver cannot).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from bench.harness import (
    KeyPool,
    Population,
    apiserver_metrics,
    apiserver_pid,
    pcr_bodies,
    populate,
    sum_samples,
)
from bench.signers import OurSigner
from controlplane import ControlPlane
from controlplane.kubelet import pcr_path
from kube.client import ApiError, Client
from kube.types import JSON
from trust.ca import CertificateAuthority, cert_pem, generate_ca, key_pem, write_ca

ISSUED = 'result="issued"'
FAILED = 'result="failed"'
KEP_ERROR = 'result="error"'
ERROR = 'controller="signer",result="error"'
REQUESTS = "service_serving_ca_controller_requests_total"


# --- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture(scope="module")
def keys() -> KeyPool:
    return KeyPool.generate(("ECDSAP256", "ED25519", "ECDSAP384"))


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane.start() as own:
        yield own


def signer_name() -> str:
    return f"f{uuid.uuid4().hex[:8]}.kubernetes.io/service-serving"


def start_signer(plane: ControlPlane, workdir: Path, name: str, **kwargs: Any) -> OurSigner:
    signer = OurSigner(plane, workdir, signer_name=name, **kwargs).start()
    signer.wait_ready()
    return signer


class Burst:
    """Creates PCR bodies from a background thread, retrying through API outages the way
    kubelet does (any transport error, 429 or 5xx: wait and POST again)."""

    def __init__(self, client: Client, namespace: str, bodies: list[JSON], pace: float) -> None:
        self.client = client
        self.path = pcr_path(namespace)
        self.bodies = bodies
        self.pace = pace
        self.created = 0
        self.retries = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Burst:
        self._thread.start()
        return self

    def _run(self) -> None:
        for body in self.bodies:
            while True:
                try:
                    self.client.create(self.path, body, timeout=5)
                    break
                except ApiError as err:
                    if not err.transient:
                        raise
                    self.retries += 1
                    time.sleep(0.2)
            self.created += 1
            time.sleep(self.pace)

    def wait_created(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.created < count:
            assert time.monotonic() < deadline, f"only {self.created} of {count} PCRs created"
            time.sleep(0.05)

    def join(self, timeout: float = 120) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "creating the PCRs did not finish"


def pcrs(client: Client, namespace: str) -> list[JSON]:
    items: list[JSON] = client.get(pcr_path(namespace))["items"]
    return items


def outcome(pcr: JSON) -> str | None:
    for cond in pcr.get("status", {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Issued", "Denied", "Failed"):
            return str(cond["type"])
    return None


def wait_all_issued(client: Client, namespace: str, expected: int, timeout: float = 120) -> None:
    """Poll (the API server may have been restarted: no long watch) until `expected` PCRs
    exist in `namespace` and all are Issued; fail on any Denied/Failed."""
    deadline = time.monotonic() + timeout
    summary: dict[str | None, int] = {}
    while time.monotonic() < deadline:
        try:
            items = pcrs(client, namespace)
        except ApiError:
            time.sleep(0.5)
            continue
        summary = {}
        for item in items:
            summary[outcome(item)] = summary.get(outcome(item), 0) + 1
        assert not summary.get("Denied") and not summary.get("Failed"), summary
        if len(items) >= expected and summary.get("Issued", 0) == len(items):
            return
        time.sleep(0.5)
    pytest.fail(f"not all {expected} PCRs Issued after {timeout:.0f}s: {summary}")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting: {what}"
        time.sleep(0.1)


def status_writes(plane: ControlPlane, codes: Callable[[str], bool]) -> float:
    return sum_samples(
        apiserver_metrics(plane),
        "apiserver_request_total",
        lambda lb: (
            lb.get("resource") == "podcertificaterequests"
            and lb.get("subresource") == "status"
            and codes(lb.get("code", ""))
        ),
    )


def setup(
    plane: ControlPlane, keys: KeyPool, count: int
) -> tuple[Client, str, Population, list[JSON]]:
    """An unthrottled admin client (system:masters: exempt from API priority and fairness
    limits too), a fresh signer name, 20 Pods in 4 groups, and `count` request bodies."""
    client: Client = plane.client(qps=0)
    name = signer_name()
    pop = populate(client, "faults", pods=20, groups=4)
    return client, name, pop, pcr_bodies(pop, keys, count, signer_name=name)


# --- 1. kube-apiserver killed and restarted mid-burst -----------------------------------


def test_apiserver_killed_and_restarted_mid_burst(
    plane: ControlPlane, keys: KeyPool, tmp_path: Path
) -> None:
    client, name, pop, bodies = setup(plane, keys, 240)
    signer = start_signer(plane, tmp_path, name)
    health: list[bool] = []
    probing = threading.Event()

    def probe() -> None:
        while not probing.is_set():
            health.append(signer.healthz())
            time.sleep(0.2)

    prober = threading.Thread(target=probe, daemon=True)
    try:
        prober.start()
        burst = Burst(client, pop.namespace, bodies, pace=0.01).start()
        burst.wait_created(80)
        pid = apiserver_pid(plane)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        plane.stop_apiserver()  # reaps the killed process
        time.sleep(3)  # the signer's watches and writes fail meanwhile
        plane.start_apiserver()
        burst.join()
        wait_all_issued(client, pop.namespace, len(bodies))
        issued = signer.metric("service_serving_ca_controller_requests_total", ISSUED)
    finally:
        probing.set()
        prober.join(5)
        signer.stop()
    assert health and all(health), f"/healthz failed {health.count(False)} of {len(health)}"
    total = len(pcrs(client, pop.namespace))
    assert total >= len(bodies)
    # A write whose response was lost is found Issued on re-read and not counted again.
    assert 0 < issued <= total


# --- 2. etcd compaction past the signer's resourceVersion while its watch is down ---------


def test_relists_after_compaction_past_its_resource_version(
    plane: ControlPlane, keys: KeyPool, tmp_path: Path
) -> None:
    client, name, pop, bodies = setup(plane, keys, 120)
    signer = start_signer(plane, tmp_path, name)
    try:
        path = pcr_path(pop.namespace)
        for body in bodies[:40]:
            client.create(path, body)
        wait_all_issued(client, pop.namespace, 40)
        os.kill(signer.pid, signal.SIGSTOP)  # its watches now read nothing
        try:
            for body in bodies[40:80]:  # may still reach its socket buffer
                client.create(path, body)
            # SIGKILL, not SIGTERM: a graceful apiserver sends watchers a last BOOKMARK
            # with its newest resourceVersion, which would spare the signer the 410.
            pid = apiserver_pid(plane)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            plane.stop_apiserver()
            plane.start_apiserver()
            for body in bodies[80:]:  # never sent on the signer's old watch
                client.create(path, body)
            for i in range(100):  # move etcd's revision well past the signer's
                client.create(
                    f"/api/v1/namespaces/{pop.namespace}/configmaps",
                    {"metadata": {"name": f"churn-{i}"}, "data": {"i": str(i)}},
                )
            assert plane.compact_etcd() > 0
        finally:
            os.kill(signer.pid, signal.SIGCONT)
        wait_all_issued(client, pop.namespace, len(bodies))
        # The restarted API server's counters start at zero: a cluster-wide LIST now can
        # only be one of the signer's informers relisting after 410 Gone (our own lists
        # are namespaced).
        relists = sum_samples(
            apiserver_metrics(plane),
            "apiserver_request_total",
            lambda lb: (
                lb.get("verb") == "LIST"
                and lb.get("resource") in ("podcertificaterequests", "pods", "services")
                and lb.get("scope") == "cluster"
            ),
        )
    finally:
        signer.stop()
    assert relists >= 1, "the signer never relisted after its resourceVersion was compacted"


# --- 3. signer SIGKILLed mid-burst and restarted --------------------------------------------


def test_signer_sigkilled_mid_burst_issues_each_pcr_exactly_once(
    plane: ControlPlane, keys: KeyPool, tmp_path: Path
) -> None:
    client, name, pop, bodies = setup(plane, keys, 300)
    ok_before = status_writes(plane, lambda code: code.startswith("2"))
    first = start_signer(plane, tmp_path, name)
    burst = Burst(client, pop.namespace, bodies, pace=0.005).start()
    try:
        burst.wait_created(120)
        first.kill()
    finally:
        first.stop()
    second = start_signer(plane, tmp_path, name, ca_dir=first.ca_dir)
    try:
        burst.join()
        wait_all_issued(client, pop.namespace, len(bodies))
    finally:
        second.stop()
    assert len(pcrs(client, pop.namespace)) == len(bodies)
    ok = status_writes(plane, lambda code: code.startswith("2")) - ok_before
    assert ok == len(bodies), f"{ok} successful status writes for {len(bodies)} PCRs"


# --- 4. API throttling -------------------------------------------------------------------


def limited_user_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    """A kubeconfig for user `bench-signer` (cluster-admin by binding, not system:masters,
    so the API server's inflight limits apply to it)."""
    admin: Client = plane.client()
    admin.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "metadata": {"name": "bench-signer-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bench-signer"}
            ],
        },
    )
    config = plane.kubeconfig_for(user=plane.pki.client_cert("bench-signer"))
    path.write_text(json.dumps(config))
    return path


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: certificates.k8s.io
    resources: ["podcertificaterequests/status"]
- level: None
"""


@pytest.fixture
def throttled_plane(tmp_path: Path) -> Iterator[ControlPlane]:
    """Inflight limits of 1 (APF off, so the classic filter answers 429 + Retry-After: 1)
    and an audit log of every PCR status write, 429s included."""
    policy = tmp_path / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    own = ControlPlane.start(
        extra_args=(
            "--enable-priority-and-fairness=false",
            "--max-requests-inflight=1",
            "--max-mutating-requests-inflight=1",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={tmp_path / 'audit.log'}",
            "--audit-log-mode=blocking",
        )
    )
    try:
        yield own
    finally:
        own.stop()


def status_attempts(audit_log: Path) -> dict[str, list[tuple[float, int]]]:
    """Per PCR name, its status writes as (time received, response code), in order."""
    attempts: dict[str, list[tuple[float, int]]] = {}
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        name = event.get("objectRef", {}).get("name")
        code = event.get("responseStatus", {}).get("code")
        if not name or code is None:
            continue
        received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
        attempts.setdefault(name, []).append((received, int(code)))
    for seq in attempts.values():
        seq.sort()
    return attempts


def test_throttling_429s_are_absorbed_with_backoff(
    throttled_plane: ControlPlane, keys: KeyPool, tmp_path: Path
) -> None:
    plane = throttled_plane
    client, name, pop, bodies = setup(plane, keys, 200)
    kubeconfig = limited_user_kubeconfig(plane, tmp_path / "limited.kubeconfig")
    signer = OurSigner(plane, tmp_path, signer_name=name, workers=8)
    signer.args = [a for a in signer.args if not a.startswith("--kubeconfig=")]
    signer.args.append(f"--kubeconfig={kubeconfig}")
    signer.start().wait_ready()
    try:
        Burst(client, pop.namespace, bodies, pace=0).start().join()
        wait_all_issued(client, pop.namespace, len(bodies), timeout=180)
        # The last issue is counted after its status write returns: read once it is.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            issued = signer.metric(REQUESTS, ISSUED)
            if issued >= len(bodies):
                break
            time.sleep(0.05)
        # One request the signer must deny (an invalid Service name): the KEP's `failed`.
        bad = pcr_bodies(pop, keys, 1, signer_name=name, service=lambda _: "Not_A_Label")[0]
        client.create(pcr_path(pop.namespace), bad)
        wait_for(lambda: signer.metric(REQUESTS, FAILED) == 1, "the denial counted as failed")
        failed = signer.metric(REQUESTS, FAILED)
        issued = signer.metric(REQUESTS, ISSUED)
        kep_errors = signer.metric(REQUESTS, KEP_ERROR)
        errors = signer.metric("controller_sync_total", ERROR)
    finally:
        signer.stop()
    throttled = sum_samples(
        apiserver_metrics(plane), "apiserver_request_total", lambda lb: lb.get("code") == "429"
    )
    assert throttled > 0, "the inflight limit never rejected anything: the test proves nothing"
    assert kep_errors is not None and kep_errors > 0, "429s must be counted as result=error"
    assert kep_errors == errors, "the KEP's error count and the loop's must agree"
    assert issued == len(bodies)
    assert failed == 1
    # Retry-After: 1 honoured per request: after a 429, the next status write for the same
    # PCR comes at least a second later (the API server's timestamps, from its audit log).
    attempts = status_attempts(tmp_path / "audit.log")
    gaps = [
        later[0] - earlier[0]
        for seq in attempts.values()
        for earlier, later in itertools.pairwise(seq)
        if earlier[1] == 429
    ]
    assert gaps, "no status write was throttled: the test proves nothing"
    assert min(gaps) >= 0.9, f"retried {min(gaps):.3f}s after a 429 with Retry-After: 1"
    assert all(seq[-1][1] < 300 for seq in attempts.values()), "a PCR ended on an error"


# --- 5. signing files replaced by garbage mid-burst, then fixed ------------------------------


def write_files(ca_dir: Path, ca: CertificateAuthority, bundle: list[x509.Certificate]) -> None:
    """Replace the three files in place (not atomically, like a careless operator),
    bundle first, then key, then cert."""
    (ca_dir / "trust-bundle.pem").write_bytes(cert_pem(*bundle))
    (ca_dir / "ca.key").write_bytes(key_pem(ca.key))
    (ca_dir / "ca.crt").write_bytes(cert_pem(ca.cert))


def signed_by(leaf: x509.Certificate, ca: CertificateAuthority) -> bool:
    try:
        leaf.verify_directly_issued_by(ca.cert)
    except (ValueError, TypeError, Exception):
        return False
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return aki.key_identifier == ski.digest


def test_garbage_signing_files_mid_burst_then_fixed(
    plane: ControlPlane, keys: KeyPool, tmp_path: Path
) -> None:
    client, name, pop, bodies = setup(plane, keys, 240)
    old, new = generate_ca("fault-test old CA"), generate_ca("fault-test new CA")
    ca_dir = tmp_path / "ca"
    write_ca(ca_dir, ca=old)
    signer = start_signer(plane, tmp_path, name, ca_dir=ca_dir)
    path = pcr_path(pop.namespace)
    reload_total = "service_serving_ca_controller_material_reload_total"
    late: list[str] = []
    try:
        burst = Burst(client, pop.namespace, bodies[:160], pace=0.01).start()
        burst.wait_created(40)
        (ca_dir / "ca.key").write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n")
        burst.wait_created(80)
        (ca_dir / "ca.crt").write_bytes(b"not a certificate at all")
        wait_for(lambda: signer.metric(reload_total, 'result="invalid"') > 0, "garbage noticed")
        burst.wait_created(120)
        ok_before = signer.metric(reload_total, 'result="ok"')
        write_files(ca_dir, new, [old.cert, new.cert])
        burst.join()
        wait_for(lambda: signer.metric(reload_total, 'result="ok"') > ok_before, "new CA loaded")
        late = [client.create(path, body)["metadata"]["name"] for body in bodies[160:]]
        wait_all_issued(client, pop.namespace, len(bodies))
    finally:
        signer.stop()
    counts = {"old": 0, "new": 0}
    for item in pcrs(client, pop.namespace):
        leaf = x509.load_pem_x509_certificates(item["status"]["certificateChain"].encode())[0]
        by_old, by_new = signed_by(leaf, old), signed_by(leaf, new)
        assert by_old != by_new, f"{item['metadata']['name']}: leaf not signed by one whole CA"
        counts["old" if by_old else "new"] += 1
        if item["metadata"]["name"] in late:
            assert by_new, "a request created after the new CA loaded was signed by the old"
    assert counts["old"] > 0 and counts["new"] >= len(late), counts
