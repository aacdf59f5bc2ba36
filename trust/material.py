"""Signing material: which key, certificate chain and trust bundle the signer uses, whether
a set of files is acceptable (SPEC §2), and when a changed set replaces the current one
(SPEC §3).

Decisions:

- Two units, validated and swapped independently: the **trust bundle** (the publisher's
  input: the bundle file alone, `validate_trust_bundle`) and the **signing set** (the
  signer's: key, cert file, and the chain from the cert to an anchor of the bundle,
  `validate_material`). A new bundle is published while a broken key or cert is
  rejected, and a process running only the publisher needs no key at all. Each error
  names the file at fault.
- One validation per unit serves start-up and hot reload: a set that would fail start-up
  is never swapped in.
- A signing set is accepted only if it can issue: its signing certificate must outlive
  the next hour (nothing shorter than 1 h is issued, SPEC §5.3; at start-up, with no
  other set to keep, such a cert is accepted with a warning), and a throw-away leaf
  issued with it must verify for server auth against its own anchors (`trust.probe`,
  when a `LeafIssuer` is given — the manager always gives the signer's).
- An anchor of the bundle that has expired is published (the file is the operator's
  word) but warned about, once per bundle content.
- While files on disk are rejected, `service_serving_ca_controller_material_invalid` is 1
  (the reason is in the log); `service_serving_ca_controller_material_info` carries the
  fingerprints of what is in use as labels (`trust_bundle`: the 24 hex that end the
  ClusterTrustBundle's name; `signing_certificate`: sha256 of the signing cert's DER, as
  `openssl x509 -fingerprint -sha256` prints it without colons, lowercase), so every
  replica's view can be compared during a rotation.
- The three files are read together and re-read if any content hash changed during the
  read, so a key from one version is never paired with a cert from another. Validation
  then works on the bytes read, never on the paths again.
- Change detection polls content hashes (default every 2 s). It follows symlinks on every
  read, so Kubernetes' atomic `..data` swaps and in-place rewrites both show up.
- An invalid set leaves the last good set in place. It is retried on every poll (a cert
  whose notBefore is a second in the future becomes valid on its own), but logged (the
  problem under `err`) and counted in `material_reload_total{result="invalid"}` once per
  distinct (content, problem) pair. `reload_now()` (SIGHUP) polls at once.
- Errors are `MaterialError(path, problem)`: one line, naming the file; cryptography's
  exception texts are not passed through, so no key bytes can leak into a log.
- Accepted signing keys: RSA ≥ 2048 bits, ECDSA P-256/P-384/P-521, Ed25519, as PKCS#8,
  PKCS#1 or SEC1 PEM, unencrypted.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeAlias

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from prometheus_client import CollectorRegistry, Counter, Gauge

from trust.bundle import BundleError, TrustBundle, decode_pem, normalize_bundle, parse_anchors
from trust.probe import chain_problem

log = logging.getLogger(__name__)

SigningKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

_CURVES = ("secp256r1", "secp384r1", "secp521r1")
_MAX_CHAIN_DEPTH = 10
MIN_REMAINING = timedelta(hours=1)
"""A signing certificate must outlive this, or nothing could be issued (SPEC §5.3)."""
DEFAULT_DOMAIN = "cluster.local"


class LeafIssuer(Protocol):
    """Issue a serving certificate with `material` for `public_key` and `dns_names` at
    `now`; return the PEM chain (leaf first) as it would go into a request's status.
    Raises when the set cannot issue (e.g. its signing cert expires too soon). The
    manager passes `signer.authority.issue_probe`."""

    def __call__(
        self,
        material: SigningMaterial,
        public_key: ec.EllipticCurvePublicKey,
        dns_names: Sequence[str],
        now: datetime,
    ) -> str: ...


class MaterialError(Exception):
    """A signing-material file is unusable. `str()` is one line: `<path>: <problem>`."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = " ".join(problem.split())
        super().__init__(f"{self.path}: {self.problem}")


