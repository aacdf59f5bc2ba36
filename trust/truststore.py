"""A trust bundle as a PKCS#12 truststore for Java applications (pure; no client).

What it decides:

* **Trusted entries, not bare certificates.** The JDK's `PKCS12KeyStore` turns a
  certificate bag into a `trustedCertEntry` only when the bag carries Oracle's
  trusted-key-usage attribute (OID 2.16.840.1.113894.746875.1.1, value
  anyExtendedKeyUsage) — what `keytool -importcert` writes. A bag without it is loaded
  as nothing at all, and a JVM pointed at such a file trusts no one.
  `cryptography`'s `serialize_java_truststore` writes that attribute; `keytool -list`
  shows each anchor as `trustedCertEntry` (tests/unit/trust/test_truststore.py runs keytool).
* **The password.** Empty by default, like trust-manager's PKCS#12 target: a truststore
  holds public certificates only, and the password guards nothing but the file's MAC. A
  JVM loads it with `javax.net.ssl.trustStorePassword` unset (the JDK then skips the
  integrity check). A non-empty password (the JDK's conventional `changeit`) must be
  given to the JVM as well: keytool and the JDK refuse the file with a wrong one.
* **Alias** of each entry: the anchor's SHA-256 fingerprint in hex, stable across
  rewrites and unique within the bundle.
* **Comparison.** PKCS#12 output is randomised (salt, IV), so a truststore is current
  when it opens with the password and holds exactly the bundle's anchors
  (`truststore_anchors`), never by comparing bytes. The injector does not even do that
  on its hot path: it decides by the digests it writes beside the file
  (`injector.configmaps`), and never parses a tenant's bytes.
* **Bounded reading.** `truststore_anchors` reads at most `MAX_BYTES` (a ConfigMap's
  limit) and refuses, before any KDF runs, a file whose visible MAC or encryption
  parameters claim more than `MAX_KDF_ITERATIONS` rounds: the KDF cost is the file's
  own claim (2^31-1 rounds would hold the GIL for minutes), so it is checked first. Key
  bags inside encrypted content are beyond that check: nothing on the injector's path
  reads a file a tenant wrote.
"""

from __future__ import annotations

import contextlib

from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    KeySerializationEncryption,
    NoEncryption,
    pkcs12,
)

from trust.bundle import fingerprint, parse_anchors

MAX_BYTES = 1 << 20
"""A ConfigMap holds at most 1 MiB; nothing larger is a truststore of ours."""

MAX_KDF_ITERATIONS = 1_000_000
"""The most KDF rounds (MAC or PBE) a file may claim before it is read. We write 2,048 (MAC)
and 20,000 (PBES2); OWASP's PBKDF2-SHA256 figure is 600,000."""

_SEQUENCE, _INTEGER, _OCTET_STRING = 0x30, 0x02, 0x04
_MAX_DEPTH = 16


def java_truststore(normalized: str, password: str = "") -> bytes:
    """A PKCS#12 truststore holding every anchor of a normalised bundle as a trusted
    certificate entry (see the module docstring)."""
    encryption: KeySerializationEncryption = (
        BestAvailableEncryption(password.encode()) if password else NoEncryption()
    )
    entries = [
        pkcs12.PKCS12Certificate(cert, _alias(cert).encode("ascii"))
        for cert in parse_anchors(normalized)
    ]
    return pkcs12.serialize_java_truststore(entries, encryption)


def truststore_anchors(data: bytes, password: str = "") -> frozenset[bytes] | None:
    """The DER of each certificate in a PKCS#12 file, or None when it does not open
    with `password` (corrupt, another password, not PKCS#12, larger than `MAX_BYTES`, or
    claiming more than `MAX_KDF_ITERATIONS` KDF rounds: refused before any KDF runs)."""
    if len(data) > MAX_BYTES:
        return None
    claimed = kdf_iterations(data)
    if claimed is None or any(n > MAX_KDF_ITERATIONS for n in claimed):
        return None
    try:
        loaded = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except (ValueError, TypeError):
        return None
    certs = [entry.certificate for entry in loaded.additional_certs]
    if loaded.cert is not None:
        certs.append(loaded.cert.certificate)
    return frozenset(cert.public_bytes(Encoding.DER) for cert in certs)


def _alias(cert: x509.Certificate) -> str:
    return fingerprint(cert)


def kdf_iterations(data: bytes) -> list[int] | None:
    """Every iteration count the file shows before decryption (MacData, and the
    PBE/PBKDF2 parameters of encrypted content: each a SEQUENCE whose first two members
    are an OCTET STRING salt and an INTEGER count), or None when `data` is not DER.
    Linear in `len(data)`; DER inside OCTET STRINGs (PKCS#7 data content) is searched
    too."""
    found: list[int] = []
    try:
        _walk(data, 0, found)
    except ValueError:
        return None
    return found


def _walk(data: bytes, depth: int, found: list[int]) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deep")
    for tag, content in _tlvs(data):
        if tag == _SEQUENCE:
            members = list(_tlvs(content))
            for i in range(len(members) - 1):
                if members[i][0] == _OCTET_STRING and members[i + 1][0] == _INTEGER:
                    found.append(int.from_bytes(members[i + 1][1], "big", signed=True))
            _walk(content, depth + 1, found)
        elif tag & 0x20:  # other constructed types ([0] EXPLICIT, SET)
            _walk(content, depth + 1, found)
        elif tag == _OCTET_STRING and content[:1] == b"\x30":
            # An OCTET STRING that merely starts like DER (a salt, ciphertext) is skipped.
            with contextlib.suppress(ValueError):
                _walk(content, depth + 1, found)


def _tlvs(data: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    i = 0
    while i < len(data):
        if i + 2 > len(data):
            raise ValueError("truncated")
        tag, head = data[i], data[i + 1]
        i += 2
        if head & 0x80:
            size = head & 0x7F
            if size == 0 or size > 4 or i + size > len(data):
                raise ValueError("bad length")
            length = int.from_bytes(data[i : i + size], "big")
            i += size
        else:
            length = head
        if i + length > len(data):
            raise ValueError("truncated")
        out.append((tag, data[i : i + length]))
        i += length
    return out
