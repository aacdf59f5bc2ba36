"""Signing material from the managed CA's Secret, read through the API (docs/managed-ca.md): the
second `trust.material.MaterialSource`, beside the files.

Decisions:

- **The API, not a mounted volume.** The signer and publisher watch the one Secret (a
  list+watch with `fieldSelector=metadata.name=<name>`, which RBAC authorises by
  `resourceNames`) instead of mounting it. A Secret volume is refreshed by kubelet on its
  own sync period plus its cache TTL (a minute or more), so every rotation step would
  wait for kubelet on the signer's side too, and the leader could not tell what a replica
  has loaded. Through the watch a change is in every replica within a second, and each
  replica reports what it has loaded (`managedca.report`). A periodic quorum read
  (`refresh_period`, 60 s) bounds how far a silently stalled watch can lag; the retire
  margin must exceed that lag.
- **The Secret's layout** (`ca.key`/`ca.crt` the signing CA, `next.key`/`next.crt` a
  staged CA, `previous.crt` roots being retired) is defined here, the one place both the
  source and the managed-CA controller read it. The trust bundle is derived, never stored:
  current + next + previous roots, normalised.
- **Nothing is signed with an unconfirmed CA.** A freshly bootstrapped CA carries no
  `ca-confirmed-at` annotation until the ClusterTrustBundle read back holds it; until
  then the source serves its bundle (so the publisher can publish it) but no signing set
  (`current()` raises `RuntimeError`, as for a publisher-only process).
- **Views only move forward.** An object older than the one in use (a lower
  resourceVersion — etcd's are integers) is ignored, so a late watch event cannot undo a
  quorum read. A deleted Secret keeps the last good material in use and is logged.
- **A rejected set is retried on every re-read.** While any unit is rejected, the same
  resourceVersion is validated again on the next read (the 60 s re-read, SIGHUP): a set
  rejected only because this replica's clock is behind its `notBefore` is taken once the
  clock passes it. `material_invalid` stays 1 while anything is rejected, whatever else
  was accepted meanwhile.
- **Ready to sign with the next CA.** A staged CA (`next.key`/`next.crt`) is validated
  as a signing set exactly like the current one (key matches, valid now and for
  `lead_time`, a probe leaf verifies against the bundle), without signing with it; once
  it passes, `loaded().ready` names it and the replica's report says so. The swap waits
  for that word from every live replica (`managedca.decide`).
- **One reading of the Secret**: `managedca.codec.decode`, as the controller reads it; a
  Secret it cannot read is a rejection (the last good material stays, `material_invalid`
  1), never a crash.
- The same validation as the files (`validate_material`, `validate_trust_bundle`, the
  probe leaf), errors naming `secret <ns>/<name>`; the same metrics (`MaterialMetrics`).
  The key is never logged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.informer import Informer
from managedca.codec import StoreError, decode
from managedca.decide import CaInfo, State, held_by
from managedca.layout import (  # re-exported: the source's public names
    ANNOTATION_PREFIX as ANNOTATION_PREFIX,
)
from managedca.layout import (
    CONFIRMED_AT as CONFIRMED_AT,
)
from managedca.layout import (
    CURRENT_CERT as CURRENT_CERT,
)
from managedca.layout import (
    CURRENT_KEY as CURRENT_KEY,
)
from managedca.layout import (
    DEFAULT_SECRET_NAME as DEFAULT_SECRET_NAME,
)
from managedca.layout import (
    NEXT_CERT as NEXT_CERT,
)
from managedca.layout import (
    NEXT_KEY as NEXT_KEY,
)
from managedca.layout import (
    PREVIOUS_CERTS as PREVIOUS_CERTS,
)
from managedca.layout import (
    REVOKED as REVOKED,
)
from managedca.layout import (
    bundle_pem as bundle_pem,
)
from managedca.layout import (
    pem_fingerprints as pem_fingerprints,
)
from managedca.layout import (
    secret_data as secret_data,
)
from managedca.layout import split_pem
from trust.bundle import TrustBundle
from trust.material import (
    DEFAULT_DOMAIN,
    MIN_REMAINING,
    BundleListener,
    LeafIssuer,
    Listener,
    MaterialError,
    MaterialFiles,
    SigningMaterial,
    notify_listeners,
    validate_material,
    validate_trust_bundle,
)
from trust.metrics import MaterialMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    """What a replica has loaded: the bundle's anchors, the CA it signs with, and the
    staged CA it has validated and would sign with (fingerprints; None: none)."""

    anchors: tuple[str, ...]
    signing: str | None
    ready: str | None


def _newer(rv: str, than: str) -> bool:
    if not than:
        return True
    try:
        return int(rv) > int(than)
    except ValueError:
        return rv != than


class ApiMaterialSource:
    """The managed CA's material, from the watched Secret `namespace/name`.

    Unlike the file source it may start empty (the first leader has not bootstrapped yet):
    `has_bundle()` / `has_signing_set()` say what it serves; `wait_for_bundle` /
    `wait_for_signing_set` block until then (the manager starts the publisher's and the
    signer's workers behind them). Without `signing` only the bundle is served."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str = DEFAULT_SECRET_NAME,
        registry: CollectorRegistry | None = None,
        *,
        signing: bool = True,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        issuer: LeafIssuer | None = None,
        domain: str = DEFAULT_DOMAIN,
        refresh_period: float = 60.0,
        lead_time: timedelta = MIN_REMAINING,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.signing = signing
        self.refresh_period = refresh_period
        self.lead_time = lead_time
        self.path = f"/api/v1/namespaces/{path_segment(namespace)}/secrets"
        self._where = f"secret {namespace}/{name}"
        self._clock = clock
        self._issuer = issuer
        self._domain = domain
        self._lock = threading.Lock()
        self._apply_lock = threading.Lock()
        self._metrics = MaterialMetrics(registry)
        self._listeners: list[Listener] = []
        self._bundle_listeners: list[BundleListener] = []
        self._bundle: TrustBundle | None = None
        self._material: SigningMaterial | None = None
        self._resource_version = ""
        self._digests: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._ready: tuple[str, tuple[str, ...]] | None = None  # (fingerprint, digest)
        self._rejected: dict[str, str] = {}  # unit -> why, while rejected
        self._revoked: set[str] = set()  # every root any Secret seen revoked
        self._remembered: Callable[[], tuple[frozenset[str], tuple[CaInfo, ...]]] | None = None
        self._published: tuple[CaInfo, ...] = ()  # what the stable bundle publishes
        self._served: State | None = None  # the state whose bundle is served
        self._change_listeners: list[Callable[[], object]] = []
        self._has_bundle = threading.Event()
        self._has_signing_set = threading.Event()
        self._wake = threading.Event()
        self.informer: Informer[dict[str, Any]] = Informer(
            client, self.path, name="managed-ca-secret", field_selector=f"metadata.name={name}"
        )
        self.informer.add_handler(self.apply, lambda _old, new: self.apply(new), self._deleted)

    # MaterialSource --------------------------------------------------------------------

    # current/trust_bundle each read one unit under the lock, and each says in its own
    # words that its unit is not there yet (MaterialSource's two units).
    def current(self) -> SigningMaterial:
        with self._lock:
            material = self._material
        if material is None:
            raise RuntimeError(f"{self._where}: no confirmed managed CA yet")
        return material

    def trust_bundle(self) -> TrustBundle:
        with self._lock:
            bundle = self._bundle
        if bundle is None:
            raise RuntimeError(f"{self._where}: no managed CA yet")
        return bundle

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def add_bundle_listener(self, listener: BundleListener) -> None:
        self._bundle_listeners.append(listener)

    def add_change_listener(self, listener: Callable[[], object]) -> None:
        """`listener()` after anything `loaded()` says changed (the reporter)."""
        self._change_listeners.append(listener)

    def run(self, stop: threading.Event) -> None:
        """Watch the Secret, and read it again every `refresh_period`, until `stop`."""
        thread = threading.Thread(
            target=self.informer.run, args=(stop,), name="managed-ca-watch", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + self.refresh_period
        while not stop.wait(0.2):
            if self._wake.is_set() or time.monotonic() >= deadline:
                self._wake.clear()
                self.refresh()
                deadline = time.monotonic() + self.refresh_period
        thread.join(timeout=5)

    def reload_now(self) -> None:
        self._wake.set()

    # what it serves --------------------------------------------------------------------

    def has_bundle(self) -> bool:
        return self._has_bundle.is_set()

    def has_signing_set(self) -> bool:
        return self._has_signing_set.is_set()

    def wait_for_bundle(self, stop: threading.Event) -> bool:
        while not (stop.is_set() or self._has_bundle.wait(0.1)):
            pass
        return self._has_bundle.is_set()

    def wait_for_signing_set(self, stop: threading.Event) -> bool:
        while not (stop.is_set() or self._has_signing_set.wait(0.1)):
            pass
        return self._has_signing_set.is_set()

    def remember_revoked_from(
        self, read: Callable[[], tuple[frozenset[str], tuple[CaInfo, ...]]]
    ) -> None:
        """Where revocations are remembered beyond the Secret, and what is published
        (`managedca.revocations.read_stable`): read before each Secret is applied, so a
        Secret restored from before an emergency never signs with nor publishes the
        revoked root, and never drops a published root, even in a replica started after
        the restore."""
        self._remembered = read

    def revoked(self) -> frozenset[str]:
        """Roots revoked by `ca rotate --emergency` in any Secret this process has seen:
        never published or signed with again, and never adopted by a bootstrap here."""
        return frozenset(self._revoked)

    def loaded(self) -> Loaded:
        """What this replica has loaded: the fingerprints of the bundle's anchors, the
        signing certificate's (None before a CA is confirmed), and the staged CA's once it
        is validated as a signing set."""
        with self._lock:
            bundle, material, ready = self._bundle, self._material, self._ready
        anchors = tuple(sorted(pem_fingerprints(bundle.pem))) if bundle is not None else ()
        return Loaded(
            anchors,
            material.signing_fingerprint if material is not None else None,
            ready[0] if ready is not None else None,
        )

    # applying an object ----------------------------------------------------------------

    def refresh(self) -> None:
        """Read the Secret now (a quorum read) and apply it if it is newer."""
        try:
            secret = self.client.get(f"{self.path}/{path_segment(self.name)}")
        except ApiError as err:
            if not is_not_found(err):
                log.warning("managed CA secret: read failed", extra={"err": str(err)})
            return
        self.apply(secret)

    def apply(self, secret: Mapping[str, Any]) -> None:
        """Take `secret` (from the watch, or a read) if it is newer than what is in use."""
        rv = str((secret.get("metadata") or {}).get("resourceVersion", ""))
        with self._apply_lock:
            retry = rv == self._resource_version and bool(self._rejected)
            if not (retry or _newer(rv, self._resource_version)):
                return
            self._resource_version = rv
            self._apply(secret)

    def _apply(self, secret: Mapping[str, Any]) -> None:
        try:
            stored = decode(secret)  # the one reading of the Secret (the controller's too)
        except StoreError as err:
            self._note_rejections({"secret": str(err)})
            return
        state = stored.state
        confirmed = state.confirmed_at is not None
        served_before = self._served  # the state whose roots this replica served so far
        remembered, readable = self._remembered_revoked()
        self._revoked |= state.revoked | remembered
        dropped = self._dropped(state)
        if dropped:
            self._stop_serving_revoked()
            self._note_rejections(
                {
                    "secret": (
                        f"{self._where}: drops the root(s) {', '.join(sorted(dropped))} "
                        "without a Retire or an Emergency (restored from an older backup, "
                        "or edited?); the roots in use stay until the leader adopts them "
                        "back from the ClusterTrustBundle"
                    )
                }
            )
            return
        raw_bundle = b"".join(
            stored.certs[a.fingerprint]
            for a in state.anchors()
            if a.fingerprint not in self._revoked
        )
        data = {
            CURRENT_KEY: stored.current_key,
            CURRENT_CERT: stored.certs[state.current.fingerprint],
        }
        if state.next is not None:
            data[NEXT_CERT] = stored.certs[state.next.fingerprint]
            if stored.next_key is not None:
                data[NEXT_KEY] = stored.next_key
        files = MaterialFiles(data.get(CURRENT_KEY, b""), data.get(CURRENT_CERT, b""), raw_bundle)
        bundle_digest = (files.digest[2],)
        signing_digest = files.digest if confirmed and self.signing else ()
        rejected: dict[str, str] = {}
        swapped_bundle = swapped_set = False
        if bundle_digest != self._digests[0] and not readable:
            # A Secret restored from before an emergency could name a revoked root, and
            # only that record says so: serve what is served (nothing yet, for a replica
            # just started) until it is read (retried on every re-read).
            rejected["trust bundle"] = (
                f"{self._where}: cannot read the revoked roots on the stable "
                "ClusterTrustBundle: the trust bundle it serves stays until it is read"
            )
        elif bundle_digest != self._digests[0]:
            try:
                bundle = validate_trust_bundle(raw_bundle, self._where, self._clock())
            except MaterialError as err:
                rejected["trust bundle"] = str(err)
            else:
                with self._lock:
                    self._bundle = bundle
                self._digests = (bundle_digest, self._digests[1])
                self._has_bundle.set()
                swapped_bundle = True
        if bundle_digest == self._digests[0]:
            self._served = state  # the state whose roots the served bundle holds
        refused = (
            self._refuse_switch(state.current, readable, served_before)
            if signing_digest and signing_digest != self._digests[1]
            else None
        )
        if refused is not None:
            rejected["signing set"] = refused
        elif signing_digest and signing_digest != self._digests[1]:
            try:
                material = self._validate(
                    files, CURRENT_KEY, CURRENT_CERT, starting=self._material is None
                )
            except MaterialError as err:
                rejected["signing set"] = str(err)
            else:
                with self._lock:
                    self._material = material
                self._digests = (self._digests[0], signing_digest)
                self._has_signing_set.set()
                swapped_set = True
        if self._material is not None and self._material.signing_fingerprint in self._revoked:
            # `ca rotate --emergency`: nothing more is signed with it, from this instant.
            with self._lock:
                self._material = None
            self._digests = (self._digests[0], ())
            self._has_signing_set.clear()
            log.warning(
                "managed CA: the signing CA was revoked; signing stops until the new CA is "
                "published",
                extra={"secret": f"{self.namespace}/{self.name}"},
            )
            swapped_set = True
        ready = self._validate_next(data, raw_bundle, rejected, confirmed)
        changed_ready = ready != self._ready
        if changed_ready:
            with self._lock:
                self._ready = ready
        self._note_rejections(rejected)
        if swapped_bundle or swapped_set:
            self._metrics.reloads.labels("ok").inc()
            self._loaded(swapped_bundle, swapped_set)
        if swapped_bundle or swapped_set or changed_ready:
            for listener in list(self._change_listeners):
                try:
                    listener()
                except Exception:
                    log.exception("managed CA material change listener failed")

    def _stop_serving_revoked(self) -> None:
        """While a state is refused, what is served still follows every revocation known:
        no signing with a revoked CA, no revoked root in the bundle."""
        with self._lock:
            bundle, material = self._bundle, self._material
        if material is not None and material.signing_fingerprint in self._revoked:
            with self._lock:
                self._material = None
            self._digests = (self._digests[0], ())
            self._has_signing_set.clear()
            log.warning("managed CA: the signing CA was revoked; signing stops")
        if bundle is None:
            return
        kept = [
            pem
            for pem in split_pem(bundle.pem.encode())
            if pem_fingerprints(pem)[0] not in self._revoked
        ]
        if len(kept) == len(split_pem(bundle.pem.encode())):
            return
        try:
            trimmed = validate_trust_bundle(b"".join(kept), self._where, self._clock())
        except MaterialError:
            trimmed = None  # nothing but revoked roots: serve nothing
        with self._lock:
            self._bundle = trimmed
        self._digests = ((), self._digests[1])
        if trimmed is None:
            self._has_bundle.clear()
            return
        notify_listeners(self._bundle_listeners, trimmed, log, "managed CA material")

    def _remembered_revoked(self) -> tuple[frozenset[str], bool]:
        """What the stable bundle remembers revoked, and whether it could be read."""
        if self._remembered is None:
            return frozenset(), True
        try:
            revoked, published = self._remembered()
            # The publisher never deletes the stable bundle: one gone after it was seen
            # (a `kubectl delete`) says nothing new; what it published still counts.
            if published or not self._published:
                self._published = published
            return revoked, True
        except Exception as err:  # an API error, a timeout: fail closed (`_refuse_switch`)
            # What the Secret and this process know still applies; a switch to another
            # signing CA waits, and the 60 s re-read retries (a refused set is rejected).
            log.warning(
                "managed CA: cannot read the remembered revocations", extra={"err": str(err)}
            )
            return frozenset(), False

    def _refuse_switch(self, ca: CaInfo, readable: bool, served: State | None) -> str | None:
        """Why this replica must not switch its signing set to `ca` now (None: it may).
        It keeps signing with what it has, and retries on every re-read:

        - the revocation record (the stable ClusterTrustBundle) could not be read: a
          Secret restored from before an emergency could make `ca` a revoked root;
        - the stable bundle exists and does not publish `ca`: a Secret restored from a
          backup taken while a rotation was staged, after that rotation retired `ca`
          (consumers dropped it; the leader puts it through the gates again);
        - the state this replica `served` before this version of the Secret did not
          hold `ca` as its current, staged or a previous root not due to retire: a swap
          or a confirmation names the CA the state before it staged or held, a restore
          may name a root retired since (or whose retire time had passed) — and the
          publisher puts the restored roots back into the stable bundle within
          milliseconds, long before consumers hold them again (the re-read retries it;
          by then the leader has unconfirmed a restored CA)."""
        with self._lock:
            material = self._material
        if material is not None and material.signing_fingerprint == ca.fingerprint:
            return None
        if not readable:
            return (
                f"{self._where}: cannot read the revoked roots on the stable "
                f"ClusterTrustBundle: not switching to CA {ca.fingerprint} until it is read"
            )
        published = {c.fingerprint for c in self._published}
        if self._published and ca.fingerprint not in published:
            return (
                f"{self._where}: CA {ca.fingerprint} is not in the stable ClusterTrustBundle "
                "(restored from an older backup?): no leaf is signed with a root "
                "consumers do not hold; the leader puts it through the gates again"
            )
        if served is not None and not held_by(served, ca, self._clock()):
            return (
                f"{self._where}: CA {ca.fingerprint} was not in the state this replica "
                "served before, or was being retired (restored from an older backup?): "
                "consumers may not hold it; the leader puts it through the gates again"
            )
        return None

    def _dropped(self, state: State) -> frozenset[str]:
        return dropped_roots(
            self._served, state, frozenset(self._revoked), self._clock(), self._published
        )

    def _validate(
        self, files: MaterialFiles, key: str, cert: str, *, starting: bool = False
    ) -> SigningMaterial:
        return validate_material(
            files,
            f"{self._where} key {key}",
            f"{self._where} key {cert}",
            self._where,
            self._clock(),
            issuer=self._issuer,
            domain=self._domain,
            starting=starting,
            min_remaining=self.lead_time,
        )

    def _validate_next(
        self,
        data: Mapping[str, bytes],
        raw_bundle: bytes,
        rejected: dict[str, str],
        confirmed: bool,
    ) -> tuple[str, tuple[str, ...]] | None:
        """(fingerprint, digest) of the CA signing is about to move to — the staged CA, or
        an unconfirmed current one — once it passes as a signing set; None without one,
        or while it is rejected (the reason goes into `rejected`)."""
        key, cert = (NEXT_KEY, NEXT_CERT) if confirmed else (CURRENT_KEY, CURRENT_CERT)
        if not self.signing or cert not in data:
            return None
        if key not in data:
            rejected["next signing set"] = (
                f"{self._where}: key {cert} without {key} (edited by hand?)"
            )
            return None
        files = MaterialFiles(data[key], data[cert], raw_bundle)
        if self._ready is not None and self._ready[1] == files.digest:
            return self._ready
        try:
            material = self._validate(files, key, cert)
        except MaterialError as err:
            rejected["next signing set"] = str(err)
            return None
        return material.signing_fingerprint, files.digest

    def _note_rejections(self, rejected: dict[str, str]) -> None:
        for unit, why in rejected.items():
            if self._rejected.get(unit) != why:
                self._metrics.reloads.labels("invalid").inc()
                log.error(
                    f"managed CA {unit} rejected; still using the previous one (retried on "
                    "every re-read)",
                    extra={"err": why},
                )
        for unit in self._rejected.keys() - rejected.keys():
            log.info(f"managed CA {unit} accepted after a rejection")
        self._rejected = rejected
        self._metrics.invalid.set(1 if rejected else 0)

    def _loaded(self, swapped_bundle: bool, swapped_set: bool) -> None:
        with self._lock:
            bundle_now, material_now = self._bundle, self._material
        if bundle_now is None:
            return
        self._metrics.show(bundle_now, material_now)
        log.info(
            "managed CA material loaded",
            extra={
                "secret": f"{self.namespace}/{self.name}",
                "resourceVersion": self._resource_version,
                "trustBundle": bundle_now.digest,
                "signingCertificate": material_now.signing_fingerprint if material_now else None,
            },
        )
        if swapped_bundle:
            notify_listeners(self._bundle_listeners, bundle_now, log, "managed CA material")
        if swapped_set and material_now is not None:
            notify_listeners(self._listeners, material_now, log, "managed CA material")

    def _deleted(self, _secret: Mapping[str, Any]) -> None:
        log.error(
            "managed CA secret deleted; still using the material loaded before (the "
            "leader makes a new CA and keeps the published roots until their leaves expire)",
            extra={"secret": f"{self.namespace}/{self.name}"},
        )


def dropped_roots(
    served: State | None,
    state: State,
    revoked: frozenset[str],
    now: datetime,
    published: tuple[CaInfo, ...] = (),
) -> frozenset[str]:
    """Roots that `state` lacks, though it neither retired nor revoked them (nor are they
    in `revoked`), of those the `served` state publishes (not merely staged) or the
    stable bundle `published` (a replica started after a restore has served nothing): a
    Secret that moved backwards. A source refuses such a state. Expired roots verify
    nothing and may go. Pure: the property model runs it too."""
    roots = (
        [*(a for a in served.anchors() if a != served.next), *published] if served else published
    )
    keep = {a.fingerprint for a in roots if now < a.not_after}
    gone = keep - {a.fingerprint for a in state.anchors()}
    return frozenset(gone - set(state.retired) - state.revoked - revoked)
