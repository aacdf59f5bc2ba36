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
  (`truststore_anchors`), never by comparing bytes.
"""

from __future__ import annotations

import hashlib

from cryptography import x509
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    KeySerializationEncryption,
    NoEncryption,
    pkcs12,
)

from trust.bundle import parse_anchors


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
    with `password` (corrupt, another password, or not PKCS#12)."""
    try:
        loaded = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except (ValueError, TypeError):
        return None
    certs = [entry.certificate for entry in loaded.additional_certs]
    if loaded.cert is not None:
        certs.append(loaded.cert.certificate)
    return frozenset(cert.public_bytes(Encoding.DER) for cert in certs)


def _alias(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()
