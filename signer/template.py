"""Leaf certificates assembled from DER pieces instead of a `CertificateBuilder` per leaf.

Why: with the builder, a leaf costs several times the CA's signature itself (the
builder's Python objects, extension validation and encoding, then the native encoder;
bench/README.md, "Figures behind module decisions").
Every leaf of one signing certificate shares all of its bytes but the serial, the
validity, the public key, the SAN and the SKI (and, with `--pod-identity-subject`, the
subject), so those are spliced into fixed bytes and the TBSCertificate is signed with
the CA key directly. Every key type a request may carry, ML-DSA included, takes this
path: its SubjectPublicKeyInfo is spliced as the key serialises it.

How the output is kept identical to the builder's (`signer.authority` remains the one
definition of the profile):

* The fixed bytes are not written here: `LeafTemplate.learn` makes a *reference* leaf
  with the builder and cuts it into fields (version, signature algorithm, issuer,
  subject, the shared extensions, the outer signature algorithm), so they are whatever
  the builder encodes for that signing certificate.
* It then re-assembles the reference's TBSCertificate from the reference's own inputs
  — once with an empty subject and DNS names only, once with a subject and IP
  addresses too — and refuses to be used (returns None; `issue` keeps the builder)
  unless the bytes are identical both times, so a profile the splicing does not
  reproduce falls back instead of diverging. The property tests
  (tests/unit/signer/test_template.py) compare against the builder over generated
  serials, times, names, IP addresses, subjects and every key type a request may carry,
  for every CA key type.
* Per leaf it only encodes what RFC 5280 fixes: a positive INTEGER, UTCTime before
  2050 and GeneralizedTime from 2050 (§4.1.2.5), the key's SubjectPublicKeyInfo as the
  key serialises it, dNSName as IA5String, iPAddress as the 4 or 16 address octets,
  the SAN critical exactly when the subject is empty (§4.2.1.6), the SKI as SHA-1 of
  the subjectPublicKey BIT STRING (§4.2.1.2 method 1, as
  `SubjectKeyIdentifier.from_public_key`). A subject arrives already encoded (the
  `x509.Name`'s own DER). Anything else (a non-ASCII name, a fractional second)
  returns None and the caller uses the builder.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import NameOID

from signer.policy import PublicKey
from trust.keys import PrivateKey, signature_hash

_SAN_OID = bytes.fromhex("0603551d11")  # 2.5.29.17
_SKI_OID = bytes.fromhex("0603551d0e")  # 2.5.29.14
_CRITICAL = bytes.fromhex("0101ff")
# The SKI extension up to its 20-byte value: SEQUENCE { OID, OCTET STRING { OCTET STRING } }.
_SKI_PREFIX = bytes.fromhex("301d") + _SKI_OID + bytes.fromhex("04160414")
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _len(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    size = (n.bit_length() + 7) // 8
    return bytes((0x80 | size,)) + n.to_bytes(size, "big")


def _tlv(tag: int, content: bytes) -> bytes:
    return bytes((tag,)) + _len(len(content)) + content


def _children(der: bytes) -> list[bytes]:
    """The complete TLVs inside one constructed DER value (definite lengths only)."""
    _, start, end = _header(der, 0)
    out = []
    pos = start
    while pos < end:
        _, _, stop = _header(der, pos)
        out.append(der[pos:stop])
        pos = stop
    if pos != end:
        raise ValueError("trailing bytes in a DER value")
    return out


def _header(der: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, content start, value end) of the TLV at `pos`."""
    tag = der[pos]
    first = der[pos + 1]
    if first < 0x80:
        return tag, pos + 2, pos + 2 + first
    size = first & 0x7F
    if size == 0 or size > 4:
        raise ValueError("unsupported DER length")
    length = int.from_bytes(der[pos + 2 : pos + 2 + size], "big")
    return tag, pos + 2 + size, pos + 2 + size + length


def _content(tlv: bytes) -> bytes:
    _, start, end = _header(tlv, 0)
    return tlv[start:end]


