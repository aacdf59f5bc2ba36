"""The ClusterTrustBundle publisher (docs/reference.md §4), shaped like kube-controller-manager's
`clustertrustbundlepublisher`: one queue key, a `sync` that reads only the informer cache,
a bundle named after the hash of its content — and beside it one bundle whose name survives
rotation.

What one sync decides, from the current normalised trust bundle (`publisher.decide.plan`,
pure: `sync` reads the cache, plans, then acts in the plan's order):

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

5. opt-in (`publish_unlinked`, `--publish-unlinked-bundle`): the **unlinked** bundle
   `<signer with ".">.trust-anchors` (`trust.bundle.unlinked_bundle_name`) — no
   `spec.signerName`, so the API requires a colon-free name and checks no `attest` on its
   writes — holding exactly what the stable bundle holds, written right after it (same
   rules: created, or replaced conditionally when it differs). Kubernetes 1.35-1.37's
   kubelet drops its cached by-name answer for such a bundle when it changes, which it
   does not for the signer-linked stable bundle (docs/trust-consumers.md "Which
   projection"). Turned off again, a bundle of that name with our managed-by label is
   deleted with the stale ones, so it never lingers holding a root later removed.

Bundles of other signers are never touched: the informer only sees ours (field selector
`spec.signerName=<signer>`) and `sync` re-checks the field; a second informer sees only
the unlinked bundle's name (`metadata.name=<name>`).

Reconciles are triggered by any add/update/delete of one of our bundles, by `trigger()`
(the trust-bundle file changed) and by a periodic resync. Failures raise and are retried
by the shared loop (`kube.controller`: with the key's backoff, and not before the
server's Retry-After when transient), which also counts every sync's outcome
(`controller_sync_total{controller="publisher"}`); a successful one sets the
trust-bundle expiry gauge.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

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
from kube.types import JSON
from kube.workqueue import RateLimitingQueue
from publisher import decide
from publisher.metrics import PublisherMetrics
from trust.bundle import TrustBundle, stable_bundle_name, unlinked_bundle_name
from trust.clustertrustbundles import bundles_path

log = logging.getLogger(__name__)

GROUP = "certificates.k8s.io"
QUEUE_NAME = "ca_cert_publisher_cluster_trust_bundles"
KEY = ""  # the single queue key, as in KCM


class BundleCache(Cache[JSON], Protocol):
    """What `sync` reads: the informer's cache of our ClusterTrustBundles."""

    def get(self, key: str) -> JSON | None: ...

    def list(self) -> list[JSON]: ...


@dataclass(frozen=True)
class Caches:
    """The caches the publisher reads: the ClusterTrustBundles of our signer, and the one
    named like our unlinked bundle (None: not watched, as if absent)."""

    bundles: BundleCache
    unlinked: BundleCache | None = None


def informers(factory: InformerFactory, *, signer_name: str, ctb_version: str) -> Caches:
    """Our signer's ClusterTrustBundles, whole (a bundle is small and few exist), and the
    unlinked bundle by name (watched whether published or not: point 5)."""
    return Caches(
        bundles=factory.informer(
            bundles_path(ctb_version),
            name="clustertrustbundles",
            field_selector=f"spec.signerName={signer_name}",
            transform=_whole,
        ),
        unlinked=factory.informer(
            bundles_path(ctb_version),
            name="unlinked-clustertrustbundle",
            field_selector=f"metadata.name={unlinked_bundle_name(signer_name)}",
            transform=_whole,
        ),
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
        publish_unlinked: bool = False,
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
        self.unlinked_name = unlinked_bundle_name(signer_name)
        self.publish_unlinked = publish_unlinked
        self.path = bundles_path(ctb_version)
        self.metrics = PublisherMetrics(registry)
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.cache = caches.bundles
        self.unlinked_cache = caches.unlinked
        for cache in (self.cache, self.unlinked_cache):
            if cache is not None:
                cache.add_handler(
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
            synced=tuple(c.has_synced for c in (self.cache, self.unlinked_cache) if c is not None),
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
        """One reconcile from the cache (there is one key): read, plan, act. Raises on any
        failed API call, for the loop to retry; a successful one sets the expiry gauge."""
        self._sync(self.bundle_source())
        return None

    def _sync(self, bundle: TrustBundle) -> None:
        planned = decide.plan(
            bundle,
            self.cache.list(),
            signer_name=self.signer_name,
            publisher_id=self.publisher_id,
            api_version=self.ctb_version,
            unlinked=self._unlinked(),
        )
        self._act(planned)
        self.metrics.trust_bundle_expiry.set(planned.expiry.timestamp())

    def _unlinked(self) -> decide.Unlinked | None:
        if self.unlinked_cache is None:
            return None
        current = self.unlinked_cache.get(self.unlinked_name)
        return decide.Unlinked(self.unlinked_name, current, self.publish_unlinked)

    def _act(self, planned: decide.Plan) -> None:
        """Carry out the plan in order; a stable bundle's write that does not go through
        defers the deletes (its own watch event reconciles again); a failed delete does
        not stop the others."""
        self._warn_kept(planned.kept, planned.digest)
        errors: list[ApiError] = []
        for op in planned.ops:
            try:
                went_through = self._apply(op)
            except ApiError as e:
                if not isinstance(op, decide.Delete):
                    raise
                errors.append(e)
                continue
            if not went_through:
                return
        if errors:
            raise errors[0]

    def _apply(self, op: decide.Op) -> bool:
        """One write; False only when the stable bundle's write did not go through."""
        path = f"{self.path}/{path_segment(op.name)}"
        try:
            match op:
                case decide.Create():
                    self.client.create(self.path, op.body)
                    log.info("created ClusterTrustBundle", extra={"bundle": op.name})
                case decide.Replace():
                    self.client.replace(path, op.body)
                    done = "restored" if op.hashed else "updated in place"
                    log.info("ClusterTrustBundle %s", done, extra={"bundle": op.name})
                case decide.Delete():
                    self.client.delete(path, op.body)
                    log.info("deleted stale ClusterTrustBundle", extra={"bundle": op.name})
        except ApiError as e:
            match op:
                case decide.Create() if is_already_exists(e):
                    # Our cache lags our own earlier create: its watch event brings it in.
                    return op.hashed
                case decide.Replace() if is_conflict(e) and not op.hashed:
                    # Our cache lags a newer version (ours, or someone's edit): its event comes.
                    return False
                case decide.Delete() if is_not_found(e) or is_conflict(e):
                    # Already gone, or replaced by a new object (its own event reconciles).
                    return True
            raise
        return True

    def _warn_kept(self, kept: frozenset[str], digest: str) -> None:
        for other in sorted(kept - self._kept):
            log.warning(
                "keeping a newer ClusterTrustBundle of another replica that holds anchors our "
                "trust-bundle file lacks (is this replica's ConfigMap volume stale?) until the "
                "file changes",
                extra={"bundle": other, "trustBundle": digest},
            )
        self._kept = set(kept)
