"""The certificate we issue for a granted request (docs/reference.md §5.3): its
extensions, validity, refresh time and chain. Pure: the clock (`now`) and the serial are
passed in.

Decisions beyond docs/reference.md:

- `beginRefreshAt` is half of the *effective* lifetime (after the cap at the signing
  cert's notAfter), clamped to [notBefore + 10 min, notAfter - 10 min] (the window
  kube-apiserver accepts) and truncated to whole seconds. When the cap shortens a
  certificate, kubelet then renews it halfway through its real life instead of 10
  minutes before it ends: kubelet starts a refresh up to 5 minutes after beginRefreshAt,
  warns `CertificateOverdueForRefresh` 10 minutes after it, and the new request may wait
  up to the 15 minutes the PCR cleaner gives it — slack a 10-minute margin does not
  have; and the certificates of a CA rotated before its end arrive sooner.
- The authority key identifier is the signing cert's SKI, or derived from its public key
  when the CA has no SKI extension.
- The signature digest follows the CA key: SHA-256 (RSA PKCS#1 v1.5, P-256), SHA-384
  (P-384), SHA-512 (P-521), none for Ed25519.
- A chain excludes every self-signed certificate from the cert file (a root that an
  operator appended by habit is not sent to clients).
- The subject is empty unless `pod_subject` names the Pod (`--pod-identity-subject`,
  KEP-6283's mapping): CN = Pod name, O = namespace, UID (0.9.2342.19200300.100.1.1) =
  Pod UID, in the order and string type Go's `pkix.Name{CommonName, Organization,
  ExtraNames}` encodes them (O, CN, UID; PrintableString where the value allows), so
  the bytes match what a Go signer built like the KEP's proof of concept writes. The SAN
  extension is critical only with an empty subject (RFC 5280 §4.2.1.6, as Go does).
- IP SANs (`--cluster-ip-sans`) follow the DNS SANs in one SAN extension.
"""

from __future__ import annotations

import functools
import ipaddress
import secrets
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from signer.policy import PublicKey
from signer.template import LeafTemplate
from trust.keys import PrivateKey, family_of_public_key, signature_hash
from trust.material import SigningMaterial

BACKDATE = timedelta(minutes=2)
MIN_LIFETIME = timedelta(hours=1)
REFRESH_MARGIN = timedelta(minutes=10)


class LifetimeTooShort(Exception):
    """The signing cert expires too soon to issue a certificate of at least one hour."""


@dataclass(frozen=True)
class Issued:
    """An issued certificate: the PEM chain for `status.certificateChain` and the three
    timestamps for the status (whole seconds, UTC: exactly what the leaf encodes)."""

    chain_pem: str
    not_before: datetime
    not_after: datetime
    begin_refresh_at: datetime


def new_serial() -> int:
    """128 random bits from the CSPRNG; positive and non-zero."""
    while True:
        serial = secrets.randbits(128)
        if serial:
            return serial