@dataclass(frozen=True)
class SigningMaterial:
    """A validated set: the CA key, its chain (signing cert first, then the intermediates
    from the cert file, in file order), the normalised trust bundle and its anchors.
    `fingerprint` identifies the set (sha256 over the chain and the bundle)."""

    key: SigningKey
    chain: tuple[x509.Certificate, ...]
    trust_bundle: str
    anchors: tuple[x509.Certificate, ...]
    fingerprint: str

    @property
    def signing_cert(self) -> x509.Certificate:
        return self.chain[0]

    @functools.cached_property
    def signing_fingerprint(self) -> str:
        """sha256 of the signing certificate's DER, lowercase hex."""
        return hashlib.sha256(self.chain[0].public_bytes(serialization.Encoding.DER)).hexdigest()

    @functools.cached_property
    def issuer_chain_pem(self) -> bytes:
        """What follows the leaf in an issued chain: every certificate of the cert file
        that is not a self-signed root, PEM-encoded. Computed once per set, not per
        issuance (checking a self-signature is a public-key operation)."""
        return b"".join(
            c.public_bytes(serialization.Encoding.PEM)
            for c in self.chain
            if not (c.subject == c.issuer and _issued_by(c, c))
        )


@dataclass(frozen=True)
class MaterialFiles:
    """The raw bytes of the three files, read together."""

    key: bytes
    cert: bytes
    bundle: bytes

    @property
    def digest(self) -> tuple[str, str, str]:
        return (
            hashlib.sha256(self.key).hexdigest(),
            hashlib.sha256(self.cert).hexdigest(),
            hashlib.sha256(self.bundle).hexdigest(),
        )


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


# validating ---------------------------------------------------------------------------


def load_material(
    key_path: str | os.PathLike[str],
    cert_path: str | os.PathLike[str],
    bundle_path: str | os.PathLike[str],
    now: datetime | None = None,
    *,
    issuer: LeafIssuer | None = None,
    domain: str = DEFAULT_DOMAIN,
) -> SigningMaterial:
    """Read and validate the three files (SPEC §2). Raises `MaterialError`. A usable key
    file readable by group or others is logged as a warning (only once the set is valid,
    so a failed start prints one line)."""
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


def validate_trust_bundle(data: bytes, bundle_path: str, modified: datetime) -> TrustBundle:
    """The publisher's unit: the bundle file on its own (SPEC §2, last bullet)."""
    try:
        pem = normalize_bundle(data)
    except BundleError as err:
        raise MaterialError(bundle_path, f"invalid trust bundle: {err}") from None
    return TrustBundle(pem, tuple(parse_anchors(pem)), modified)


def expired_anchors(bundle: TrustBundle, now: datetime) -> list[x509.Certificate]:
    """Anchors of `bundle` whose notAfter has passed: published, but they verify nothing."""
    return [a for a in bundle.anchors if a.not_valid_after_utc <= now]


