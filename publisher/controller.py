"""The ClusterTrustBundle publisher (docs/reference.md §4), shaped like kube-controller-manager's
`clustertrustbundlepublisher`: one queue key, a `sync` that reads only the informer cache,
a bundle named after the hash of its content — and beside it one bundle whose name survives
rotation.

What one sync decides, from the current normalised trust bundle:

1. the object `<signer with ":">:<24 hex of sha256>` must exist with exactly that
   `spec.trustBundle`, the `app.kubernetes.io/managed-by=service-serving-signer` label and
   the `service-serving-signer/published-by=<publisher id>` annotation (the process's
   Lease identity, `<hostname>_<uuid>`: which replica's file it came from) — create it if
   missing, replace it (conditional on its resourceVersion) if edited;
2. the **stable** bundle `<signer with ":">:trust-anchors` must exist holding the union of
   the anchors of the hash-named bundles that stay (ours, and those point 4 keeps), updated
   in place (conditional replace) and never deleted here: consumers that name a bundle
   (Gateway API `caCertificateRefs`, the injector's `name` selector) keep a referent
   through every rotation, going old → old+new → new. Because it holds exactly the union,
   what a Pod projects by `signerName` is the same set of anchors with or without it
   (kubelet de-duplicates). If its write does not go through (a conflict, or the cache
   lagging our own create), nothing is deleted this round: the write's watch event
   reconciles again;
3. only then, every other bundle whose `spec.signerName` is ours is deleted (with a UID
   precondition, so a re-created object of the same name is not hit). Creating and
   updating before deleting means a content change never leaves the signer without a
   bundle, nor the stable bundle without an anchor that a hash-named one still offers.
4. except a **newer bundle of another replica that holds an anchor our file lacks**: one
   with our managed-by label, a `published-by` other than ours (or none: an older
   version's), created after the content of our trust-bundle file reached this host (the
   file's mtime). That is what another replica publishes when its ConfigMap volume was
   refreshed before ours (kubelet refreshes volumes per node, a minute or more apart):
   deleting it would take the new root of a rotation back out. It is kept until our own
   file changes (then its content is newer than that bundle and decides). A bundle we
   published ourselves is never kept this way, so any sequence of writes to our file,
   however fast (two within one second: creationTimestamp has whole seconds), converges
   to the file's final content. Removing an anchor (runbook step 3) is unaffected: the
   older bundle is deleted, and a bundle that only lacks anchors of ours is never
   protected.

Bundles of other signers are never touched: the informer only sees ours (field selector
`spec.signerName=<signer>`) and `sync` re-checks the field.

Reconciles are triggered by any add/update/delete of one of our bundles, by `trigger()`
(the trust-bundle file changed) and by a periodic resync. Failures raise and are retried
by the shared loop (`kube.controller`: with the key's backoff, and not before the
server's Retry-After when transient), which also counts every sync's outcome
(`controller_sync_total{controller="publisher"}`); a successful one sets the
trust-bundle expiry gauge.
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from kube.client import (
    ApiError,
    Client,
    is_already_exists,
    is_conflict,
    is_not_found,
    path_segment,
)
from kube.controller import Cache, Loop, Requeue
from kube.factory import InformerFactory
from kube.times import parse_time
from kube.types import JSON
from kube.workqueue import RateLimitingQueue
from publisher.metrics import PublisherMetrics
from trust.bundle import (
    BundleError,
    TrustBundle,
    anchor_ders,
    bundle_name,
    earliest_expiry,
    normalize_bundle,
    stable_bundle_name,
)
from trust.clustertrustbundles import bundles_path

log = logging.getLogger(__name__)

GROUP = "certificates.k8s.io"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "service-serving-signer"
PUBLISHED_BY_ANNOTATION = "service-serving-signer/published-by"
REVOKED_ROOTS_ANNOTATION = "service-serving-signer/revoked-roots"
"""On the stable bundle: the sha256 fingerprints of roots revoked for good (the managed
CA writes it, `managedca.layout.REVOKED_ROOTS`). Another replica's bundle holding one is
never kept: a lagging publisher must not keep a revoked root published."""
QUEUE_NAME = "ca_cert_publisher_cluster_trust_bundles"
KEY = ""  # the single queue key, as in KCM


class BundleCache(Cache[JSON], Protocol):
    """What `sync` reads: the informer's cache of our ClusterTrustBundles."""

    def get(self, key: str) -> JSON | None: ...

    def list(self) -> list[JSON]: ...


@dataclass(frozen=True)
class Caches:
    """The cache the publisher reads: the ClusterTrustBundles of our signer."""

    bundles: BundleCache


