"""The PodCertificateRequest signing controller: it acts on one decision per request.

`signer.decide.Decider` decides, from the informer caches (and the few live reads it
allows itself), what to do with a request of our signer; this module only acts on the
outcome, once:

- **Terminal** (Denied / Failed): written once, never retried, with a Warning Event on
  the Pod (reason = the condition's reason).
- **Wait**: a Warning Event per blocking Service goes on the Pod, the request is recorded
  in the waiting index, and nothing is written — the request is re-driven by the Service
  (or Pod label) event that can make it succeed — only a change to what the decision
  reads counts — and, as a safety net against a missed event, by a slow periodic resync
  of the waiting requests only (`waiting_resync_period`).
- **Sign**: `signer.authority` signs the request's public key for the decided DNS names
  with the current signing material; the chain and times are written in one `/status`
  merge patch conditional on the resourceVersion the decision was made from.
- **Retry**: API errors raise for the shared loop to retry (`kube.controller.Loop`); a
  signing certificate too close to its expiry to give a one-hour certificate requeues
  with backoff (counted as `error`, Warning `SignerCertificateExpiring`).

Losing a write race (409) to another replica is not an error: the request is re-read, and
if it is already terminal nothing is counted. Event handlers only enqueue keys; the work
queue hands them out round-robin across namespaces (`kube.workqueue` flows), so one
namespace's storm of requests delays another namespace's request by one sync per worker,
not by the storm.

API versions: the controller watches one version (the manager resolves `auto`); the
status write goes through it (the API server keeps the spec from storage).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.controller import Cache, Loop, Requeue, SyncFailed
from kube.events import ObjectRef, Recorder
from kube.factory import InformerFactory
from kube.informer import key_namespace
from kube.times import format_time
from kube.types import JSON
from kube.workqueue import RateLimitingQueue
from signer import authority
from signer.decide import Decider, Sign, Store, Terminal, Wait
from signer.index import WaitingIndex
from signer.lookups import PCR_GROUP, ApiLookups
from signer.metrics import SignerMetrics
from signer.records import (
    PCRRecord,
    PodRecord,
    ServiceRecord,
    pcr_record,
    pod_record,
    service_record,
    terminal_condition,
)
from trust.material import SigningMaterial, SigningSource

log = logging.getLogger(__name__)

PCR_VERSIONS = ("v1", "v1beta1")
QUEUE_NAME = "service_serving_signer"
KUBERNETES_MAX_LIFETIME = 86400
# Default of --waiting-resync-period: a third of a request's 15-minute life (the PCR
# cleaner deletes it then), so a missed wake-up costs at most 5 minutes; the same as
# KCM's own periodic syncs of derived state (--resource-quota-sync-period,
# --namespace-sync-period: 5m). KCM's informer resync (--min-resync-period, 12h) is far
# longer because it re-delivers every object; this re-drives only the waiting ones.
WAITING_RESYNC_PERIOD = 300.0


T = TypeVar("T", covariant=True)


class RecordCache(Cache[T], Store[T], Protocol[T]):
    """What the signer needs of each informer cache: what the loop needs of every cache
    (`kube.controller.Cache`) and the read a decision makes (`signer.decide.Store`)."""


@dataclass(frozen=True)
class Caches:
    """The caches the signer reads: its requests, every Pod and every Service."""

    pcrs: RecordCache[PCRRecord]
    pods: RecordCache[PodRecord]
    services: RecordCache[ServiceRecord]


def informers(factory: InformerFactory, *, signer_name: str, pcr_version: str) -> Caches:
    """The signer's informers, each keeping only what a decision reads (`signer.records`)."""
    if pcr_version not in PCR_VERSIONS:
        raise ValueError(f"pcr_version must be one of {PCR_VERSIONS}, not {pcr_version!r}")
    return Caches(
        pcrs=factory.informer(
            f"/apis/{PCR_GROUP}/{pcr_version}/podcertificaterequests",
            name="podcertificaterequests",
            field_selector=f"spec.signerName={signer_name}",
            transform=pcr_record,
        ),
        pods=factory.informer("/api/v1/pods", name="pods", transform=pod_record, key=_pod_key),
        services=factory.informer("/api/v1/services", name="services", transform=service_record),
    )


# the controller ------------------------------------------------------------------------