def _integer(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes((value.bit_length() + 8) // 8, "big"))


@functools.lru_cache(maxsize=64)
def _time(value: datetime) -> bytes | None:
    """(Cached: every leaf issued in one second shares its two times.)"""
    if value.microsecond or value.tzinfo is None:
        return None
    utc = value.astimezone(UTC)
    if 1950 <= utc.year < 2050:
        return _tlv(0x17, utc.strftime("%y%m%d%H%M%SZ").encode("ascii"))
    if utc.year < 1950:
        return None
    return _tlv(0x18, utc.strftime("%Y%m%d%H%M%SZ").encode("ascii"))


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_EMPTY_NAME = bytes.fromhex("3000")


def _san(names: Sequence[str], ips: Sequence[IPAddress], critical: bool) -> bytes | None:
    parts = []
    for name in names:
        if not name.isascii():
            return None
        parts.append(_tlv(0x82, name.encode("ascii")))
    parts += [_tlv(0x87, ip.packed) for ip in ips]
    value = _tlv(0x30, b"".join(parts))
    return _tlv(0x30, _SAN_OID + (_CRITICAL if critical else b"") + _tlv(0x04, value))


def _ski(spki: bytes) -> bytes:
    bits = _content(_children(spki)[1])
    if not bits or bits[0] != 0:
        raise ValueError("a public key BIT STRING with unused bits")
    digest = hashlib.sha1(bits[1:]).digest()  # RFC 5280 §4.2.1.2 method 1
    return _SKI_PREFIX + digest


def _signer(key: PrivateKey) -> Callable[[bytes], bytes]:
    """The CA key's signature over a TBSCertificate, as the builder makes it."""
    digest = signature_hash(key)
    if isinstance(key, ec.EllipticCurvePrivateKey) and digest is not None:
        algorithm = ec.ECDSA(digest)
        return lambda tbs: key.sign(tbs, algorithm)
    if isinstance(key, rsa.RSAPrivateKey) and digest is not None:
        pkcs1 = padding.PKCS1v15()
        return lambda tbs: key.sign(tbs, pkcs1, digest)
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign  # the message itself, no digest
    raise ValueError(f"not a CA key: {type(key).__name__}")


Reference = Callable[
    [PublicKey, int, datetime, datetime, Sequence[str], Sequence[IPAddress], x509.Name | None],
    x509.Certificate,
]
"""How `learn` asks for a builder-made leaf: (key, serial, notBefore, notAfter, DNS names,
IP addresses, subject or None for the empty one)."""


@dataclass(frozen=True)
class LeafTemplate:
    """The fixed DER of every leaf one CA key + signing certificate issues."""

    version: bytes
    signature_algorithm: bytes  # inside the TBSCertificate
    issuer: bytes
    subject: bytes
    shared_extensions: bytes  # KU, EKU, BC, AKI as the builder encodes them
    outer_algorithm: bytes  # the Certificate's signatureAlgorithm
    sign: Callable[[bytes], bytes]

    @classmethod
    def learn(cls, reference: Reference, key: PrivateKey) -> LeafTemplate | None:
        """Cut a builder-made reference leaf (`reference(public_key, serial, notBefore,
        notAfter, names, ips, subject)`) into a template; None if the template cannot
        reproduce it, with and without a subject and IP addresses."""
        sign = _signer(key)
        sample = ec.generate_private_key(ec.SECP256R1()).public_key()
        serial = 0x7EDC_BA98_7654_3210_0123_4567_89AB_CDEF
        not_before = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        not_after = datetime(2026, 1, 3, 3, 4, 5, tzinfo=UTC)
        names = ("reference.example.svc", "reference.example.svc.cluster.local")
        ips = (ipaddress.ip_address("10.96.0.10"), ipaddress.ip_address("fd00::a"))
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "reference")])
        try:
            cert = reference(sample, serial, not_before, not_after, names, (), None)
            der = cert.public_bytes(serialization.Encoding.DER)
            tbs_der, outer, _ = _children(der)
            fields = _children(tbs_der)
            if len(fields) != 8 or fields[0][0] != 0xA0 or fields[7][0] != 0xA3:
                return None
            extensions = _children(_content(fields[7]))
            if len(extensions) < 2:
                return None
            template = cls(
                version=fields[0],
                signature_algorithm=fields[2],
                issuer=fields[3],
                subject=fields[5],
                shared_extensions=b"".join(extensions[:-2]),
                outer_algorithm=outer,
                sign=sign,
            )
            if template.tbs(sample, serial, not_before, not_after, names) != tbs_der:
                return None
            shaped = reference(sample, serial, not_before, not_after, names, ips, subject)
            spliced = template.tbs(
                sample, serial, not_before, not_after, names, ips, subject.public_bytes()
            )
            if spliced != shaped.tbs_certificate_bytes:
                return None
        except (ValueError, IndexError):
            return None
        return template

    def tbs(
        self,
        public_key: PublicKey,
        serial: int,
        not_before: datetime,
        not_after: datetime,
        names: Sequence[str],
        ips: Sequence[IPAddress] = (),
        subject: bytes | None = None,
    ) -> bytes | None:
        """The DER TBSCertificate, or None for inputs the template does not cover.
        `subject` is the DER of the subject Name; None (or an empty Name) is the
        template's own, empty, subject."""
        if subject == _EMPTY_NAME:
            subject = None
        start, end = _time(not_before), _time(not_after)
        san = _san(names, ips, critical=subject is None)
        if start is None or end is None or san is None or serial <= 0:
            return None
        spki = public_key.public_bytes(*_SPKI)
        extensions = _tlv(0xA3, _tlv(0x30, self.shared_extensions + san + _ski(spki)))
        return _tlv(
            0x30,
            b"".join(
                (
                    self.version,
                    _integer(serial),
                    self.signature_algorithm,
                    self.issuer,
                    _tlv(0x30, start + end),
                    self.subject if subject is None else subject,
                    spki,
                    extensions,
                )
            ),
        )

    # `pem` takes exactly `tbs`'s arguments: the same leaf, rendered further.
    def pem(
        self,
        public_key: PublicKey,
        serial: int,
        not_before: datetime,
        not_after: datetime,
        names: Sequence[str],
        ips: Sequence[IPAddress] = (),
        subject: bytes | None = None,
    ) -> bytes | None:
        """The signed leaf as PEM (as `Certificate.public_bytes(PEM)` writes it), or None."""
        tbs = self.tbs(public_key, serial, not_before, not_after, names, ips, subject)
        if tbs is None:
            return None
        signature = _tlv(0x03, b"\x00" + self.sign(tbs))
        b64 = base64.b64encode(_tlv(0x30, tbs + self.outer_algorithm + signature))
        lines = b"\n".join(b64[i : i + 64] for i in range(0, len(b64), 64))
        return b"-----BEGIN CERTIFICATE-----\n" + lines + b"\n-----END CERTIFICATE-----\n"
