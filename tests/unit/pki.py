"""Test PKI shared by the unit tests: CAs and leaf keys generated once per process
(RSA-4096 generation takes seconds), and small builders for deliberately bad certs."""

from __future__ import annotations

import datetime as dt
import functools

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from trust.ca import CertificateAuthority, generate_ca
from trust.keys import (
    KeyType,
    LeafKeyType,
    LeafPrivateKey,
    PrivateKey,
    generate_leaf_key,
    signature_hash,
)


@functools.cache
def ca(name: str = "root", key_type: KeyType = "ECDSAP256") -> CertificateAuthority:
    """A root CA, cached by (name, key type)."""
    return generate_ca(f"test {name}", key_type=key_type)


@functools.cache
def intermediate(name: str = "intermediate", parent: str = "root") -> CertificateAuthority:
    return generate_ca(f"test {name}", parent=ca(parent))


@functools.cache
def leaf_key(key_type: LeafKeyType) -> LeafPrivateKey:
    return generate_leaf_key(key_type)


@functools.cache
def non_ca_cert() -> x509.Certificate:
    """An end-entity cert (basicConstraints CA:FALSE) issued by `ca()`."""
    return _leaf(ca(), x509.BasicConstraints(ca=False, path_length=None))


@functools.cache
def no_basic_constraints_cert() -> x509.Certificate:
    return _leaf(ca(), None)


def _leaf(
    issuer: CertificateAuthority, constraints: x509.BasicConstraints | None
) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leaf")]))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=True)
    return builder.sign(issuer.key, signature_hash(issuer.key))


def hand_made_ca(
    key: PrivateKey,
    name: x509.Name,
    now: dt.datetime,
    *,
    serial: int = 7,
    cert_sign: bool = True,
    hash_algorithm: hashes.SHA256 | hashes.SHA384 | None = None,
) -> x509.Certificate:
    """A self-signed CA cert with only what a test sets: basicConstraints CA, keyUsage
    digitalSignature + cRLSign (+ keyCertSign unless `cert_sign=False`), no key
    identifiers, valid from a day before `now` for 30 days; SHA-256 unless told."""
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, cert_sign, True, False, False),
            critical=True,
        )
        .sign(key, hash_algorithm or hashes.SHA256())
    )
