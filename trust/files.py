"""The file source of signing material (docs/reference.md §3): the key, certificate and
trust-bundle files named by the flags, re-read when they change, and the metrics of that.

Decisions:

- The three files are read together and re-read if any content hash changed during the
  read, so a key from one version is never paired with a cert from another. Validation
  (`trust.material`) then works on the bytes read, never on the paths again.
- Change detection polls content hashes (default every 2 s). It follows symlinks on every
  read, so Kubernetes' atomic `..data` swaps and in-place rewrites both show up.
  `reload_now()` (SIGHUP) polls at once.
- An invalid set leaves the last good set in place. It is retried on every poll (a cert
  whose notBefore is a second in the future becomes valid on its own), but logged (the
  problem under `err`) and counted in `material_reload_total{result="invalid"}` once per
  distinct (content, problem) pair.
- While files on disk are rejected, `service_serving_ca_controller_material_invalid` is 1
  (the reason is in the log); `service_serving_ca_controller_material_info` carries the
  fingerprints of what is in use as labels (`trust_bundle`: the 24 hex that end the
  ClusterTrustBundle's name; `signing_certificate`: sha256 of the signing cert's DER, as
  `openssl x509 -fingerprint -sha256` prints it without colons, lowercase), so every
  replica's view can be compared during a rotation.
- A key file readable by others is warned about, not refused (Secret volumes default to
  0644); an expired anchor in the bundle file is published but warned about, once per
  bundle content.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeAlias

from prometheus_client import CollectorRegistry

from trust.bundle import TrustBundle
from trust.material import (
    DEFAULT_DOMAIN,
    BundleListener,
    LeafIssuer,
    Listener,
    MaterialError,
    MaterialFiles,
    SigningMaterial,
    expired_anchors,
    notify_listeners,
    validate_material,
    validate_trust_bundle,
)
from trust.metrics import MaterialMetrics

log = logging.getLogger(__name__)

# reading ------------------------------------------------------------------------------


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise MaterialError(path, "does not exist") from None
    except IsADirectoryError:
        raise MaterialError(path, "is a directory, not a file") from None
    except PermissionError:
        raise MaterialError(path, "is not readable (permission denied)") from None
    except OSError as err:
        raise MaterialError(
            path, f"cannot be read ({err.strerror or type(err).__name__})"
        ) from None


def _digests(paths: Sequence[str]) -> tuple[str, ...]:
    return tuple(hashlib.sha256(_read(p)).hexdigest() for p in paths)


def check_distinct(key_path: str, cert_path: str) -> None:
    """The KEP requires the key and the certificate to be two different files."""
    same = key_path == cert_path or os.path.realpath(key_path) == os.path.realpath(cert_path)
    if not same:
        try:
            same = os.path.samefile(key_path, cert_path)
        except OSError:
            same = False
    if same:
        raise MaterialError(
            cert_path,
            f"is the same file as the key ({key_path}); --service-serving-cert and "
            "--service-serving-key must be different files",
        )


def read_files(key_path: str, cert_path: str, bundle_path: str, attempts: int = 5) -> MaterialFiles:
    """The three files' bytes, consistent with each other: if any file changed while we
    read, read all three again."""
    paths = (key_path, cert_path, bundle_path)
    for _ in range(attempts):
        files = MaterialFiles(*(_read(p) for p in paths))
        if _digests(paths) == files.digest:
            return files
    raise MaterialError(cert_path, "kept changing while being read; will retry")


def key_file_warning(key_path: str) -> str | None:
    """A warning when the key file can be read by others, or by a group this process is
    not in (not an error: Secret volumes default to 0644). Group access for our own group
    is the in-cluster norm — a Secret volume with `fsGroup` is group-readable so a non-root
    user can read it — and is not warned about."""
    try:
        st = os.stat(key_path)
    except OSError:
        return None
    mode = st.st_mode
    own_group = st.st_gid == os.getegid() or st.st_gid in os.getgroups()
    loose = stat.S_IRWXO if own_group else (stat.S_IRWXG | stat.S_IRWXO)
    if mode & loose:
        return (
            f"{key_path}: private key file is group/world-accessible (mode "
            f"{stat.S_IMODE(mode):04o}); restrict it to 0600 (Secret volume defaultMode: 0400)"
        )
    return None


def load_material(
    key_path: str | os.PathLike[str],
    cert_path: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    now: datetime | None = None,
    *,
    issuer: LeafIssuer | None = None,
    domain: str = DEFAULT_DOMAIN,
) -> SigningMaterial:
    """Read and validate the three files (docs/reference.md §2). Raises `MaterialError`.
    A usable key file readable by group or others is logged as a warning (only once the
    set is valid, so a failed start prints one line)."""
    key_p, cert_p, bundle_p = os.fspath(key_path), os.fspath(cert_path), os.fspath(bundle_path)
    check_distinct(key_p, cert_p)
    files = read_files(key_p, cert_p, bundle_p)
    material = validate_material(
        files, key_p, cert_p, bundle_p, now, issuer=issuer, domain=domain, starting=True
    )
    warning = key_file_warning(key_p)
    if warning:
        log.warning(warning)
    return material


# hot reload ---------------------------------------------------------------------------

_Digest: TypeAlias = tuple[str, ...]


class FileMaterialSource:
    """The current trust bundle and signing set, re-read when the files change.

    Constructing it loads and validates the files (raises `MaterialError`). Without
    `key_path`/`cert_path` only the trust bundle is watched (a publisher-only process).
    `run(stop)` polls; each poll that sees changed content validates each changed unit
    and either swaps it in (then calls that unit's listeners) or keeps the old one.
    """

    def __init__(
        self,
        key_path: str | os.PathLike[str] | None,
        cert_path: str | os.PathLike[str] | None,
        bundle_path: str | os.PathLike[str],
        registry: CollectorRegistry | None = None,
        poll_interval: float = 2.0,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        issuer: LeafIssuer | None = None,
        domain: str = DEFAULT_DOMAIN,
    ) -> None:
        if (key_path is None) != (cert_path is None):
            raise ValueError("key_path and cert_path are given together or not at all")
        self.key_path = os.fspath(key_path) if key_path is not None else None
        self.cert_path = os.fspath(cert_path) if cert_path is not None else None
        self.bundle_path = os.fspath(bundle_path)
        self.poll_interval = poll_interval
        self._clock = clock
        self._issuer = issuer
        self._domain = domain
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._listeners: list[Listener] = []
        self._bundle_listeners: list[BundleListener] = []
        self._metrics = MaterialMetrics(registry)
        self._failures: dict[str, tuple[_Digest | None, str]] = {}
        data, modified = self._read_bundle()
        self._bundle = validate_trust_bundle(data, self.bundle_path, modified)
        self._bundle_digest: _Digest = (hashlib.sha256(data).hexdigest(),)
        self._material: SigningMaterial | None = None
        self._digest: _Digest = ()
        if self.key_path is not None and self.cert_path is not None:
            check_distinct(self.key_path, self.cert_path)
            files = read_files(self.key_path, self.cert_path, self.bundle_path)
            self._material = self._validate(files, starting=True)
            self._digest = files.digest
            self._warn_key_mode()
        self._warn_expired_anchors(self._bundle)
        self._metrics.show(self._bundle, self._material)

    # what is in use --------------------------------------------------------------------

    def current(self) -> SigningMaterial:
        """The signing set in use. Raises `RuntimeError` when none is configured."""
        with self._lock:
            material = self._material
        if material is None:
            raise RuntimeError("no signing key and certificate configured")
        return material

    def trust_bundle(self) -> TrustBundle:
        """The trust bundle in use (the publisher's input)."""
        with self._lock:
            return self._bundle

    def add_listener(self, listener: Listener) -> None:
        """`listener(material)` runs on the polling thread after each signing-set swap."""
        self._listeners.append(listener)

    def add_bundle_listener(self, listener: BundleListener) -> None:
        """`listener(bundle)` runs on the polling thread after each trust-bundle swap."""
        self._bundle_listeners.append(listener)

    # polling ---------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Poll every `poll_interval`, or at once after `reload_now()`, until `stop`."""
        interval = min(self.poll_interval, 0.2)
        waited = 0.0
        while not stop.is_set():
            woken = self._wake.wait(interval)
            waited += interval
            if stop.is_set():
                return
            if woken or waited >= self.poll_interval:
                self._wake.clear()
                waited = 0.0
                self.poll()

    def reload_now(self) -> None:
        """Re-read the files at once (SIGHUP), instead of at the next poll."""
        self._wake.set()

    def poll(self) -> bool:
        """Check the files once. True when a new trust bundle or signing set was swapped
        in."""
        swapped = self._poll_bundle()
        if self.key_path is not None:
            swapped = self._poll_signing_set() or swapped
        if swapped:
            self._metrics.reloads.labels("ok").inc()
            with self._lock:
                bundle, material = self._bundle, self._material
            self._metrics.show(bundle, material)
        return swapped

    def _poll_bundle(self) -> bool:
        digest: _Digest | None = None
        try:
            data, modified = self._read_bundle()
            digest = (hashlib.sha256(data).hexdigest(),)
            if digest == self._bundle_digest:
                self._clear_failure("bundle")
                return False
            bundle = validate_trust_bundle(data, self.bundle_path, modified)
        except MaterialError as err:
            self._record_failure("bundle", digest, str(err))
            return False
        with self._lock:
            previous, self._bundle = self._bundle, bundle
            self._bundle_digest = digest
        self._clear_failure("bundle")
        log.info(
            "trust bundle reloaded",
            extra={
                "file": self.bundle_path,
                "trustBundle": bundle.digest,
                "previous": previous.digest,
                "anchors": len(bundle.anchors),
            },
        )
        self._warn_expired_anchors(bundle)
        notify_listeners(self._bundle_listeners, bundle, log, "signing-material")
        return True

    def _poll_signing_set(self) -> bool:
        assert self.key_path is not None and self.cert_path is not None
        digest: _Digest | None = None
        try:
            check_distinct(self.key_path, self.cert_path)
            # Loaded as the bundle is above, with its own state and failure key.
            files = read_files(self.key_path, self.cert_path, self.bundle_path)
            digest = files.digest
            if digest == self._digest:
                self._clear_failure("signing")
                return False
            material = self._validate(files)
        except MaterialError as err:
            self._record_failure("signing", digest, str(err))
            return False
        with self._lock:
            previous, self._material = self._material, material
            self._digest = digest
        self._clear_failure("signing")
        self._warn_key_mode()
        log.info(
            "signing material reloaded",
            extra={
                "fingerprint": material.fingerprint,
                "previous": previous.fingerprint if previous is not None else None,
                "signingCertificate": material.signing_fingerprint,
                "signingCertNotAfter": material.signing_cert.not_valid_after_utc.isoformat(),
            },
        )
        notify_listeners(self._listeners, material, log, "signing-material")
        return True

    def _validate(self, files: MaterialFiles, *, starting: bool = False) -> SigningMaterial:
        assert self.key_path is not None and self.cert_path is not None
        return validate_material(
            files,
            self.key_path,
            self.cert_path,
            self.bundle_path,
            self._clock(),
            issuer=self._issuer,
            domain=self._domain,
            starting=starting,
        )

    def _read_bundle(self) -> tuple[bytes, datetime]:
        data = _read(self.bundle_path)
        try:
            modified = datetime.fromtimestamp(os.stat(self.bundle_path).st_mtime, UTC)
        except OSError:
            modified = self._clock()
        return data, modified

    # failures --------------------------------------------------------------------------

    def _record_failure(self, unit: str, digest: _Digest | None, message: str) -> None:
        failure = (digest, message)
        if self._failures.get(unit) == failure:
            return
        already_said = any(m == message for u, (_, m) in self._failures.items() if u != unit)
        self._failures[unit] = failure
        self._metrics.invalid.set(1)
        if already_said:
            return
        self._metrics.reloads.labels("invalid").inc()
        with self._lock:
            in_use = self._bundle.digest if unit == "bundle" else self._in_use_fingerprint()
        log.error(
            "signing material rejected; still using the previous set"
            if unit == "signing"
            else "trust bundle rejected; still publishing the previous one",
            extra={"err": message, "fingerprint": in_use},
        )

    def _in_use_fingerprint(self) -> str | None:
        return self._material.fingerprint if self._material is not None else None

    def _clear_failure(self, unit: str) -> None:
        if self._failures.pop(unit, None) is not None and not self._failures:
            self._metrics.invalid.set(0)
            log.info("signing-material files accepted again")

    def _warn_key_mode(self) -> None:
        if self.key_path is None:
            return
        warning = key_file_warning(self.key_path)
        if warning:
            log.warning(warning)

    def _warn_expired_anchors(self, bundle: TrustBundle) -> None:
        for anchor in expired_anchors(bundle, self._clock()):
            log.warning(
                "trust bundle holds an expired anchor; it is published but verifies nothing "
                "(remove it from the file)",
                extra={
                    "file": self.bundle_path,
                    "anchor": anchor.subject.rfc4514_string(),
                    "notAfter": anchor.not_valid_after_utc.isoformat(),
                },
            )