def validate_material(
    files: MaterialFiles,
    key_path: str,
    cert_path: str,
    bundle_path: str,
    now: datetime | None = None,
    *,
    issuer: LeafIssuer | None = None,
    domain: str = DEFAULT_DOMAIN,
    starting: bool = False,
) -> SigningMaterial:
    """The signer's unit, SPEC §2 on bytes already read; the paths only name files in
    errors. With `issuer`, a throw-away leaf issued with the set must verify for server
    auth against the set's anchors (`trust.probe`).

    A signing cert with less than `MIN_REMAINING` left is refused, except at start-up
    (`starting`), where there is no better set to keep: it is accepted with a warning
    (and without the probe, which cannot issue with it), so the process runs, publishes,
    reports `SignerCertificateExpiring` and picks up rotated files within seconds
    instead of crash-looping behind kubelet's back-off."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    key = _parse_key(files.key, key_path)
    chain = _parse_chain(files.cert, cert_path)
    signing = chain[0]
    short = _check_signing_ca(signing, cert_path, now, allow_short=starting)
    _check_key_matches(key, signing, key_path, cert_path)
    try:
        bundle = normalize_bundle(files.bundle)
    except BundleError as err:
        raise MaterialError(bundle_path, f"invalid trust bundle: {err}") from None
    anchors = tuple(parse_anchors(bundle))
    _check_chains_to_anchor(chain, anchors, cert_path, bundle_path, now)
    digest = hashlib.sha256()
    for cert in chain:
        digest.update(cert.public_bytes(serialization.Encoding.DER))
    digest.update(bundle.encode("ascii"))
    material = SigningMaterial(key, chain, bundle, anchors, digest.hexdigest())
    if short:
        log.warning(
            "signing certificate expires within the hour; nothing can be issued until the "
            "files are rotated",
            extra={"file": cert_path, "notAfter": signing.not_valid_after_utc.isoformat()},
        )
    elif issuer is not None:
        problem = chain_problem(
            lambda public_key, names, at: issuer(material, public_key, names, at),
            anchors,
            bundle,
            domain,
            now,
        )
        if problem:
            raise MaterialError(
                cert_path,
                f"a test certificate issued with this set does not verify for server auth "
                f"against the anchors of {bundle_path}: {problem}",
            )
    return material


def _parse_key(data: bytes, path: str) -> SigningKey:
    blocks = _pem_types(data, path)
    if "CERTIFICATE" in blocks and not any(t.endswith("PRIVATE KEY") for t in blocks):
        raise MaterialError(
            path,
            "holds a CERTIFICATE, not a private key (are --service-serving-key and "
            "--service-serving-cert swapped?)",
        )
    if "ENCRYPTED PRIVATE KEY" in blocks or _is_legacy_encrypted(data):
        raise MaterialError(path, "private key is encrypted; provide it unencrypted")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise MaterialError(path, "private key is encrypted; provide it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise MaterialError(
            path, "does not hold a PEM private key (PKCS#8, PKCS#1 or SEC1; RSA, ECDSA, Ed25519)"
        ) from None
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < 2048:
            raise MaterialError(path, f"RSA key is {key.key_size} bits; at least 2048 required")
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.name not in _CURVES:
            raise MaterialError(
                path, f"ECDSA curve {key.curve.name} is not supported (P-256, P-384, P-521)"
            )
        return key
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    raise MaterialError(
        path,
        f"{type(key).__name__.lstrip('_').removesuffix('PrivateKey')} keys are not supported "
        "(RSA, ECDSA or Ed25519)",
    )


def _is_legacy_encrypted(data: bytes) -> bool:
    return b"Proc-Type: 4,ENCRYPTED" in data


def _pem_types(data: bytes, path: str) -> list[str]:
    try:
        return [block.type for block in decode_pem(data)]
    except BundleError as err:
        raise MaterialError(path, str(err)) from None


def _parse_chain(data: bytes, path: str) -> tuple[x509.Certificate, ...]:
    try:
        blocks = decode_pem(data)
    except BundleError as err:
        raise MaterialError(path, str(err)) from None
    if not blocks:
        raise MaterialError(path, "holds no PEM certificate")
    chain: list[x509.Certificate] = []
    for block in blocks:
        if block.type.endswith("PRIVATE KEY"):
            raise MaterialError(
                path,
                f"PEM block {block.index} is a private key; the certificate file must not "
                "contain the key (keep it in --service-serving-key)",
            )
        if block.type != "CERTIFICATE":
            raise MaterialError(
                path, f"PEM block {block.index} is a {block.type!r} block, not a CERTIFICATE"
            )
        try:
            chain.append(x509.load_der_x509_certificate(block.der))
        except ValueError:
            raise MaterialError(
                path, f"PEM block {block.index} does not parse as an X.509 certificate"
            ) from None
    return tuple(chain)


def _describe(cert: x509.Certificate) -> str:
    return repr(cert.subject.rfc4514_string() or "<empty subject>")


def _ca_problem(cert: x509.Certificate) -> str | None:
    """Why `cert` cannot sign certificates, or None."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return "is not a CA (no basicConstraints extension)"
    except ValueError:
        return "has unparsable extensions"
    if not constraints.ca:
        return "is not a CA (basicConstraints CA:FALSE)"
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return "has no keyUsage extension; a signing CA needs keyUsage keyCertSign"
    if not usage.key_cert_sign:
        return "lacks keyUsage keyCertSign"
    return None


def _validity_problem(cert: x509.Certificate, now: datetime) -> str | None:
    if now < cert.not_valid_before_utc:
        return f"is not valid yet (notBefore {cert.not_valid_before_utc.isoformat()})"
    if now >= cert.not_valid_after_utc:
        return f"expired at {cert.not_valid_after_utc.isoformat()}"
    return None


def _check_signing_ca(
    cert: x509.Certificate, path: str, now: datetime, *, allow_short: bool
) -> bool:
    """Raise unless `cert` can sign now; True when it expires within `MIN_REMAINING`
    (an error unless `allow_short`)."""
    problem = _ca_problem(cert) or _validity_problem(cert, now)
    short = problem is None and cert.not_valid_after_utc - now < MIN_REMAINING
    if short and not allow_short:
        problem = (
            f"expires at {cert.not_valid_after_utc.isoformat()}, within the hour: no "
            f"certificate of at least {MIN_REMAINING} could be issued"
        )
    if problem:
        raise MaterialError(path, f"signing certificate {_describe(cert)} {problem}")
    return short


