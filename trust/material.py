"""Signing material: which key, certificate chain and trust bundle the signer uses, and
whether a set is acceptable (docs/reference.md §2), decided on bytes already read — no
file, no API. Also the protocol every source of material satisfies (`MaterialSource`): the files
(`trust.files`) today, an API-backed source beside it.

Decisions:

- Two units, validated and swapped independently: the **trust bundle** (the publisher's
  input: `validate_trust_bundle`) and the **signing set** (the signer's: key, cert, and
  the chain from the cert to an anchor of the bundle, `validate_material`). A new bundle
  is published while a broken key or cert is rejected, and a process running only the
  publisher needs no key at all. Each error names the file (or object) at fault.
- One validation per unit serves start-up and every later change: a set that would fail
  start-up is never swapped in.
- A signing set is accepted only if it can issue: its signing certificate must outlive
  the next hour (nothing shorter than 1 h is issued, docs/reference.md §5.3; at start-up,
  with no other set to keep, such a cert is accepted with a warning), and a throw-away leaf
  issued with it must verify for server auth against its own anchors (`trust.probe`,
  when a `LeafIssuer` is given — the manager always gives the signer's).
- An anchor of the bundle that has expired is published (the bundle is the operator's
  word) but warned about by the source (`expired_anchors`).
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
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from trust import keys
from trust.bundle import (
    BundleError,
    TrustBundle,
    decode_pem,
    fingerprint,
    normalize_bundle,
    parse_anchors,
)
from trust.keys import PrivateKey
from trust.probe import chain_problem

log = logging.getLogger(__name__)
T = TypeVar("T")

_CURVES = tuple(spec.curve for spec in keys.KEYS if spec.ca and spec.curve)
_MAX_CHAIN_DEPTH = 10
MIN_REMAINING = timedelta(hours=1)
"""A signing certificate must outlive this, or nothing could be issued (docs/reference.md §5.3)."""
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

    key: PrivateKey
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
        return fingerprint(self.chain[0])

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


Listener = Callable[[SigningMaterial], object]
BundleListener = Callable[[TrustBundle], object]


def notify_listeners(
    listeners: Sequence[Callable[[T], object]], value: T, logger: logging.Logger, what: str
) -> None:
    """Call each listener with `value`, one at a time (`MaterialSource`'s listener rule): a
    listener that raises is logged on `logger` as "`what` listener failed" and does not
    stop the others. Every source notifies through this."""
    for listener in list(listeners):
        try:
            listener(value)
        except Exception:
            logger.exception("%s listener failed", what)


class SigningSource(Protocol):
    """The part of a `MaterialSource` the signer reads: the signing set in use, and a
    word after each swap."""

    def current(self) -> SigningMaterial:
        """The signing set in use (the signer's input). Raises `RuntimeError` when the
        source serves no signing set (a publisher-only process)."""
        ...

    def add_listener(self, listener: Listener) -> None:
        """`listener(material)` after each signing-set swap."""
        ...


class MaterialSource(SigningSource, Protocol):
    """Where the signer and the publisher get their material; what every source promises.

    - Only validated material is served: a signing set from `validate_material`, a
      bundle from `validate_trust_bundle`. A source is ready when constructed (it raises
      `MaterialError` when it has nothing valid to start with); invalid later input
      keeps the last good value in use, and the source says so in its log and metrics.
    - The two units swap independently and atomically: `current()` and `trust_bundle()`
      each return one consistent value, never half of an update.
    - Listeners run after each swap, on the source's own thread, one at a time; they
      must return quickly (enqueue work, do not do it). A listener that raises is
      logged and does not stop the others.
    """

    def trust_bundle(self) -> TrustBundle:
        """The trust bundle to publish (the publisher's input)."""
        ...

    def add_bundle_listener(self, listener: BundleListener) -> None:
        """`listener(bundle)` after each trust-bundle swap."""
        ...

    def run(self, stop: threading.Event) -> None:
        """Follow the source (poll files, watch an object) until `stop`; blocks. Runs on
        every replica, leader or not, so a standby takes over with current material."""
        ...

    def reload_now(self) -> None:
        """Look at the source now instead of at the next poll (the manager calls it on
        SIGHUP); returns at once. A source that is told of changes may do nothing."""
        ...


@dataclass(frozen=True)
class MaterialFiles:
    """The raw bytes of a set (key, cert, bundle), read together: what `validate_material`
    checks. A source fills it from files or from an API object."""

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


# validating ---------------------------------------------------------------------------


def validate_trust_bundle(data: bytes, bundle_path: str, modified: datetime) -> TrustBundle:
    """The publisher's unit: the bundle file on its own (docs/reference.md §2)."""
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
    min_remaining: timedelta = MIN_REMAINING,
) -> SigningMaterial:
    """The signer's unit, docs/reference.md §2 on bytes already read; the paths only name files in
    errors. With `issuer`, a throw-away leaf issued with the set must verify for server
    auth against the set's anchors (`trust.probe`).

    A signing cert with less than `MIN_REMAINING` left is refused, except at start-up
    (`starting`), where there is no better set to keep: it is accepted with a warning
    (and without the probe, which cannot issue with it), so the process runs, publishes,
    reports `SignerCertificateExpiring` and picks up rotated files within seconds
    instead of crash-looping behind kubelet's back-off. `min_remaining` raises that bar
    (the managed CA's lead time: a set it will sign with must outlive the longest leaf)."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    key = _parse_key(files.key, key_path)
    chain = _parse_chain(files.cert, cert_path)
    signing = chain[0]
    lead = max(min_remaining, MIN_REMAINING)
    short = _check_signing_ca(signing, cert_path, now, allow_short=starting, min_remaining=lead)
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


def _parse_key(data: bytes, path: str) -> PrivateKey:
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
    cert: x509.Certificate,
    path: str,
    now: datetime,
    *,
    allow_short: bool,
    min_remaining: timedelta = MIN_REMAINING,
) -> bool:
    """Raise unless `cert` can sign now; True when it expires within `min_remaining`
    (an error unless `allow_short`)."""
    problem = _ca_problem(cert) or _validity_problem(cert, now)
    short = problem is None and cert.not_valid_after_utc - now < min_remaining
    if short and not allow_short:
        within = "the hour" if min_remaining == MIN_REMAINING else str(min_remaining)
        problem = (
            f"expires at {cert.not_valid_after_utc.isoformat()}, within {within}: no "
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
    key: PrivateKey, cert: x509.Certificate, key_path: str, cert_path: str
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