def informers(factory: InformerFactory, *, signer_name: str, ctb_version: str) -> Caches:
    """Our signer's ClusterTrustBundles, whole (a bundle is small and few exist)."""
    return Caches(
        bundles=factory.informer(
            bundles_path(ctb_version),
            name="clustertrustbundles",
            field_selector=f"spec.signerName={signer_name}",
            transform=_whole,
        )
    )


def _whole(raw: JSON) -> JSON:
    return raw


class PublisherController:
    """Keeps one hash-named ClusterTrustBundle for `signer_name` holding the trust bundle
    that `bundle_source()` returns (normalised, with its file's mtime), and the stable
    bundle beside it."""

    name = "publisher"

    def __init__(
        self,
        client: Client,
        caches: Caches,
        bundle_source: Callable[[], TrustBundle],
        *,
        signer_name: str,
        ctb_version: str,
        registry: CollectorRegistry | None = None,
        resync_period: float = 60.0,
        publisher_id: str | None = None,
    ) -> None:
        if ctb_version not in ("v1", "v1beta1", "v1alpha1"):
            raise ValueError(f"unsupported ClusterTrustBundle version {ctb_version!r}")
        self.client = client
        self.bundle_source = bundle_source
        self.signer_name = signer_name
        self.ctb_version = ctb_version
        self.resync_period = resync_period
        # Which process's file a hash-named bundle came from (the manager passes its Lease
        # identity; two processes on one host must differ).
        self.publisher_id = publisher_id or socket.gethostname()
        self.stable_name = stable_bundle_name(signer_name)
        self.path = bundles_path(ctb_version)
        self.metrics = PublisherMetrics(registry)
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.cache = caches.bundles
        self.cache.add_handler(
            lambda _obj: self.trigger(),
            lambda _old, _new: self.trigger(),
            lambda _obj: self.trigger(),
        )
        self._kept: set[str] = set()
        self.loop = Loop(
            self.name,
            self.sync,
            self.queue,
            registry=registry,
            synced=(self.cache.has_synced,),
            resync_period=resync_period,
            resync_keys=lambda: (KEY,),
        )

    # lifecycle ----------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return self.loop.has_synced()

    def trigger(self, *_: object) -> None:
        """Reconcile soon (the trust bundle changed, or one of our bundles did)."""
        self.queue.add(KEY)

    def run(self, stop: threading.Event) -> None:
        """Reconcile (once at once, then on every trigger and resync) until `stop`."""
        self.trigger()
        self.loop.run(stop)

    # the reconcile -------------------------------------------------------------------

    def sync(self, key: str = KEY) -> Requeue | None:
        """One reconcile from the cache (there is one key). Raises on any failed API call,
        for the loop to retry."""
        bundle = self.bundle_source()
        self._sync(bundle)
        self.metrics.trust_bundle_expiry.set(earliest_expiry(bundle.pem).timestamp())
        return None

    def _sync(self, bundle: TrustBundle) -> None:
        name = bundle_name(self.signer_name, bundle.pem)
        existing = self.cache.get(name)
        if existing is None:
            self._create(name, bundle.pem, hashed=True)
        elif not self._up_to_date(existing, bundle.pem):
            self._replace(existing, bundle.pem, hashed=True)
        kept: list[JSON] = []
        stale: list[JSON] = []
        revoked = _revoked(self.cache.get(self.stable_name))
        for obj in self.cache.list():
            other = _name(obj)
            if other in (name, self.stable_name) or _signer(obj) != self.signer_name:
                continue
            if _another_replicas_newer(obj, bundle, self.publisher_id) and not _holds(obj, revoked):
                kept.append(obj)
            else:
                stale.append(obj)
        self._warn_kept({_name(obj) for obj in kept}, bundle)
        if not self._stable_in_place(_union(bundle, kept)):
            return
        errors: list[ApiError] = []
        for obj in stale:
            try:
                self._delete(obj)
            except ApiError as e:
                errors.append(e)
        if errors:
            raise errors[0]

    def _stable_in_place(self, anchors: str) -> bool:
        """The stable bundle holds `anchors` (True), or our write of it did not go
        through and its watch event will reconcile again (False)."""
        existing = self.cache.get(self.stable_name)
        if existing is None:
            return self._create(self.stable_name, anchors, hashed=False)
        if self._up_to_date(existing, anchors):
            return True
        try:
            self._replace(existing, anchors, hashed=False)
        except ApiError as e:
            # Our cache lags a newer version (ours, or someone's edit): its event comes.
            if is_conflict(e):
                return False
            raise
        return True

    def _warn_kept(self, kept: set[str], bundle: TrustBundle) -> None:
        for other in sorted(kept - self._kept):
            log.warning(
                "keeping a newer ClusterTrustBundle of another replica that holds anchors our "
                "trust-bundle file lacks (is this replica's ConfigMap volume stale?) until the "
                "file changes",
                extra={"bundle": other, "trustBundle": bundle.digest},
            )
        self._kept = kept

    def _up_to_date(self, obj: JSON, bundle: str) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return bool(
            (obj.get("spec") or {}).get("trustBundle") == bundle
            and labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        )

    def _create(self, name: str, bundle: str, *, hashed: bool) -> bool:
        """Create `name`; False when it already exists (the cache lags our own earlier
        create; its watch event will bring it in)."""
        metadata: JSON = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
        if hashed:
            metadata["annotations"] = {PUBLISHED_BY_ANNOTATION: self.publisher_id}
        body: JSON = {
            "apiVersion": f"{GROUP}/{self.ctb_version}",
            "kind": "ClusterTrustBundle",
            "metadata": metadata,
            "spec": {"signerName": self.signer_name, "trustBundle": bundle},
        }
        try:
            self.client.create(self.path, body)
        except ApiError as e:
            if is_already_exists(e):
                return False
            raise
        log.info("created ClusterTrustBundle", extra={"bundle": name})
        return True

    def _replace(self, obj: JSON, bundle: str, *, hashed: bool) -> None:
        metadata: dict[str, Any] = dict(obj.get("metadata") or {})
        metadata["labels"] = {**(metadata.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY}
        if hashed:
            metadata["annotations"] = {
                **(metadata.get("annotations") or {}),
                PUBLISHED_BY_ANNOTATION: self.publisher_id,
            }
        body: JSON = {
            **obj,
            "apiVersion": f"{GROUP}/{self.ctb_version}",
            "kind": "ClusterTrustBundle",
            "metadata": metadata,
            "spec": {**(obj.get("spec") or {}), "trustBundle": bundle},
        }
        self.client.replace(f"{self.path}/{path_segment(metadata['name'])}", body)
        log.info(
            "restored ClusterTrustBundle" if hashed else "updated ClusterTrustBundle in place",
            extra={"bundle": metadata["name"]},
        )

    def _delete(self, obj: JSON) -> None:
        name = _name(obj)
        uid = (obj.get("metadata") or {}).get("uid")
        body: JSON | None = None
        if uid:
            body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            self.client.delete(f"{self.path}/{path_segment(name)}", body)
        except ApiError as e:
            # Already gone, or replaced by a new object (its own event will reconcile).
            if is_not_found(e) or is_conflict(e):
                return
            raise
        log.info("deleted stale ClusterTrustBundle", extra={"bundle": name})


def _another_replicas_newer(obj: JSON, bundle: TrustBundle, publisher_id: str) -> bool:
    """Another replica's bundle published from a newer file than ours (see the module
    docstring, point 4)."""
    metadata = obj.get("metadata") or {}
    if (metadata.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
        return False
    if (metadata.get("annotations") or {}).get(PUBLISHED_BY_ANNOTATION) == publisher_id:
        return False
    created = parse_time(metadata.get("creationTimestamp"))
    # creationTimestamp has whole seconds: compare with the mtime's second.
    if created is None or created < bundle.modified.replace(microsecond=0):
        return False
    try:
        theirs = anchor_ders(str((obj.get("spec") or {}).get("trustBundle") or ""))
    except BundleError:
        return False
    return bool(theirs - anchor_ders(bundle.pem))


def _revoked(stable: JSON | None) -> frozenset[str]:
    annotations = ((stable or {}).get("metadata") or {}).get("annotations") or {}
    text = str(annotations.get(REVOKED_ROOTS_ANNOTATION) or "")
    return frozenset(f.strip().lower() for f in text.split(",") if f.strip())


def _holds(obj: JSON, revoked: frozenset[str]) -> bool:
    """Whether the bundle `obj` holds a root listed in `revoked` (an unreadable one: no)."""
    if not revoked:
        return False
    try:
        ders = anchor_ders(str((obj.get("spec") or {}).get("trustBundle") or ""))
    except BundleError:
        return False
    return any(hashlib.sha256(der).hexdigest() in revoked for der in ders)


def _union(bundle: TrustBundle, kept: list[JSON]) -> str:
    """What the stable bundle holds: our anchors and those of the bundles point 4 keeps
    (just ours if the union would not fit in one ClusterTrustBundle)."""
    if not kept:
        return bundle.pem
    pems = [str((obj.get("spec") or {}).get("trustBundle") or "") for obj in kept]
    try:
        return normalize_bundle(bundle.pem + "".join(pems))
    except BundleError:
        return bundle.pem


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _signer(obj: JSON) -> str:
    return str((obj.get("spec") or {}).get("signerName", ""))