def _spki(key: object) -> bytes:
    return key.public_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _check_key_matches(
    key: SigningKey, cert: x509.Certificate, key_path: str, cert_path: str
) -> None:
    try:
        matches = _spki(key.public_key()) == _spki(cert.public_key())
    except (UnsupportedAlgorithm, ValueError):
        matches = False
    if not matches:
        raise MaterialError(
            key_path,
            f"private key does not match the public key of the signing certificate "
            f"{_describe(cert)} in {cert_path}",
        )


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _check_chains_to_anchor(
    chain: Sequence[x509.Certificate],
    anchors: Sequence[x509.Certificate],
    cert_path: str,
    bundle_path: str,
    now: datetime,
) -> None:
    """Walk from the signing cert through the cert file's intermediates to a currently
    valid anchor of the bundle (the signing cert may itself be an anchor)."""
    anchor_ders = {a.public_bytes(serialization.Encoding.DER): a for a in anchors}
    intermediates = list(chain[1:])
    current = chain[0]
    seen: set[bytes] = set()
    expired_anchor: x509.Certificate | None = None
    for _ in range(_MAX_CHAIN_DEPTH):
        der = current.public_bytes(serialization.Encoding.DER)
        if der in anchor_ders:
            return
        seen.add(der)
        for anchor in anchors:
            if _issued_by(current, anchor):
                if _validity_problem(anchor, now) is None:
                    return
                expired_anchor = anchor
        parent = next(
            (
                c
                for c in intermediates
                if c.public_bytes(serialization.Encoding.DER) not in seen and _issued_by(current, c)
            ),
            None,
        )
        if parent is None:
            break
        problem = _ca_problem(parent) or _validity_problem(parent, now)
        if problem:
            raise MaterialError(
                cert_path, f"intermediate certificate {_describe(parent)} {problem}"
            )
        current = parent
    if expired_anchor is not None:
        raise MaterialError(
            bundle_path,
            f"the only trust anchor the signing certificate chains to, "
            f"{_describe(expired_anchor)}, {_validity_problem(expired_anchor, now)}",
        )
    raise MaterialError(
        cert_path,
        f"signing certificate {_describe(chain[0])} does not chain (via the intermediates in "
        f"this file) to any anchor in the trust bundle {bundle_path}; last issuer looked for: "
        f"{current.issuer.rfc4514_string()!r}",
    )


# hot reload ---------------------------------------------------------------------------

Listener = Callable[[SigningMaterial], object]
BundleListener = Callable[[TrustBundle], object]
_Digest: TypeAlias = tuple[str, ...]


class MaterialMetrics:
    """`material_reload_total{result}`, `material_invalid` and `material_info{...}`."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.reloads = Counter(
            "service_serving_ca_controller_material_reload_total",
            "Reloads of the signing key, certificate and trust bundle files, by result.",
            ["result"],
            registry=registry,
        )
        for result in ("ok", "invalid"):
            self.reloads.labels(result)
        self.invalid = Gauge(
            "service_serving_ca_controller_material_invalid",
            "1 while the signing-material files on disk are rejected (the last good set "
            "stays in use; the reason is logged), else 0.",
            registry=registry,
        )
        self.info = Gauge(
            "service_serving_ca_controller_material_info",
            "Always 1; the labels fingerprint the material in use: trust_bundle (the hash "
            "that ends the ClusterTrustBundle name) and signing_certificate (sha256 of DER).",
            ["trust_bundle", "signing_certificate"],
            registry=registry,
        )

    def show(self, bundle: TrustBundle, material: SigningMaterial | None) -> None:
        self.info.clear()
        signing = material.signing_fingerprint if material is not None else ""
        self.info.labels(bundle.fingerprint, signing).set(1)


class MaterialSource:
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
                "trustBundle": bundle.fingerprint,
                "previous": previous.fingerprint,
                "anchors": len(bundle.anchors),
            },
        )
        self._warn_expired_anchors(bundle)
        self._notify(self._bundle_listeners, bundle)
        return True

    def _poll_signing_set(self) -> bool:
        assert self.key_path is not None and self.cert_path is not None
        digest: _Digest | None = None
        try:
            check_distinct(self.key_path, self.cert_path)
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
        self._notify(self._listeners, material)
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

    @staticmethod
    def _notify(listeners: Sequence[Callable[[Any], object]], value: object) -> None:
        for listener in list(listeners):
            try:
                listener(value)
            except Exception:
                log.exception("signing-material listener failed")

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
            in_use = self._bundle.fingerprint if unit == "bundle" else self._in_use_fingerprint()
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
