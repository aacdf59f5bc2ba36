"""The managed CA against the real API server, with real `run` processes:
bootstrap from nothing (two replicas racing make one CA), `ca rotate` through stage and
swap with every phase persisted, a leader SIGKILLed in each phase and its successor
resuming there, and retire driven by the persisted timestamps."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, pcr_path
from kube.client import ApiError, Client, is_not_found
from managedca.codec import PREVIOUS, decode
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.integration.managed_ca_harness import (
    ca_cli,
    edit,
    move_retire_time_to_the_past,
    phase,
    shipped_report_lease,
)
from tests.integration.manager_process import SignerProcess, eventually, issue_one, wait_issued
from trust.clustertrustbundles import anchors_of

LEASE = (
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=500ms",
)
PHASE_METRIC = "service_serving_ca_controller_managed_ca_phase"
EXPIRY_METRIC = "service_serving_ca_controller_managed_ca_expiry_timestamp_seconds"
DELAY = 8.0  # --managed-ca-propagation-delay in these tests


class Managed:
    """Processes in managed mode for one signer name, in one namespace."""

    def __init__(
        self, control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
    ) -> None:
        self.control_plane = control_plane
        self.client = client
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.signer_name = f"t{uuid.uuid4().hex[:10]}.example.com/managed"
        self.lease = f"ca-{uuid.uuid4().hex[:8]}"
        self.processes: list[SignerProcess] = []  # the signer's replicas
        self.helpers: list[SignerProcess] = []  # other processes (an injector)
        self.ca_pems: dict[str, bytes] = {}
        self.secret_path = f"/api/v1/namespaces/{namespace}/secrets/{DEFAULT_SECRET_NAME}"

    def start(self, name: str, *extra: str) -> SignerProcess:
        proc = SignerProcess(
            self.control_plane.kubeconfig,
            None,
            self.tmp_path / f"{name}.log",
            "--ca-mode=managed",
            f"--leader-elect-resource-namespace={self.namespace}",
            f"--leader-elect-resource-name={self.lease}",
            f"--managed-ca-propagation-delay={int(DELAY)}s",
            "--managed-ca-allow-short-propagation-delay",
            "--max-certificate-lifetime=1h",
            "--managed-ca-retire-margin=5m",
            *LEASE,
            *extra,
            signer_name=self.signer_name,
        )
        self.processes.append(proc)
        return proc

    def start_injector(self) -> SignerProcess:
        """A `--controllers=injector` process reporting its convergence in this namespace
        (the default report name), under its own leader Lease: stopped by `stop_all`."""
        proc = SignerProcess(
            self.control_plane.kubeconfig,
            None,
            self.tmp_path / "injector.log",
            "--controllers=injector",
            f"--leader-elect-resource-namespace={self.namespace}",
            *LEASE,
            signer_name=None,
        )
        self.helpers.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in [*self.processes, *self.helpers]:
            proc.stop()

    def secret(self) -> dict[str, Any] | None:
        try:
            return self.client.get(self.secret_path)
        except ApiError as err:
            if is_not_found(err):
                return None
            raise

    def annotations(self) -> dict[str, str]:
        secret = self.secret() or {}
        return dict((secret.get("metadata") or {}).get("annotations") or {})

    def phase(self) -> str | None:
        return phase(self.client, self.secret_path)

    def published(self) -> frozenset[str]:
        listed = self.client.get(
            "/apis/certificates.k8s.io/v1/clustertrustbundles",
            {"fieldSelector": f"spec.signerName={self.signer_name}"},
        )
        return frozenset().union(*(anchors_of(i["spec"]["trustBundle"]) for i in listed["items"]))

    def ca(self, role: str = "current") -> str:
        state = decode(self.secret() or {}).state
        ca = state.current if role == "current" else state.next
        assert ca is not None
        return ca.fingerprint

    def ca_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return ca_cli(
            self.control_plane.kubeconfig,
            *args,
            f"--signer-namespace={self.namespace}",
            f"--signer-name={self.signer_name}",
        )

    def leader(self) -> SignerProcess:
        assert eventually(lambda: any(p.alive() and p.leading() for p in self.processes), 20)
        return next(p for p in self.processes if p.alive() and p.leading())

    def issue(self, kubelet: Kubelet, name: str) -> str:
        """Issue one certificate; return the fingerprint of the CA that signed it."""
        pcr = issue_one(kubelet, self.namespace, name, signer_name=self.signer_name)
        assert wait_issued(self.client, self.namespace, pcr, 30), pcr
        status = self.client.get(pcr_path(self.namespace, "v1", pcr))["status"]
        leaf = x509.load_pem_x509_certificates(status["certificateChain"].encode())[0]
        # Every CA seen in the Secret so far (it may be gone for a moment: deleted).
        for ca_pem in _all_ca_pems(self.secret() or {}):
            self.ca_pems[pem_fingerprints(ca_pem)[0]] = ca_pem
        for fp in self.published():
            if fp in self.ca_pems and _signed_by(leaf, self.ca_pems[fp]):
                return fp
        raise AssertionError("the leaf is signed by no published CA")


def _all_ca_pems(secret: dict[str, Any]) -> list[bytes]:
    from managedca.layout import split_pem
    from managedca.material import bundle_pem, secret_data

    return split_pem(bundle_pem(secret_data(secret)))


def _signed_by(leaf: x509.Certificate, ca_pem: bytes) -> bool:
    try:
        leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_pem))
    except Exception:
        return False
    return True


@pytest.fixture
def managed(control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path) -> Any:
    m = Managed(control_plane, client, namespace, tmp_path)
    yield m
    m.stop_all()


def test_two_replicas_racing_bootstrap_make_one_ca_and_issue_within_seconds(
    managed: Managed, kubelet: Kubelet
) -> None:
    """Without leader election both replicas run the CA controller at once: the
    conditional create lets one win, the other adopts its CA."""
    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    started = time.monotonic()
    a = managed.start("a", "--leader-elect=false")
    b = managed.start("b", "--leader-elect=false")
    assert eventually(lambda: managed.phase() == "Stable", 30), managed.annotations()
    assert managed.published() == {managed.ca()}, "one CA, published"
    assert managed.issue(kubelet, "first") == managed.ca()
    first_certificate = time.monotonic() - started
    print(f"managed mode: start to first issued certificate {first_certificate:.1f}s")
    assert eventually(lambda: a.ready() and b.ready(), 10), "both replicas serve the one CA"
    created = [line for p in (a, b) for line in p.log_lines() if "created the managed CA" in line]
    assert len(created) == 1, created
    phases = [p.metric(PHASE_METRIC, 'phase="Stable"') for p in (a, b)]
    assert max(v or 0 for v in phases) == 1
    expiry = max(p.metric(EXPIRY_METRIC, 'role="current"') or 0 for p in (a, b))
    assert expiry > time.time() + 300 * 86400, "the CA's notAfter (a year) is exported"
    assert not any("PRIVATE KEY" in line for p in (a, b) for line in p.log_lines())


def test_a_move_from_file_mode_keeps_the_published_roots_until_their_leaves_expire(
    managed: Managed, kubelet: Kubelet, tmp_path: Path
) -> None:
    """The file-mode CA's root (already published, leaves already issued) stays in the
    bundle as a previous root until swap time + longest leaf + margin."""
    from trust.ca import write_ca

    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    files = write_ca(tmp_path / "file-ca")
    old = pem_fingerprints(files.trust_bundle.read_bytes())[0]
    file_mode = SignerProcess(
        managed.control_plane.kubeconfig,
        files.key.parent,
        tmp_path / "file.log",
        f"--leader-elect-resource-namespace={managed.namespace}",
        f"--leader-elect-resource-name={managed.lease}",
        signer_name=managed.signer_name,
    )
    try:
        assert eventually(lambda: managed.published() == {old}, 30)
    finally:
        assert file_mode.stop() == 0
    managed.start("a")
    assert eventually(lambda: managed.phase() == "Retiring", 30), managed.annotations()
    new = managed.ca()
    assert managed.published() == {old, new}
    # Adopting the file-mode root is a stage: the new CA signs only once the bundle read
    # back held it for the propagation delay.
    notes = managed.annotations()
    published_at = _time(notes, "published-at")
    swap_not_before = _time(notes, "swap-not-before")
    assert published_at + timedelta(seconds=DELAY + 1) >= swap_not_before
    assert swap_not_before >= published_at + timedelta(seconds=DELAY)
    assert _time(notes, "confirmed-at") >= swap_not_before

    def retire_scheduled() -> bool:
        return bool(json.loads(managed.annotations()[PREVIOUS])[0].get("retireAt"))

    assert eventually(retire_scheduled, 15), managed.annotations()
    retire = json.loads(managed.annotations()[PREVIOUS])[0]
    assert retire["fingerprint"] == old
    left = datetime.strptime(retire["retireAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert left > datetime.now(UTC) + timedelta(hours=1), "swap + 1h leaves + 5m margin"
    assert managed.issue(kubelet, "after-move") == new


def test_rotate_stages_swaps_and_retires_with_every_phase_persisted(
    managed: Managed, kubelet: Kubelet
) -> None:
    """The staged phase is held by a gate the test controls, not by the clock: an
    injector is installed (its convergence report Lease shipped empty, as config/injector
    ships it) but not running, so the swap waits for its report however long the checks
    of the staged phase take; the injector is started once they are done."""
    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    managed.start("a")
    managed.start("b")
    assert eventually(lambda: managed.phase() == "Stable", 30)
    old = managed.ca()
    assert managed.issue(kubelet, "before") == old
    shipped_report_lease(managed.client, managed.namespace)

    rotated = managed.ca_cli("rotate")
    asked = time.monotonic()
    assert rotated.returncode == 0, rotated.stderr
    assert eventually(lambda: managed.phase() == "Staged", 15)
    staged = time.monotonic()
    new = managed.ca("next")
    again = managed.ca_cli("rotate")  # at once: the swap is at least the delay away
    assert again.returncode != 0 and "already under way" in again.stderr
    assert eventually(lambda: managed.published() == {old, new}, 15), "old + new published"
    published = time.monotonic()
    assert managed.issue(kubelet, "during") == old, "still signing with the old CA"
    status = managed.ca_cli("status", "-o", "json")
    assert status.returncode == 0, status.stderr
    assert "PRIVATE" not in status.stdout
    report = json.loads(status.stdout)
    assert report["phase"] == "Staged" and [c["role"] for c in report["cas"]] == [
        "current",
        "next",
    ]
    assert {r["live"] for r in report["replicas"]} == {True} and len(report["replicas"]) == 2
    text = managed.ca_cli("status")
    assert text.returncode == 0 and "Phase:   Staged" in text.stdout, text.stdout
    assert "Waiting:" in text.stdout or "Next step:" in text.stdout

    def waits_for_the_injector() -> bool:
        shown = managed.ca_cli("status", "-o", "json")
        return shown.returncode == 0 and json.loads(shown.stdout).get("reason") == (
            "injector-report-missing"
        )

    # Every other gate is open (the replicas have loaded the new CA): only the injector's
    # report holds the swap now.
    assert eventually(waits_for_the_injector, 30), managed.ca_cli("status").stdout
    assert managed.phase() == "Staged"
    injector = managed.start_injector()
    assert eventually(lambda: managed.phase() == "Retiring", 30), (
        managed.annotations(),
        injector.log_lines()[-20:],
    )
    swapped_seen = time.monotonic()
    notes = managed.annotations()
    staged_at = _time(notes, "staged-at")
    published_at = _time(notes, "published-at")
    swap_not_before = _time(notes, "swap-not-before")
    swapped = _time(notes, "swapped-at")
    assert swapped >= swap_not_before >= published_at + timedelta(seconds=DELAY)
    assert swap_not_before <= published_at + timedelta(seconds=DELAY + 1), "whole seconds, up"
    print(
        f"phases: stage→published {(published_at - staged_at).total_seconds():.0f}s, "
        f"published→swap {(swapped - published_at).total_seconds():.0f}s; observed: "
        f"ca rotate→Staged {staged - asked:.1f}s, →bundle holds both {published - staged:.1f}s, "
        f"→Retiring {swapped_seen - published:.1f}s"
    )
    assert managed.ca() == new
    assert managed.published() == {old, new}, "the old root stays until its retire time"
    assert managed.issue(kubelet, "after") == new

    # Retire is driven by the persisted retire time (every replica signing with the new
    # CA + 1h + 5m): once it is set, move it into the past.
    def retire_scheduled() -> bool:
        return bool(json.loads(managed.annotations()[PREVIOUS])[0].get("retireAt"))

    assert eventually(retire_scheduled, 15), managed.annotations()
    move_retire_time_to_the_past(managed.client, managed.secret_path)
    moved = time.monotonic()
    assert eventually(lambda: managed.phase() == "Stable", 20), managed.annotations()
    assert eventually(lambda: managed.published() == {new}, 15), "the old root is retired"
    print(f"retire time passed → old root out of the bundle {time.monotonic() - moved:.1f}s")
    events = managed.client.get(
        f"/apis/events.k8s.io/v1/namespaces/{managed.namespace}/events",
    )["items"]
    reasons = {e["reason"] for e in events if e["regarding"]["kind"] == "Secret"}
    assert {
        "ManagedCACreated",
        "ManagedCAConfirmed",
        "ManagedCAStaged",
        "ManagedCAPublished",
        "ManagedCASwapped",
        "ManagedCARetireScheduled",
        "ManagedCARetired",
    } <= reasons
    assert not any("PRIVATE KEY" in e.get("note", "") for e in events)


def test_a_leader_killed_in_each_phase_is_resumed_there_by_its_successor(
    managed: Managed, kubelet: Kubelet
) -> None:
    """A replica without the publisher holds each phase that waits for the bundle; it is
    SIGKILLed there, and a full replica resumes from the persisted state (same CAs)."""
    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    # Bootstrapping: created, never confirmed (nothing publishes it).
    a = managed.start("a", "--controllers=signer")
    assert eventually(lambda: managed.phase() == "Bootstrapping", 30)
    first = managed.ca()
    assert any("managed CA without the publisher" in line for line in a.log_lines()), (
        "a process that can never confirm a CA says so"
    )
    time.sleep(1)
    a.kill()
    b = managed.start("b")
    assert eventually(lambda: managed.phase() == "Stable", 30)
    assert managed.ca() == first, "the successor confirmed the same CA"

    # Staged, before the bundle holds both: the next CA survives the kill unchanged.
    reports = f"/apis/coordination.k8s.io/v1/namespaces/{managed.namespace}/leases"
    label = {"labelSelector": f"service-serving-signer/managed-ca-report={DEFAULT_SECRET_NAME}"}
    assert len(managed.client.get(reports, label)["items"]) == 2, "a's (killed) and b's"
    b.stop()
    [stale] = managed.client.get(reports, label)["items"]  # b deleted its own report
    # a's report stopped changing when a died; the leader collects it once it has seen it
    # unchanged for its duration and it says it was renewed over an hour ago (moved here).
    stale["spec"]["renewTime"] = (datetime.now(UTC) - timedelta(hours=2)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ"
    )
    managed.client.replace(f"{reports}/{stale['metadata']['name']}", stale)
    c = managed.start("c", "--controllers=signer")
    assert eventually(c.leading, 20)
    assert eventually(
        lambda: (
            stale["metadata"]["name"]
            not in {i["metadata"]["name"] for i in managed.client.get(reports, label)["items"]}
        ),
        60,
    ), "the leader deleted the stale report (unchanged for its 30 s on the leader's clock)"
    assert managed.ca_cli("rotate").returncode == 0
    assert eventually(lambda: managed.phase() == "Staged", 15)
    nxt = managed.ca("next")
    time.sleep(1)
    assert "service-serving-signer/ca-published-at" not in managed.annotations()
    c.kill()

    # Staged, published, waiting for the propagation delay: killed again.
    d = managed.start("d", f"--managed-ca-propagation-delay={int(DELAY * 5)}s")
    assert eventually(lambda: "service-serving-signer/ca-published-at" in managed.annotations(), 30)
    assert managed.ca("next") == nxt
    swap_not_before = _time(managed.annotations(), "swap-not-before")
    d.kill()
    e = managed.start("e")
    assert eventually(lambda: managed.phase() == "Retiring", 60), managed.annotations()
    notes = managed.annotations()
    assert managed.ca() == nxt, "the successor swapped to the CA staged before the kills"
    assert _time(notes, "swapped-at") >= swap_not_before, "the persisted delay was honoured"

    # Retiring: killed, and the successor retires on the persisted time.
    e.kill()
    move_retire_time_to_the_past(managed.client, managed.secret_path)
    managed.start("f")
    assert eventually(lambda: managed.phase() == "Stable", 30), managed.annotations()
    assert eventually(lambda: managed.published() == {nxt}, 15)
    assert managed.issue(kubelet, "end") == nxt


def _time(annotations: dict[str, str], name: str) -> datetime:
    return datetime.strptime(
        annotations[f"service-serving-signer/ca-{name}"], "%Y-%m-%dT%H:%M:%SZ"
    ).replace(tzinfo=UTC)


def test_a_deleted_secret_signs_with_no_root_before_it_was_published_for_the_delay(
    managed: Managed, kubelet: Kubelet
) -> None:
    """`kubectl delete secret`: the replicas keep signing with the CA they hold, the
    leader makes a new one and adopts the published roots, and no leaf is signed by the
    new root before the bundle read back held it for the propagation delay."""
    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    managed.start("a")
    managed.start("b")
    assert eventually(lambda: managed.phase() == "Stable", 30)
    old = managed.ca()
    assert managed.issue(kubelet, "before") == old  # remembers the old CA's certificate
    managed.client.delete(managed.secret_path)
    deleted = time.monotonic()
    first_seen: dict[str, float] = {}
    issued: list[tuple[str, float]] = []
    while time.monotonic() - deleted < 60:
        for fp in managed.published() - {old}:
            first_seen.setdefault(fp, time.monotonic())
        issued.append((managed.issue(kubelet, f"leaf-{len(issued)}"), time.monotonic()))
        if issued[-1][0] != old and len(issued) > 1 and issued[-2][0] != old:
            break
    new = managed.ca()
    assert new != old and managed.published() == {old, new}, "the old root stays published"
    by_new = [at for fp, at in issued if fp == new]
    assert by_new, f"the new CA never signed: {issued}"
    assert min(by_new) >= first_seen[new] + DELAY, (
        f"signed {min(by_new) - first_seen[new]:.1f}s after first published"
    )
    assert any(fp == old for fp, at in issued), "the old CA kept signing meanwhile"
    print(
        f"secret deleted: new root published {first_seen[new] - deleted:.1f}s later, first "
        f"leaf under it {min(by_new) - first_seen[new]:.1f}s after that ({len(issued)} leaves)"
    )


class ConvergenceReport:
    """The injector's convergence report Lease (docs/reference.md §11), written by the test
    as the injector would: renewed every second while `renewing`, with the anchors held."""

    NAME = "service-serving-signer-injector-convergence"

    def __init__(self, client: Client, namespace: str) -> None:
        self.client = client
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.anchors: dict[str, dict[str, int]] = {}
        self.renewing = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def hold(self, *fingerprints: str, missing: int = 0) -> None:
        self.anchors = {
            fp: {"selecting": 2, "holding": 2 - missing, "blocked": 0} for fp in fingerprints
        }

    def __enter__(self) -> ConvergenceReport:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(1):
            if self.renewing:
                self._write()

    def _write(self) -> None:
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.NAME,
                "namespace": self.namespace,
                "annotations": {
                    "service-serving-signer/convergence": json.dumps(
                        {
                            "complete": True,
                            "anchors": self.anchors,
                            "observedAnchors": sorted(self.anchors),
                        }
                    )
                },
            },
            "spec": {
                "holderIdentity": "test-injector",
                "renewTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        try:
            current = self.client.get(f"{self.path}/{self.NAME}")
        except ApiError as err:
            if not is_not_found(err):
                raise
            self.client.create(self.path, body)
            return
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.client.replace(f"{self.path}/{self.NAME}", body)


def _status(managed: Managed) -> dict[str, Any]:
    out = managed.ca_cli("status", "-o", "json", f"--lease-name={managed.lease}")
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_the_swap_waits_for_the_injector_and_ca_status_says_so(
    managed: Managed, kubelet: Kubelet
) -> None:
    """Injected consumers are a gate: a report without the next CA holds the swap
    (injector-not-converged), a report no longer renewed holds it (injector-report-stale:
    the injector stopped), and once it renews holding the next CA the swap happens."""
    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    with ConvergenceReport(managed.client, managed.namespace) as injector:
        managed.start("a")
        managed.start("b")
        assert eventually(lambda: managed.phase() == "Stable", 30)
        old = managed.ca()
        injector.hold(old)
        assert managed.ca_cli("rotate").returncode == 0
        assert eventually(lambda: managed.phase() == "Staged", 15)
        new = managed.ca("next")
        injector.hold(old, new, missing=1)  # one webhook still holds only the old root
        assert eventually(lambda: _status(managed).get("reason") == "injector-not-converged", 30)
        time.sleep(DELAY + 2)
        assert managed.phase() == "Staged", "held past the propagation delay"
        assert managed.issue(kubelet, "held") == old

        injector.hold(old, new)  # converged, but the injector stops renewing
        injector.renewing = False
        assert eventually(lambda: _status(managed).get("reason") == "injector-report-stale", 70)
        text = managed.ca_cli("status", f"--lease-name={managed.lease}")
        assert "Waiting: [injector-report-stale]" in text.stdout, text.stdout
        assert managed.phase() == "Staged"

        injector.renewing = True
        assert eventually(lambda: managed.phase() == "Retiring", 40), _status(managed)
        assert managed.issue(kubelet, "after") == new


def test_an_emergency_rotation_removes_the_compromised_root_everywhere_at_once(
    managed: Managed, kubelet: Kubelet
) -> None:
    """`ca rotate --emergency`: the compromised root leaves the bundle and the injected
    webhook caBundle as soon as the new CA is published, no leaf issued after the request
    chains to it, and a deleted Secret does not bring it back (the replicas remember)."""
    from tests.integration.injector_harness import (
        VWC_PATH,
        RunningInjector,
        ca_bundles,
        delete_quietly,
        validating_webhook,
    )

    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    managed.start("a", "--managed-ca-wait-for-injector=false")
    managed.start("b", "--managed-ca-wait-for-injector=false")
    assert eventually(lambda: managed.phase() == "Stable", 30)
    compromised = managed.ca()
    assert managed.issue(kubelet, "before") == compromised
    selector = json.dumps({"signerName": managed.signer_name, "labelSelector": {}})
    name = f"vwc-{uuid.uuid4().hex[:8]}"
    managed.client.create(VWC_PATH, validating_webhook(name, managed.namespace, "hook", selector))

    def injected() -> set[str]:
        vwc = managed.client.get(f"{VWC_PATH}/{name}")
        return {fp for b in ca_bundles(vwc) for fp in anchors_of(base64.b64decode(b).decode())}

    try:
        with RunningInjector(managed.client):
            assert eventually(lambda: injected() == {compromised}, 30)
            asked = managed.ca_cli("rotate", "--emergency", "--yes")
            assert asked.returncode == 0, asked.stderr
            assert eventually(lambda: compromised not in managed.published(), 30)
            new = managed.ca()
            assert new != compromised and managed.published() == {new}
            assert eventually(lambda: injected() == {new}, 30), injected()
            leaves = [managed.issue(kubelet, f"after-{i}") for i in range(3)]
            assert leaves == [new] * 3, "no new leaf chains to the compromised root"

            managed.client.delete(managed.secret_path)  # start over: it stays revoked
            assert eventually(lambda: managed.ca() != new if managed.secret() else False, 30)
            assert eventually(lambda: managed.phase() in ("Retiring", "Stable"), 30)
            assert compromised not in managed.published()
            assert compromised not in (managed.annotations().get(PREVIOUS) or "")
            assert compromised in managed.annotations()["service-serving-signer/ca-revoked"]
    finally:
        delete_quietly(managed.client, VWC_PATH, name)
    events = managed.client.get(f"/apis/events.k8s.io/v1/namespaces/{managed.namespace}/events")
    assert "ManagedCAEmergencyRotation" in {e["reason"] for e in events["items"]}


def test_a_corrupted_next_key_holds_the_swap_until_it_is_mended(
    managed: Managed, kubelet: Kubelet
) -> None:
    """next.key replaced while staged: every replica rejects the next signing set, so the
    swap is held — a Warning Event, material_invalid 1 on the replicas,
    managed_ca_waiting{reason="replica-not-ready"} on the leader (the alert
    ServiceServingSignerManagedCAWaiting fires on it after an hour). The key put back, the
    rotation completes."""
    from trust.ca import generate_ca, key_pem

    kubelet.create_service("web", managed.namespace, selector={"app": "web"})
    a = managed.start("a")
    b = managed.start("b")
    assert eventually(lambda: managed.phase() == "Stable", 30)
    old = managed.ca()
    assert managed.ca_cli("rotate").returncode == 0
    assert eventually(lambda: managed.phase() == "Staged", 15)
    good = (managed.secret() or {})["data"]["next.key"]
    corrupt = base64.b64encode(key_pem(generate_ca("x").key)).decode()
    edit(managed.client, managed.secret_path, lambda s: s["data"].update({"next.key": corrupt}))

    waiting = 'reason="replica-not-ready"'
    metric = "service_serving_ca_controller_managed_ca_waiting"
    assert eventually(lambda: max(p.metric(metric, waiting) or 0 for p in (a, b)) == 1, 30)
    invalid = "service_serving_ca_controller_material_invalid"
    assert eventually(lambda: all(p.metric(invalid) == 1 for p in (a, b)), 15)
    time.sleep(DELAY + 2)
    assert managed.phase() == "Staged", "held past the propagation delay"
    assert managed.issue(kubelet, "held") == old
    events = managed.client.get(f"/apis/events.k8s.io/v1/namespaces/{managed.namespace}/events")
    # Other waits may come first (a replica not yet loaded when the rotation began).
    held = [
        e
        for e in events["items"]
        if e["reason"] == "ManagedCAWaiting" and "replica-not-ready" in e["note"]
    ]
    assert held and all(e["type"] == "Warning" for e in held), events["items"]
    text = managed.ca_cli("status", f"--lease-name={managed.lease}")
    assert "Waiting: [replica-not-ready]" in text.stdout, text.stdout
    plain = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "status",
            f"--kubeconfig={managed.control_plane.kubeconfig}",
            f"--signer-name={managed.signer_name}",
            f"--lease-namespace={managed.namespace}",
            f"--lease-name={managed.lease}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "managed CA: phase Staged, waiting for replica-not-ready" in plain.stdout, plain

    edit(managed.client, managed.secret_path, lambda s: s["data"].update({"next.key": good}))
    assert eventually(lambda: managed.phase() == "Retiring", 40), _status(managed)
    assert all(p.metric(invalid) == 0 for p in (a, b))
    assert managed.issue(kubelet, "after") == managed.ca() != old


def test_ca_status_works_for_a_user_who_cannot_read_the_secret(
    managed: Managed, tmp_path: Path
) -> None:
    """`ca status` reads the report Leases and the ClusterTrustBundles only: a user with
    get/list on Leases in the namespace and list on ClusterTrustBundles — and no access
    to Secrets — sees the leader, the phase and the CAs."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    user = f"viewer-{uuid.uuid4().hex[:6]}"
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    managed.client.create(
        f"{rbac}/namespaces/{managed.namespace}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": user},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "list"],
                }
            ],
        },
    )
    managed.client.create(
        f"{rbac}/namespaces/{managed.namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": user},
            "subjects": subject,
        },
    )
    managed.client.create(
        f"{rbac}/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": user},
            "rules": [
                {
                    "apiGroups": ["certificates.k8s.io"],
                    "resources": ["clustertrustbundles"],
                    "verbs": ["list"],
                }
            ],
        },
    )
    managed.client.create(
        f"{rbac}/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": user},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": user,
            },
            "subjects": subject,
        },
    )
    plane = managed.control_plane
    kubeconfig = plane.write_kubeconfig(tmp_path / "viewer", user=plane.pki.client_cert(user))
    managed.start("a")
    managed.start("b")
    assert eventually(lambda: managed.phase() == "Stable", 30)

    def status() -> subprocess.CompletedProcess[str]:
        return ca_cli(
            kubeconfig,
            "status",
            f"--signer-namespace={managed.namespace}",
            f"--signer-name={managed.signer_name}",
            f"--lease-name={managed.lease}",
        )

    assert eventually(lambda: "Phase:   Stable" in status().stdout, 20), status()
    out = status()
    assert out.returncode == 0, out.stderr
    assert "Leader:  " in out.stdout and "holding" in out.stdout, out.stdout
    assert managed.ca()[:16] in out.stdout and "published" in out.stdout
    rotate = ca_cli(kubeconfig, "rotate", f"--signer-namespace={managed.namespace}")
    assert rotate.returncode != 0 and "forbidden" in rotate.stderr, "no access to the Secret"
    print("\n".join(out.stdout.splitlines()))
    try:
        managed.client.delete(f"{rbac}/clusterrolebindings/{user}")
        managed.client.delete(f"{rbac}/clusterroles/{user}")
    except ApiError:
        pass