def validity(
    now: datetime, max_seconds: int, cap_seconds: int, signer_not_after: datetime
) -> tuple[datetime, datetime, datetime]:
    """(notBefore, notAfter, beginRefreshAt) for a request issued at `now`. Raises
    `LifetimeTooShort` when the signing cert's notAfter leaves less than one hour."""
    not_before = (now.astimezone(UTC) - BACKDATE).replace(microsecond=0)
    lifetime = timedelta(seconds=min(max_seconds, cap_seconds))
    not_after = min(not_before + lifetime, signer_not_after.astimezone(UTC).replace(microsecond=0))
    if not_after - not_before < MIN_LIFETIME:
        raise LifetimeTooShort(
            f"the signing certificate expires at {signer_not_after.isoformat()}, leaving "
            f"{max(not_after - not_before, timedelta(0))} of the at least {MIN_LIFETIME} "
            "a certificate must last"
        )
    # Half of the certificate's real life (see the module docstring), then clamped into
    # the window the API server accepts.
    refresh = not_before + timedelta(seconds=int((not_after - not_before).total_seconds()) // 2)
    refresh = max(not_before + REFRESH_MARGIN, min(refresh, not_after - REFRESH_MARGIN))
    return not_before, not_after, refresh


# PrintableString's alphabet (X.680 §41.4): Go's asn1 picks it for a string that fits.
_PRINTABLE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 '()+,-./:=?")


@dataclass(frozen=True)
class PodSubject:
    """The Pod a subject names (`--pod-identity-subject`)."""

    name: str
    namespace: str
    uid: str

    def x509_name(self) -> x509.Name:
        """KEP-6283: CN = Pod name, O = namespace, uid = Pod UID; see the module docstring
        for the order and string types."""

        def attribute(oid: x509.ObjectIdentifier, value: str) -> x509.NameAttribute[str]:
            kind = _ASN1Type.PrintableString if set(value) <= _PRINTABLE else _ASN1Type.UTF8String
            if len(value.encode()) <= 64:
                return x509.NameAttribute(oid, value, kind)
            # A Pod name may have 253 characters, RFC 5280's ub-common-name is 64:
            # written whole, as Go writes it (cryptography warns, so the warning is
            # silenced for this attribute alone).
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return x509.NameAttribute(oid, value, kind, _validate=False)

        return x509.Name(
            [
                attribute(NameOID.ORGANIZATION_NAME, self.namespace),
                attribute(NameOID.COMMON_NAME, self.name),
                attribute(NameOID.USER_ID, self.uid),
            ]
        )


def issue(
    material: SigningMaterial,
    public_key: PublicKey,
    dns_names: Sequence[str],
    max_seconds: int,
    cap_seconds: int,
    now: datetime,
    serial: int | None = None,
    *,
    ip_addresses: Sequence[str] = (),
    pod_subject: PodSubject | None = None,
) -> Issued:
    """Sign a serving certificate for `public_key` with DNS SANs `dns_names` (then IP SANs
    `ip_addresses`), with an empty subject or, given `pod_subject`, the Pod's.

    `max_seconds` is the request's `spec.maxExpirationSeconds`, `cap_seconds` the
    `--max-certificate-lifetime`; the backdate counts inside the lifetime.
    """
    if not dns_names:
        raise ValueError("a serving certificate needs at least one DNS name")
    ips = tuple(ipaddress.ip_address(ip) for ip in ip_addresses)
    subject = pod_subject.x509_name() if pod_subject is not None else None
    signing = material.signing_cert
    not_before, not_after, refresh = validity(
        now, max_seconds, cap_seconds, signing.not_valid_after_utc
    )
    serial = serial if serial is not None else new_serial()
    spec = family_of_public_key(public_key)
    key_encipherment = spec is not None and spec.key_encipherment
    template = _template(signing, material.key, key_encipherment)
    encoded = (
        template.pem(
            public_key,
            serial,
            not_before,
            not_after,
            dns_names,
            ips,
            subject.public_bytes() if subject is not None else None,
        )
        if template
        else None
    )
    if encoded is None:
        leaf = _build(
            signing,
            material.key,
            key_encipherment,
            public_key,
            serial,
            not_before,
            not_after,
            dns_names,
            ips,
            subject,
        )
        encoded = leaf.public_bytes(serialization.Encoding.PEM)
    return Issued(
        chain_pem=(encoded + material.issuer_chain_pem).decode("ascii"),
        not_before=not_before,
        not_after=not_after,
        begin_refresh_at=refresh,
    )


def _build(
    signing: x509.Certificate,
    key: PrivateKey,
    key_encipherment: bool,
    public_key: PublicKey,
    serial: int,
    not_before: datetime,
    not_after: datetime,
    dns_names: Sequence[str],
    ip_addresses: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
    subject: x509.Name | None = None,
) -> x509.Certificate:
    """The leaf, by `cryptography`'s builder: the definition of the profile."""
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    names += [x509.IPAddress(ip) for ip in ip_addresses]
    builder = (
        _base_builder(signing, key_encipherment)
        .subject_name(subject if subject is not None else x509.Name([]))
        .public_key(public_key)
        .serial_number(serial)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=subject is None)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )
    return builder.sign(key, signature_hash(key))


@functools.lru_cache(maxsize=16)
def _template(
    signing: x509.Certificate, key: PrivateKey, key_encipherment: bool
) -> LeafTemplate | None:
    """The DER template of `signing`'s leaves (`signer.template`), learnt from and
    checked against `_build`; None (use the builder) if it cannot reproduce it."""
    return LeafTemplate.learn(functools.partial(_build, signing, key, key_encipherment), key)


@functools.lru_cache(maxsize=16)
def _base_builder(signing: x509.Certificate, key_encipherment: bool) -> x509.CertificateBuilder:
    """What every leaf of `signing` has in common (the builder is immutable, so one is
    shared): issuer, key usages, basic constraints, authority key id. Per-request fields
    (the subject among them) and extensions are added on top; the extension order in the
    encoded leaf is the order they are added (shared ones first)."""
    return (
        x509.CertificateBuilder()
        .issuer_name(signing.subject)
        .add_extension(
            # Every flag by name (KeyUsage takes all nine), as trust/ca.py's CA does.
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=key_encipherment,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_authority_key_identifier(signing), critical=False)
    )


def issue_probe(
    material: SigningMaterial,
    public_key: PublicKey,
    dns_names: Sequence[str],
    now: datetime,
) -> str:
    """`trust.probe.LeafIssuer`: the PEM chain of a one-hour certificate issued exactly as
    for a request, so material validation judges the real profile."""
    seconds = int(MIN_LIFETIME.total_seconds())
    return issue(material, public_key, dns_names, seconds, seconds, now).chain_pem


def _authority_key_identifier(signing: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    try:
        ski = signing.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(
            signing.public_key()  # type: ignore[arg-type]
        )
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
