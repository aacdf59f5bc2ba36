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
- The same validation as the files (`validate_material`, `validate_trust_bundle`, the
  probe leaf), errors naming `secret <ns>/<name>`; the same metrics (`MaterialMetrics`).
  The key is never logged.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives import serialization
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.informer import Informer
from trust.bundle import BundleError, TrustBundle, normalize_bundle, parse_anchors
from trust.material import (
    DEFAULT_DOMAIN,
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

DEFAULT_SECRET_NAME = "service-serving-signer-managed-ca"
CURRENT_KEY = "ca.key"
CURRENT_CERT = "ca.crt"
NEXT_KEY = "next.key"
NEXT_CERT = "next.crt"
PREVIOUS_CERTS = "previous.crt"
ANNOTATION_PREFIX = "service-serving-signer/"
CONFIRMED_AT = ANNOTATION_PREFIX + "ca-confirmed-at"


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """The Secret's `data`, decoded."""
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def bundle_pem(data: Mapping[str, bytes]) -> bytes:
    """The roots a state publishes: current, next, previous (un-normalised)."""
    return b"".join(data.get(k, b"") for k in (CURRENT_CERT, NEXT_CERT, PREVIOUS_CERTS))


def fingerprint(pem: bytes | str) -> list[str]:
    """sha256 (lowercase hex) of each certificate's DER in `pem`."""
    return [
        hashlib.sha256(c.public_bytes(serialization.Encoding.DER)).hexdigest()
        for c in parse_anchors(normalize_bundle(pem))
    ]


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
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.signing = signing
        self.refresh_period = refresh_period
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

    def loaded(self) -> tuple[list[str], str | None]:
        """What this replica has loaded: the fingerprints of the bundle's anchors, and the
        signing certificate's (None before a CA is confirmed)."""
        with self._lock:
            bundle, material = self._bundle, self._material
        anchors = sorted(fingerprint(bundle.pem)) if bundle is not None else []
        return anchors, material.signing_fingerprint if material is not None else None

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
            if not _newer(rv, self._resource_version):
                return
            self._resource_version = rv
            self._apply(secret)

    def _apply(self, secret: Mapping[str, Any]) -> None:
        data = secret_data(secret)
        annotations = (secret.get("metadata") or {}).get("annotations") or {}
        confirmed = CONFIRMED_AT in annotations
        raw_bundle = bundle_pem(data)
        files = MaterialFiles(data.get(CURRENT_KEY, b""), data.get(CURRENT_CERT, b""), raw_bundle)
        bundle_digest = (files.digest[2],)
        signing_digest = files.digest if confirmed and self.signing else ()
        swapped_bundle = swapped_set = False
        if bundle_digest != self._digests[0]:
            try:
                bundle = validate_trust_bundle(raw_bundle, self._where, self._clock())
            except MaterialError as err:
                self._reject("trust bundle", err)
            else:
                with self._lock:
                    self._bundle = bundle
                self._digests = (bundle_digest, self._digests[1])
                self._has_bundle.set()
                swapped_bundle = True
        if signing_digest and signing_digest != self._digests[1]:
            try:
                material = validate_material(
                    files,
                    f"{self._where} key {CURRENT_KEY}",
                    f"{self._where} key {CURRENT_CERT}",
                    self._where,
                    self._clock(),
                    issuer=self._issuer,
                    domain=self._domain,
                    starting=self._material is None,
                )
            except MaterialError as err:
                self._reject("signing set", err)
            else:
                with self._lock:
                    self._material = material
                self._digests = (self._digests[0], signing_digest)
                self._has_signing_set.set()
                swapped_set = True
        if not (swapped_bundle or swapped_set):
            return
        self._metrics.invalid.set(0)
        self._metrics.reloads.labels("ok").inc()
        with self._lock:
            bundle_now, material_now = self._bundle, self._material
        assert bundle_now is not None
        self._metrics.show(bundle_now, material_now)
        log.info(
            "managed CA material loaded",
            extra={
                "secret": f"{self.namespace}/{self.name}",
                "resourceVersion": self._resource_version,
                "trustBundle": bundle_now.fingerprint,
                "signingCertificate": material_now.signing_fingerprint if material_now else None,
            },
        )
        if swapped_bundle:
            notify_listeners(self._bundle_listeners, bundle_now, log, "managed CA material")
        if swapped_set and material_now is not None:
            notify_listeners(self._listeners, material_now, log, "managed CA material")

    def _reject(self, unit: str, err: MaterialError) -> None:
        self._metrics.invalid.set(1)
        self._metrics.reloads.labels("invalid").inc()
        log.error(
            f"managed CA {unit} rejected; still using the previous one", extra={"err": str(err)}
        )

    def _deleted(self, _secret: Mapping[str, Any]) -> None:
        log.error(
            "managed CA secret deleted; still using the material loaded before (the "
            "leader makes a new CA and keeps the published roots until their leaves expire)",
            extra={"secret": f"{self.namespace}/{self.name}"},
        )


def anchors_of(pem: str) -> frozenset[str]:
    """Fingerprints of the anchors in a published bundle's PEM (empty if unparseable)."""
    try:
        return frozenset(fingerprint(pem))
    except BundleError:
        return frozenset()
