"""A CA Secret restored from a backup taken in each phase — Stable, Staged, Swapped,
Retiring, after an emergency — once every later phase has passed, on the real API server
with real `run` processes (a managed signer and a separate injector): every leaf issued
after the restore verifies against every consumer's bundle at the moment it is issued —
the signer's ClusterTrustBundles (what the kubelet projects), an injected webhook
caBundle and an injected ConfigMap. The one exception is the documented one: a CA an
emergency the restore set off (a backup holding a root revoked since) makes signs as soon
as the bundle read back holds it, before the injector has written it; a CA an earlier
emergency made, restored, is held to every consumer.

One control plane, one signer and one history serve every case: the history (an
emergency, then a rotation: stage, swap, retire) runs once, a watch keeps every version
of the Secret, and each case restores the first version of its phase over whatever the
previous cases left (a restore, like Velero's or a GitOps re-apply, replaces the live
object)."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
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
# In the order the cases run, each restoring over what the one before left: Staged first,
# over the history's end (the current CA it names was retired since, and no root the
# bundle holds is missing from it: only the unpublished current CA tells).
PHASES = ("Staged", "Swapped", "Retiring", "after an emergency", "Stable")
WATCHED_FOR = 3 * DELAY + 4.0  # seconds of issuing after a restore, at least


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

    def issue_leaf(self, kubelet: Kubelet) -> tuple[str, dict[str, set[str]]]:
        """Issue one leaf; the fingerprint of the root that signed it, and every
        consumer's roots read as soon as it was issued."""
        self.leaves += 1
        name = issue_one(
            kubelet, self.namespace, f"leaf-{self.leaves}", signer_name=self.signer_name
        )
        assert wait_issued(self.client, self.namespace, name, 30), f"{name} was not issued"
        consumers = self.consumers()
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
            return fp, consumers
        raise AssertionError("the leaf was signed by no CA the Secret ever held")


def _all_ca_pems(secret: dict[str, Any]) -> bytes:
    return bundle_pem(secret_data(secret))


def _watch(cluster: Cluster, stop: threading.Event) -> None:
    """Record every version of the Secret until `stop` (re-watching from the last one)."""
    path = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    selector = {"fieldSelector": f"metadata.name={DEFAULT_SECRET_NAME}"}
    version = "0"
    while not stop.is_set():
        try:
            for event in cluster.client.watch(
                path, {**selector, "resourceVersion": version}, read_timeout=2
            ):
                if event["type"] in ("ADDED", "MODIFIED"):
                    cluster.versions.add(event["object"])
                    version = event["object"]["metadata"]["resourceVersion"]
                if stop.is_set():
                    return
        except ApiError:
            time.sleep(0.1)


def _restore(cluster: Cluster, backup: dict[str, Any]) -> None:
    """Put `backup` back over the live Secret (its labels, annotations and data), as a
    restore tool or a GitOps re-apply of an exported copy does."""

    def change(secret: dict[str, Any]) -> None:
        for key in ("labels", "annotations"):
            secret["metadata"][key] = dict(backup["metadata"].get(key) or {})
        secret["data"] = dict(backup.get("data") or {})

    edit(cluster.client, cluster.secret_path, change)


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
    watcher = threading.Thread(target=_watch, args=(cluster, stop), daemon=True)
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
            return all(held == roots for held in cluster.consumers().values())

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

        def retire_scheduled() -> bool:
            state = decode(cluster.secret() or {}).state
            return state is not None and all(p.retire_at for p in state.previous)

        assert eventually(retire_scheduled, 30)
        move_retire_time_to_the_past(client, cluster.secret_path)
        assert eventually(lambda: cluster.phase() == "Stable", 30)
        last = cluster.ca()
        assert eventually(lambda: everywhere({last}), 30), "the retired root left every consumer"
        for phase in PHASES:
            cluster.versions.first(phase)  # every backup is there before any case runs
        yield cluster
    finally:
        stop.set()
        signer.stop()
        injector.stop()
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
        root, consumers = cluster.issue_leaf(kubelet)
        signed.append((root[:12], cluster.phase() or "?"))
        emergency = root in cluster.versions.emergency_made - made_before
        for consumer, roots in consumers.items():
            if root not in roots and not (emergency and consumer != "projection"):
                wrong.append(f"{root[:12]} not in the {consumer} ({sorted(r[:12] for r in roots)})")
    print(f"\n{phase}: {len(signed)} leaves after the restore, signed by {sorted(set(signed))}")
    assert wrong == [], wrong
    assert signed, "nothing was signed after the restore"
