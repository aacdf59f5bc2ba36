"""The caBundle injection controller (docs/reference.md §11, opt-in: `--controllers=*,injector`).

For every ValidatingWebhookConfiguration, MutatingWebhookConfiguration, APIService and
CRD annotated `service-serving-signer/ca-bundle-from: <ClusterTrustBundleSelector JSON>`
it keeps every caBundle field equal to the bundle the selector resolves to, by
server-side apply under its own field manager (`service-serving-signer-injector`,
`force: true`: the annotation hands that field to us).

Wiring, in kube-controller-manager's shape:

* five informers, each with a transform that keeps only what `sync` reads
  (`injector.targets.Target` for the four kinds; name, signer, labels and PEM for
  ClusterTrustBundles of every signer);
* an index on each of the four caches from "which bundles can change my selection"
  (`name:<bundle>` or `signer:<signerName>`, `injector.decide.selection_keys`) so a
  ClusterTrustBundle add/update/delete re-drives exactly the objects it may concern;
* one queue of `<Kind>/<name>` keys on `kube.controller.Controller` (workers start on
  synced caches; the processNextWorkItem contract); handlers only enqueue; a periodic
  resync re-drives every annotated object (the safety net against a missed event, and
  the repair of a hand-edited caBundle whose watch event was lost).

`sync(key)` reads only the caches and writes at most one apply patch, only when a slot
differs (`injector.decide`). Nothing is written for an object without the annotation,
for a bad annotation, or for a selection that matches nothing (Warning Events say why).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from injector import decide as decisions
from injector.metrics import InjectorMetrics
from injector.targets import KINDS, Kind, Target, apply_body, split_key, target_key, to_target
from kube.client import ApiError, Client, is_not_found, path_segment
from kube.controller import Controller, Requeue
from kube.events import ObjectRef
from kube.informer import Informer
from kube.types import JSON
from kube.workqueue import RateLimitingQueue
from trust.bundle import earliest_expiry

log = logging.getLogger(__name__)

FIELD_MANAGER = "service-serving-signer-injector"
QUEUE_NAME = "cabundle_injector"
SELECTION_INDEX = "selection"
APPLY_PATCH = "application/apply-patch+yaml"


class Recorder(Protocol):
    """The part of `kube.events.EventRecorder` the injector uses."""

    def warning(self, regarding: ObjectRef, reason: str, note: str, action: str) -> None: ...


class TargetCache(Protocol):
    def has_synced(self) -> bool: ...

    def get(self, key: str) -> Target | None: ...

    def keys(self) -> list[str]: ...

    def by_index(self, index_name: str, value: str) -> list[Target]: ...


class BundleCache(Protocol):
    def has_synced(self) -> bool: ...

    def list(self) -> list[JSON]: ...


class NotSynced(Exception):
    """A cache is not filled yet; deciding from it would be deciding from nothing."""


def bundle_record(raw: JSON) -> JSON:
    """The ClusterTrustBundle informer transform: what selection and resolution read."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    return {
        "metadata": {"name": meta.get("name", ""), "labels": dict(meta.get("labels") or {})},
        "spec": {
            "signerName": spec.get("signerName", ""),
            "trustBundle": spec.get("trustBundle", ""),
        },
    }


def _selection_index(target: Target) -> list[str]:
    selector = decisions.selector_of(target)
    return decisions.selection_keys(selector) if selector is not None else []


