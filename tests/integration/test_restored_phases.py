"""A CA Secret restored from a backup taken in each phase — Stable, Staged, Swapped,
Retiring, after an emergency — once every later phase has passed, on the real API server
with real `run` processes (a managed signer and a separate injector): every leaf issued
after the restore verifies against every consumer's bundle at the moment it is issued —
the signer's ClusterTrustBundles (what the kubelet projects), an injected webhook
caBundle and an injected ConfigMap. The one exception is the documented one: a CA an
emergency the restore set off (a backup holding a root revoked since) makes signs as soon
as the bundle read back holds it, before the injector has written it; a CA an earlier
emergency made, restored, is held to every consumer.

A consumer holds a root once it has had it for its refresh lag (kubelet rewrites
projected ClusterTrustBundles and ConfigMap volumes later; the managed CA waits the
propagation delay for both), and not while the root is gone, even for a moment: a leaf
signed with a root that has just come back (the publisher puts a restored Secret's roots
back within milliseconds) is one a Pod may fail to verify.

One control plane, one signer and one history serve every case: the history (an
emergency, then a rotation: stage, swap, retire) runs once, a watch keeps every version
of the Secret and of each consumer, and each case first brings the cluster to the
history's end again (every root but the current one retired and gone from every
consumer), then restores the first version of its phase over it (a restore, like
Velero's or a GitOps re-apply, replaces the live object)."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, pcr_path
from kube.client import ApiError, Client
from managedca.codec import EMERGENCY, decode
from managedca.layout import bundle_pem, secret_data, split_pem
from managedca.material import DEFAULT_SECRET_NAME, pem_fingerprints
from tests.conftest import create_test_namespace
from tests.integration.injector_harness import (
    VWC_PATH,
    consumer_config_map,
    delete_quietly,
    validating_webhook,
)
from tests.integration.managed_ca_harness import (
    edit,
    move_retire_time_to_the_past,
    shipped_report_lease,
)
from tests.integration.manager_process import SignerProcess, eventually, issue_one, wait_issued
from tests.integration.test_managed_ca import LEASE, Managed
from trust.consumers import CA_KEY

DELAY = 2  # --managed-ca-propagation-delay (s): the swap's and the convergence's wait
# Each restored over the history's end: the CA a Staged or post-emergency backup names
# as current was retired since (only the state before tells; the read-back holds it
# again at once), the Stable backup holds the root the emergency revoked.
PHASES = ("Staged", "Swapped", "Retiring", "after an emergency", "Stable")
WATCHED_FOR = 3 * DELAY + 4.0  # seconds of issuing after a restore, at least
# How long after a root reaches what a consumer reads it holds it: kubelet refreshes
# projected ClusterTrustBundles and ConfigMap volumes later, and the managed CA waits
# the propagation delay for both; the API server reads a webhook's caBundle at once.
LAG = {"projection": float(DELAY), "webhook caBundle": 0.0, "ConfigMap": float(DELAY)}
# Allowance for the watch's own delivery (a root is stamped when the event arrives,
# later than the write): a leaf may come this much sooner than the lag after it.
SLACK = 0.5


@dataclass
class Versions:
    """Every version of the CA Secret, as a watch delivered them, and the CAs an
    emergency made (current while `ca-emergency` said so)."""

    seen: list[dict[str, Any]] = field(default_factory=list)
    emergency_made: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, secret: dict[str, Any]) -> None:
        with self.lock:
            self.seen.append(secret)
            annotations = secret["metadata"].get("annotations") or {}
            stored = decode(secret)
            if annotations.get(EMERGENCY) == "true" and stored.state is not None:
                self.emergency_made.add(stored.state.current.fingerprint)

    def first(self, phase: str) -> dict[str, Any]:
        with self.lock:
            for secret in self.seen:
                if _phase(secret, self.emergency_made) == phase:
                    return secret
        raise AssertionError(f"the history never reached {phase}")


@dataclass
class Held:
    """When each root entered and left what one consumer reads (the union over the
    objects it reads), stamped as the watch delivered each version: roots held now
    since when, and the spans of roots that left."""

    objects: dict[str, frozenset[str]] = field(default_factory=dict)
    since: dict[str, float] = field(default_factory=dict)
    spans: list[tuple[str, float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, name: str, roots: frozenset[str], at: float) -> None:
        with self.lock:
            self.objects[name] = roots
            now = frozenset().union(*self.objects.values())
            for root in now - self.since.keys():
                self.since[root] = at
            for root in set(self.since) - now:
                self.spans.append((root, self.since.pop(root), at))

    def trusted(self, root: str, at: float, lag: float) -> bool:
        """Whether a consumer reading this with `lag` held `root` at `at`: the root
        reached it at least `lag` (less the slack) before and had not left."""
        with self.lock:
            spans = [*self.spans, *((r, t, float("inf")) for r, t in self.since.items())]
        return any(r == root and start + lag - SLACK <= at < end for r, start, end in spans)

    def history(self, root: str) -> list[tuple[float, float]]:
        """The spans `root` was held (since the watch began; end inf: held now)."""
        with self.lock:
            spans = [*self.spans, *((r, t, float("inf")) for r, t in self.since.items())]
        return [(round(start, 2), round(end, 2)) for r, start, end in spans if r == root]

    def roots(self) -> list[str]:
        with self.lock:
            return sorted(r[:12] for r in self.since)


def _phase(secret: dict[str, Any], emergency_made: set[str]) -> str | None:
    """The phase a backup of `secret` was taken in (the property model's names); None
    while its current CA is not confirmed."""
    state = decode(secret).state
    if state is None or state.confirmed_at is None:
        return None
    if state.next is not None:
        return "Staged"
    if state.previous:
        return "Swapped" if any(p.retire_at is None for p in state.previous) else "Retiring"
    return "after an emergency" if state.current.fingerprint in emergency_made else "Stable"


class Cluster(Managed):
    """The signer, its injector, the two injected consumers, and the Secret's history
    (`Managed`'s reads; the processes are this module's own)."""

    def __init__(
        self, control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
    ) -> None:
        super().__init__(control_plane, client, namespace, tmp_path)
        self.hook = f"restored-{uuid.uuid4().hex[:8]}"
        self.config_map_path = f"/api/v1/namespaces/{namespace}/configmaps/injected"
        self.versions = Versions()
        self.held = {consumer: Held() for consumer in LAG}
        self.leaves = 0

    def asked(self, *args: str) -> None:
        """`ca <args>`, which must succeed."""
        done = self.ca_cli(*args)
        assert done.returncode == 0, done.stderr

    # the consumers ----------------------------------------------------------------------

    def webhook(self) -> set[str]:
        vwc = self.client.get(f"{VWC_PATH}/{self.hook}")
        ca_bundle = vwc["webhooks"][0]["clientConfig"].get("caBundle")
        return set(pem_fingerprints(base64.b64decode(ca_bundle))) if ca_bundle else set()

    def config_map(self) -> set[str]:
        held = (self.client.get(self.config_map_path).get("data") or {}).get(CA_KEY)
        return set(pem_fingerprints(held.encode())) if held else set()

    def consumers(self) -> dict[str, set[str]]:
        return {
            "projection": set(self.published()),  # the signer's ClusterTrustBundles
            "webhook caBundle": self.webhook(),
            "ConfigMap": self.config_map(),
        }

    # leaves -----------------------------------------------------------------------------

    def issue_leaf(self, kubelet: Kubelet) -> tuple[str, float]:
        """Issue one leaf; the fingerprint of the root that signed it, and when it was
        seen issued (the watches' clock)."""
        self.leaves += 1
        name = issue_one(
            kubelet, self.namespace, f"leaf-{self.leaves}", signer_name=self.signer_name
        )
        assert wait_issued(self.client, self.namespace, name, 30), f"{name} was not issued"
        issued = time.monotonic()
        status = self.client.get(pcr_path(self.namespace, "v1", name))["status"]
        leaf = x509.load_pem_x509_certificates(status["certificateChain"].encode())[0]
        for secret in list(self.versions.seen):
            for pem in split_pem(_all_ca_pems(secret)):
                self.ca_pems.setdefault(pem_fingerprints(pem)[0], pem)
        for fp, pem in self.ca_pems.items():
            try:
                leaf.verify_directly_issued_by(x509.load_pem_x509_certificate(pem))
            except Exception:
                continue
            return fp, issued
        raise AssertionError("the leaf was signed by no CA the Secret ever held")


def _all_ca_pems(secret: dict[str, Any]) -> bytes:
    return bundle_pem(secret_data(secret))


def _watch(
    cluster: Cluster,
    path: str,
    params: dict[str, str],
    record: Callable[[str, dict[str, Any]], None],
    stop: threading.Event,
) -> None:
    """Pass every event on `path` to `record` until `stop` (re-watching from the last
    version seen)."""
    version = "0"
    while not stop.is_set():
        try:
            for event in cluster.client.watch(
                path, {**params, "resourceVersion": version}, read_timeout=2
            ):
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    record(event["type"], event["object"])
                    version = event["object"]["metadata"]["resourceVersion"]
                if stop.is_set():
                    return
        except ApiError:
            time.sleep(0.1)


def _watched(
    cluster: Cluster,
) -> list[tuple[str, dict[str, str], Callable[[str, dict[str, Any]], None]]]:
    """What each watch reads and records: the Secret's versions, and the roots of each
    consumer's objects (the signer's ClusterTrustBundles, the webhook, the ConfigMap)."""

    def secret(kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED":
            cluster.versions.add(obj)

    def held(consumer: str, pem: Callable[[dict[str, Any]], str | None]) -> Any:
        def record(kind: str, obj: dict[str, Any]) -> None:
            at = time.monotonic()
            text = None if kind == "DELETED" else pem(obj)
            roots = frozenset(pem_fingerprints(text.encode())) if text else frozenset()
            cluster.held[consumer].update(obj["metadata"]["name"], roots, at)

        return record

    def ca_bundle(vwc: dict[str, Any]) -> str | None:
        encoded = vwc["webhooks"][0]["clientConfig"].get("caBundle")
        return base64.b64decode(encoded).decode() if encoded else None

    def named(name: str) -> dict[str, str]:
        return {"fieldSelector": f"metadata.name={name}"}

    ctbs = {"fieldSelector": f"spec.signerName={cluster.signer_name}"}
    configmaps = f"/api/v1/namespaces/{cluster.namespace}/configmaps"
    return [
        (f"/api/v1/namespaces/{cluster.namespace}/secrets", named(DEFAULT_SECRET_NAME), secret),
        (
            "/apis/certificates.k8s.io/v1/clustertrustbundles",
            ctbs,
            held("projection", lambda ctb: str(ctb["spec"]["trustBundle"])),
        ),
        (VWC_PATH, named(cluster.hook), held("webhook caBundle", ca_bundle)),
        (
            configmaps,
            named("injected"),
            held("ConfigMap", lambda cm: (cm.get("data") or {}).get(CA_KEY)),
        ),
    ]


def _restore(cluster: Cluster, backup: dict[str, Any]) -> None:
    """Put `backup` back over the live Secret (its labels, annotations and data), as a
    restore tool or a GitOps re-apply of an exported copy does."""

    def change(secret: dict[str, Any]) -> None:
        for key in ("labels", "annotations"):
            secret["metadata"][key] = dict(backup["metadata"].get(key) or {})
        secret["data"] = dict(backup.get("data") or {})

    edit(cluster.client, cluster.secret_path, change)


def _everywhere(cluster: Cluster, roots: set[str]) -> bool:
    return all(held == roots for held in cluster.consumers().values())


def _retire_scheduled(cluster: Cluster) -> bool:
    state = decode(cluster.secret() or {}).state
    return state is not None and all(p.retire_at for p in state.previous)


def _to_the_end(cluster: Cluster) -> None:
    """Settled (the current CA confirmed, nothing staged), every previous root retired
    (its retire time moved to the past) and gone from every consumer."""

    def settled() -> bool:
        state = decode(cluster.secret() or {}).state
        return state is not None and state.confirmed_at is not None and state.next is None

    assert eventually(settled, 60), cluster.phase()
    if cluster.phase() != "Stable":
        assert eventually(lambda: _retire_scheduled(cluster), 30), cluster.phase()
        move_retire_time_to_the_past(cluster.client, cluster.secret_path)
        assert eventually(lambda: cluster.phase() == "Stable", 30), cluster.phase()
    assert eventually(lambda: _everywhere(cluster, {cluster.ca()}), 30), cluster.consumers()


@pytest.fixture(scope="module")
def history(
    control_plane: ControlPlane,
    client: Client,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    """A signer and an injector taken through Stable → an emergency → Staged → Swapped →
    Retiring → retired, with every version of the Secret recorded: a backup from before
    the emergency holds a revoked root, the later ones roots retired since."""
    namespace = create_test_namespace(client, request)
    tmp = tmp_path_factory.mktemp("restored-phases")
    cluster = Cluster(control_plane, client, namespace, tmp)
    selector = json.dumps({"signerName": cluster.signer_name, "labelSelector": {}})
    client.create(
        VWC_PATH, validating_webhook(cluster.hook, f"unused-{cluster.hook}", "svc", selector)
    )
    client.create(
        f"/api/v1/namespaces/{namespace}/configmaps", consumer_config_map("injected", selector)
    )
    shipped_report_lease(client, namespace)  # the swap waits for the injector
    Kubelet(client).create_service("web", namespace, selector={"app": "web"})
    stop = threading.Event()
    watchers = [
        threading.Thread(target=_watch, args=(cluster, *watched, stop), daemon=True)
        for watched in _watched(cluster)
    ]
    for watcher in watchers:
        watcher.start()
    common = (f"--leader-elect-resource-namespace={namespace}", *LEASE)
    injector = SignerProcess(
        control_plane.kubeconfig,
        None,
        tmp / "injector.log",
        "--controllers=injector",
        *common,
        signer_name=None,
    )
    signer = SignerProcess(
        control_plane.kubeconfig,
        None,
        tmp / "signer.log",
        "--ca-mode=managed",
        "--leader-elect-resource-name=restored-phases",
        f"--managed-ca-propagation-delay={DELAY}s",
        "--managed-ca-allow-short-propagation-delay",
        "--managed-ca-wait-for-injector=true",
        "--max-certificate-lifetime=1h",
        "--managed-ca-retire-margin=5m",
        *common,
        signer_name=cluster.signer_name,
    )
    try:

        def everywhere(roots: set[str]) -> bool:
            return _everywhere(cluster, roots)

        assert eventually(lambda: cluster.phase() == "Stable", 30), signer.log_lines()[-20:]
        first = decode(cluster.secret() or {}).state
        assert first is not None
        assert eventually(lambda: everywhere({first.current.fingerprint}), 30), cluster.consumers()
        cluster.asked("rotate", "--emergency", "--yes")
        assert eventually(lambda: bool(cluster.versions.emergency_made), 30)
        [made] = cluster.versions.emergency_made
        after_it = "after an emergency"
        assert eventually(lambda: _phase(cluster.secret() or {}, {made}) == after_it, 30)
        assert eventually(lambda: everywhere({made}), 30), cluster.consumers()
        cluster.asked("rotate")
        assert eventually(lambda: cluster.phase() == "Retiring", 60), cluster.consumers()
        _to_the_end(cluster)
        for phase in PHASES:
            cluster.versions.first(phase)  # every backup is there before any case runs
        yield cluster
    finally:
        stop.set()
        signer.stop()
        injector.stop()
        for watcher in watchers:
            watcher.join(5)
        delete_quietly(client, VWC_PATH, cluster.hook)


@pytest.mark.parametrize("phase", PHASES)
def test_a_secret_restored_from_a_phase_signs_only_what_every_consumer_holds(
    phase: str, history: Cluster, kubelet: Kubelet
) -> None:
    """From the restore on, each leaf issued chains to a root every consumer holds (a CA
    an emergency the restore caused made: the projection holds it), and signing goes on
    until the restored state has settled (its current CA confirmed, nothing staged). A CA
    an earlier emergency made, restored, is held to every consumer like any other."""
    cluster = history
    _to_the_end(cluster)
    backup = cluster.versions.first(phase)
    made_before = set(cluster.versions.emergency_made)
    _restore(cluster, backup)
    restored = time.monotonic()
    signed: list[tuple[str, str]] = []
    wrong: list[str] = []

    def settled() -> bool:
        state = decode(cluster.secret() or {}).state
        return state is not None and state.confirmed_at is not None and state.next is None

    while time.monotonic() - restored < WATCHED_FOR or not settled():
        assert time.monotonic() - restored < 60, ("not settled after a minute", signed)
        root, issued = cluster.issue_leaf(kubelet)
        signed.append((root[:12], cluster.phase() or "?"))
        emergency = root in cluster.versions.emergency_made - made_before
        for consumer, held in cluster.held.items():
            if emergency and consumer != "projection":
                continue  # documented: the injector writes it after it signs
            lag = 0.0 if emergency else LAG[consumer]
            if not held.trusted(root, issued, lag):
                wrong.append(
                    f"{root[:12]} issued {issued - restored:.2f}s after the restore (at "
                    f"{issued:.2f}), not held {lag}s by the {consumer} "
                    f"({held.roots()}; {held.history(root)})"
                )
    print(f"\n{phase}: {len(signed)} leaves after the restore, signed by {sorted(set(signed))}")
    assert wrong == [], wrong
    assert signed, "nothing was signed after the restore"