class SignerController:
    name = "signer"

    def __init__(
        self,
        client: Client,
        caches: Caches,
        material_source: SigningSource,
        *,
        signer_name: str,
        domain: str = "cluster.local",
        pcr_version: str = "v1",
        workers: int = 4,
        registry: CollectorRegistry,
        recorder: Recorder,
        max_lifetime_seconds: int = KUBERNETES_MAX_LIFETIME,
        waiting_resync_period: float | None = WAITING_RESYNC_PERIOD,
        pod_identity_subject: bool = False,
        cluster_ip_sans: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if pcr_version not in PCR_VERSIONS:
            raise ValueError(f"pcr_version must be one of {PCR_VERSIONS}, not {pcr_version!r}")
        self.client = client
        self.material_source = material_source
        self.signer_name = signer_name
        self.domain = domain
        self.pcr_version = pcr_version
        self.workers = max(1, workers)
        self.recorder = recorder
        self.max_lifetime_seconds = max_lifetime_seconds
        self.pod_identity_subject = pod_identity_subject
        self._clock = clock

        self.index = WaitingIndex(clock)
        self.metrics = SignerMetrics(registry, clock, self.index.pod_waits)
        self.metrics.bind(
            pending=self.index.pending,
            oldest_pending=self.index.oldest_age,
            signer_not_after=self._signer_not_after,
        )
        # Served fairly across namespaces: one namespace's storm of requests does not
        # queue every other namespace's first certificate behind it.
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(
            QUEUE_NAME, registry, flow=key_namespace
        )

        self.caches = caches
        self.pcrs = caches.pcrs
        self.pods = caches.pods
        self.services = caches.services
        self.decider = Decider(
            self.pods,
            self.services,
            ApiLookups(client),
            domain=domain,
            pcr_version=pcr_version,
            cluster_ip_sans=cluster_ip_sans,
        )
        self.pcrs.add_handler(self._on_pcr_add, self._on_pcr_update, self._on_pcr_delete)
        self.services.add_handler(self._on_service, self._on_service_update, None)
        self.pods.add_handler(self._on_pod_add, self._on_pod_update, self._on_pod_delete)
        material_source.add_listener(self._on_material_change)
        self.loop = Loop(
            self.name,
            self._attempt,
            self.queue,
            synced=(self.pcrs.has_synced, self.pods.has_synced, self.services.has_synced),
            workers=self.workers,
            registry=registry,
            resync_period=waiting_resync_period or None,
            resync_keys=self._waiting_keys_to_resync,
        )

    # lifecycle: the shared controller loop (kube.controller) ------------------------------

    def has_synced(self) -> bool:
        return self.loop.has_synced()

    def run(self, stop: threading.Event) -> None:
        """The workers, on synced caches, until `stop`; returns once the syncs in flight
        have finished."""
        self.loop.run(stop)

    # event handlers: enqueue only ---------------------------------------------------------

    def _on_pcr_add(self, pcr: PCRRecord) -> None:
        if pcr.terminal is None:
            self.queue.add(pcr.key)

    def _on_pcr_update(self, old: PCRRecord, new: PCRRecord) -> None:
        if new.terminal is None:
            self.queue.add(new.key)
        else:
            self._forget(new.key)

    def _on_pcr_delete(self, pcr: PCRRecord) -> None:
        self._forget(pcr.key, gone=True)

    def _on_service(self, service: ServiceRecord) -> None:
        for key in self.index.waiting_on_service(service.key):
            self.queue.add(key)

    def _on_service_update(self, old: ServiceRecord, new: ServiceRecord) -> None:
        # The record holds exactly what a decision reads of a Service (selector, type,
        # clusterIP); annotation, label, status and managedFields churn leave it equal
        # and must not cost a re-drive (and an Event) per waiting request.
        if old != new:
            self._on_service(new)

    def _on_pod_add(self, pod: PodRecord) -> None:
        # A Pod first cached on a relist (or after its informer restarted) may carry the
        # labels a waiting request needs; nobody else would wake it.
        for key in self.index.waiting_on_pod(pod.key):
            self.queue.add(key)

    def _on_pod_update(self, old: PodRecord, new: PodRecord) -> None:
        # Labels are what can turn a waiting request into an issued one (docs/reference.md
        # §5.2 step 6); the rest of a Pod a decision reads is immutable once it is bound to
        # a node.
        if old.labels != new.labels:
            self._on_pod_add(new)

    def _on_pod_delete(self, pod: PodRecord) -> None:
        # Its requests are deleted after it (garbage collection) or decided Failed; its
        # wait for a certificate ends now (signer.podwaits).
        self.index.pod_deleted(pod.uid)

    def _waiting_keys_to_resync(self) -> list[str]:
        """The periodic resync re-drives the waiting requests only — O(waiting), not
        O(requests): the safety net kube-controller-manager's controllers keep against a
        missed or mishandled event (docs/reference.md §5.2 step 6)."""
        keys = self.index.waiting_keys()
        self.metrics.waiting_resynced(len(keys))
        return keys

    def _on_material_change(self, _material: SigningMaterial) -> None:
        """New signing material: retry at once what was blocked on the old one's expiry
        instead of waiting out a backoff that may have grown to minutes."""
        for key in self.index.material_changed():
            self.queue.add(key)

    # sync ------------------------------------------------------------------------------------

    def _attempt(self, key: str) -> Requeue | None:
        """One sync as the loop runs it. A sync that raises is retried by the loop (its
        error policy) and is the KEP's `requests_total{result="error"}` (signer.metrics)."""
        try:
            return self.sync(key)
        except Exception:
            self.metrics.sync_error()
            raise

    def sync(self, key: str) -> Requeue | None:
        """Decide and act for one request. Idempotent; reads caches; at most one write."""
        pcr = self.pcrs.get(key)
        if pcr is None or pcr.terminal is not None or pcr.signer_name != self.signer_name:
            self._forget(key, gone=pcr is None)
            return None
        # The whole decision, without coming back here (signer.decide). API errors
        # raise: the loop retries them (backoff, not before Retry-After) and counts them.
        decision = self.decider.decide(pcr)
        if isinstance(decision, Terminal):
            return self._finish(pcr, decision)
        if isinstance(decision, Wait):
            self._wait(pcr, decision)
            return None
        return self._issue(pcr, decision)

    # acting on a decision -----------------------------------------------------------------

    def _finish(self, pcr: PCRRecord, decision: Terminal) -> Requeue | None:
        status = {
            "conditions": [self._condition(decision.condition, decision.reason, decision.message)]
        }
        written = self._write_status(pcr, status)
        if written is None:
            return None
        if written:
            log.info(
                "request finished",
                extra={"key": pcr.key, "condition": decision.condition, "reason": decision.reason},
            )
            self.metrics.failed(decision.reason)
            self._forget(pcr.key)
            self._record_terminal(pcr, decision)
            return None
        return Requeue()

    def _record_terminal(self, pcr: PCRRecord, decision: Terminal) -> None:
        """A Warning on the Pod for a Denied or Failed request (docs/reference.md §6):
        kubelet 1.37's own Event garbles its message (the format arguments are shifted),
        so without ours the owner of a Pod that never starts cannot read why. The Pod is
        named from the request (it may be gone: `PodNotFound`), so the Event is still
        listed under it."""
        self.recorder.warning(
            ObjectRef("Pod", pcr.namespace, pcr.pod_name, pcr.pod_uid),
            decision.reason,
            f"PodCertificateRequest {pcr.key} {decision.condition.lower()} "
            f"(final; the Pod cannot start until a new request succeeds): {decision.message}",
            "Sign",
            self._pcr_ref(pcr),
        )

    def _wait(self, pcr: PCRRecord, decision: Wait) -> None:
        pod_ref = ObjectRef("Pod", decision.pod.namespace, decision.pod.name, decision.pod.uid)
        pcr_ref = self._pcr_ref(pcr)
        for blocker in decision.blockers:
            self.recorder.warning(pod_ref, blocker.reason, blocker.message, "Sign", pcr_ref)
        self.index.wait(
            pcr.key,
            pcr.pod_key,
            (b.service_key for b in decision.blockers),
            since=pcr.created.timestamp() if pcr.created else None,
            pod_uid=pcr.pod_uid,
            namespace=pcr.namespace,
        )
        # The request may have been deleted (the cleaner deletes exactly the waiting ones)
        # or finished by another replica after `sync` read it: its handler ran before our
        # entry existed and removed nothing. The informer updates the cache before it runs
        # handlers, so whichever comes second sees the other: if the cache still holds the
        # request as it was, a later delete or update will find and drop our entry.
        current = self.pcrs.get(pcr.key)
        if current is None or current.uid != pcr.uid or current.terminal is not None:
            self._forget(pcr.key, gone=current is None or current.uid != pcr.uid)
            return
        # An event that changed a Service or the Pod after we read the cache but before
        # the request entered the index found nobody waiting: re-drive it ourselves.
        for service_key, seen in decision.seen_services.items():
            if self.services.get(service_key) != seen:
                self.queue.add(pcr.key)
                return
        current_pod = self.pods.get(pcr.pod_key)
        seen_labels = decision.seen_pod.labels if decision.seen_pod else None
        if current_pod is not None and current_pod.labels != seen_labels:
            self.queue.add(pcr.key)

    def _pcr_ref(self, pcr: PCRRecord) -> ObjectRef:
        return ObjectRef(
            "PodCertificateRequest",
            pcr.namespace,
            pcr.name,
            pcr.uid,
            api_version=f"{PCR_GROUP}/{self.pcr_version}",
        )

    def _issue(self, pcr: PCRRecord, decision: Sign) -> Requeue | None:
        try:
            material = self.material_source.current()
        except RuntimeError as err:
            # No signing set right now (a managed CA's bootstrap, or an emergency rotation
            # until the new CA is published): a known wait, re-driven by the next set.
            self.index.wait_for_material(pcr.key)
            raise SyncFailed(f"waiting for a signing CA: {err}") from None
        now = datetime.fromtimestamp(self._clock(), UTC)
        pod = decision.pod
        try:
            issued = authority.issue(
                material,
                decision.public_key,
                list(decision.dns_names),
                pcr.max_expiration_seconds or KUBERNETES_MAX_LIFETIME,
                self.max_lifetime_seconds,
                now,
                ip_addresses=decision.ip_addresses,
                pod_subject=(
                    authority.PodSubject(pod.name, pod.namespace, pod.uid)
                    if self.pod_identity_subject
                    else None
                ),
            )
        except authority.LifetimeTooShort as err:
            self.index.wait_for_material(pcr.key)
            # The note must not change between retries (no "time left"), or every retry
            # would start a new Event instead of bumping one series.
            expires = format_time(material.signing_cert.not_valid_after_utc)
            self.recorder.warning(
                ObjectRef("Pod", pod.namespace, pod.name, pod.uid),
                "SignerCertificateExpiring",
                f"cannot issue a certificate of at least 1 hour for PodCertificateRequest "
                f"{pcr.key}: the signing certificate expires at {expires}; retrying until "
                "the signing certificate is rotated",
                "Sign",
            )
            raise SyncFailed("the signing certificate expires too soon") from err
        status = {
            "conditions": [
                self._condition(
                    "Issued",
                    "Issued",
                    f"issued for {', '.join(decision.dns_names + decision.ip_addresses)}",
                )
            ],
            "certificateChain": issued.chain_pem,
            "notBefore": format_time(issued.not_before),
            "notAfter": format_time(issued.not_after),
            "beginRefreshAt": format_time(issued.begin_refresh_at),
        }
        written = self._write_status(pcr, status)
        if written is None:
            return None
        if written:
            age = self._clock() - pcr.created.timestamp() if pcr.created else None
            self.metrics.issued(age, decision.key_type)
            self._forget(pcr.key)
            log.info("certificate issued", extra={"key": pcr.key, "names": decision.dns_names})
            return None
        return Requeue()

    def _condition(self, kind: str, reason: str, message: str) -> JSON:
        return {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": format_time(datetime.fromtimestamp(self._clock(), UTC)),
        }

    def _status_path(self, pcr: PCRRecord) -> str:
        return (
            f"/apis/{PCR_GROUP}/{self.pcr_version}/namespaces/{path_segment(pcr.namespace)}"
            f"/podcertificaterequests/{path_segment(pcr.name)}"
        )

    def _write_status(self, pcr: PCRRecord, status: JSON) -> bool | None:
        """One merge patch of `/status`, conditional on the resourceVersion the decision
        was made from. True: written. None: nothing left to do (the request is gone, or
        another writer already finished it). False: retry (it changed under us)."""
        path = self._status_path(pcr)
        body = {"metadata": {"resourceVersion": pcr.resource_version}, "status": status}
        try:
            self.client.patch(f"{path}/status", body, discard_response=True)
            return True
        except ApiError as err:
            if is_not_found(err):
                self._forget(pcr.key, gone=True)
                return None
            if err.status != 409:
                raise
        # 409: someone wrote since our read. Re-read: if another replica finished it, we
        # lost a race — not an error; otherwise decide again from fresh data.
        try:
            current = self.client.get(path)
        except ApiError as err:
            if is_not_found(err):
                self._forget(pcr.key, gone=True)
                return None
            raise
        if terminal_condition(current.get("status") or {}) is not None:
            self._forget(pcr.key)
            return None
        return False

    def _forget(self, key: str, *, gone: bool = False) -> None:
        """The request no longer waits, on anything (`WaitingIndex.forget`)."""
        self.index.forget(key, gone=gone)

    def _signer_not_after(self) -> float:
        try:
            return self.material_source.current().signing_cert.not_valid_after_utc.timestamp()
        except Exception:  # not loaded yet: the gauge reads 0
            return 0.0


def _pod_key(pod: PodRecord) -> str:
    return pod.key