class InjectorController:
    """Keeps annotated objects' caBundles equal to their selected trust bundle."""

    def __init__(
        self,
        client: Client,
        recorder: Recorder,
        *,
        ctb_version: str = "v1",
        workers: int = 2,
        resync_period: float = 300.0,
        registry: CollectorRegistry | None = None,
        caches: Mapping[str, TargetCache] | None = None,
        bundles: BundleCache | None = None,
    ) -> None:
        self.client = client
        self.recorder = recorder
        self.workers = workers
        self.resync_period = resync_period
        self.metrics = InjectorMetrics(registry)
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self._informers: list[Informer[Any]] = []
        if caches is None:
            built: dict[str, TargetCache] = {}
            for kind in KINDS:
                informer: Informer[Target] = Informer(
                    client,
                    kind.path,
                    name=kind.resource,
                    transform=_transform_for(kind),
                    indexers={SELECTION_INDEX: _selection_index},
                )
                informer.add_handler(
                    self._on_target, self._on_target_update, self._on_target_delete
                )
                self._informers.append(informer)
                built[kind.kind] = informer
            caches = built
        self.caches: Mapping[str, TargetCache] = caches
        if bundles is None:
            ctb_informer: Informer[JSON] = Informer(
                client,
                f"/apis/certificates.k8s.io/{ctb_version}/clustertrustbundles",
                name="clustertrustbundles-injector",
                transform=bundle_record,
            )
            ctb_informer.add_handler(self._on_bundle, self._on_bundle_update, self._on_bundle)
            self._informers.append(ctb_informer)
            bundles = ctb_informer
        self.bundles: BundleCache = bundles
        self.loop = Controller(
            "injector",
            self._sync_key,
            self.queue,
            informers=self._informers,
            synced=(self.bundles.has_synced, *(c.has_synced for c in self.caches.values())),
            workers=workers,
            resync_period=resync_period,
            resync_keys=self.resync,
        )

    # informers and handlers (handlers only enqueue) ----------------------------------

    def has_synced(self) -> bool:
        return self.loop.has_synced()

    def start_informers(self, stop: threading.Event) -> list[threading.Thread]:
        """Start filling the caches (idempotent); a standby replica warms up too."""
        return self.loop.start_informers(stop)

    def _on_target(self, target: Target) -> None:
        self.queue.add(target.key)

    def _on_target_update(self, old: Target, new: Target) -> None:
        if old != new:
            self.queue.add(new.key)

    def _on_target_delete(self, target: Target) -> None:
        self.metrics.keep_expiry(target.key, None)

    def _on_bundle(self, bundle: JSON) -> None:
        self.enqueue_selecting(bundle)

    def _on_bundle_update(self, old: JSON, new: JSON) -> None:
        if old != new:
            self.enqueue_selecting(old)
            self.enqueue_selecting(new)

    def enqueue_selecting(self, bundle: Mapping[str, Any]) -> None:
        """Enqueue every object whose selector may pick `bundle` (by name or signer)."""
        for value in decisions.bundle_keys(bundle):
            for cache in self.caches.values():
                for target in cache.by_index(SELECTION_INDEX, value):
                    self.queue.add(target.key)

    def resync(self) -> list[str]:
        """Every annotated object's key: the periodic re-drive."""
        keys = []
        for kind_name, cache in self.caches.items():
            for name in list(cache.keys()):
                target = cache.get(name)
                if target is not None and target.annotation is not None:
                    keys.append(target_key(kind_name, name))
        return keys

    # the loop: kube.controller ---------------------------------------------------------

    def run_workers(self, stop: threading.Event) -> None:
        """Sync every annotated object once, then on every event and resync, until `stop`."""
        self.loop.run_workers(stop)

    def run(self, stop: threading.Event) -> None:
        """Informers and workers until `stop` is set. Blocks."""
        self.start_informers(stop)
        self.run_workers(stop)

    def _sync_key(self, key: str) -> Requeue | None:
        try:
            self.sync(key)
        except NotSynced:
            # Not a failure: come back once the caches are filled.
            return Requeue(after=0.2)
        except ApiError as err:
            # Transient (or the object changed under us): retry with this key's backoff,
            # sooner if the server said when.
            log.warning("injector sync failed; retrying", extra={"key": key, "error": str(err)})
            return Requeue(after=err.retry_after)
        return None

    # the sync ------------------------------------------------------------------------

    def sync(self, key: str) -> None:
        """Decide from the caches for one `<Kind>/<name>` key and write at most one apply
        patch. Raises `NotSynced` or `ApiError` (the caller retries)."""
        kind, name = split_key(key)
        cache = self.caches[kind.kind]
        if not (cache.has_synced() and self.bundles.has_synced()):
            raise NotSynced(key)
        target = cache.get(name)
        if target is None:
            self.metrics.keep_expiry(key, None)
            return
        decision = decisions.decide(target, self.bundles.list())
        ref = _ref(kind, target)
        match decision:
            case decisions.Ignore():
                self.metrics.keep_expiry(key, None)
                return
            case decisions.Invalid(reason=reason, message=message):
                self.metrics.keep_expiry(key, None)
                self.recorder.warning(ref, reason, message, "InjectCABundle")
                self.metrics.observe(kind.kind, "invalid")
            case decisions.Empty(message=message):
                self.recorder.warning(ref, decisions.REASON_EMPTY, message, "InjectCABundle")
                self.metrics.observe(kind.kind, "empty")
            case decisions.UpToDate(bundle=bundle):
                self.metrics.keep_expiry(key, earliest_expiry(bundle).timestamp())
                self.metrics.observe(kind.kind, "unchanged")
            case decisions.Inject():
                self._inject(kind, target, decision)

    def _inject(self, kind: Kind, target: Target, decision: decisions.Inject) -> None:
        # No Normal Event per write: a rotation re-writes every injected object at once,
        # and an Event each would double the writes under --kube-api-qps (the log line
        # and cabundle_injector_sync_total{result="injected"} record it).
        try:
            self.client.patch(
                f"{kind.path}/{path_segment(target.name)}",
                apply_body(target, decision.ca_bundle),
                patch_type=APPLY_PATCH,
                params={"fieldManager": FIELD_MANAGER, "force": True},
                discard_response=True,
            )
        except ApiError as err:
            if is_not_found(err):
                # Deleted since the cache saw it; its delete event ends the story.
                return
            self.metrics.observe(kind.kind, "error")
            raise
        self.metrics.keep_expiry(target.key, earliest_expiry(decision.bundle).timestamp())
        self.metrics.observe(kind.kind, "injected")
        slots = len(target.slots)
        log.info(
            "injected caBundle",
            extra={"object": target.key, "slots": slots, "bundles": decision.sources},
        )


def _transform_for(kind: Kind) -> Callable[[JSON], Target]:
    def transform(raw: JSON) -> Target:
        return to_target(kind, raw)

    return transform


def _ref(kind: Kind, target: Target) -> ObjectRef:
    return ObjectRef(kind.kind, "", target.name, target.uid, kind.api_version)
