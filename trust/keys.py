"""Private keys: the one name for the key types we sign with (`PrivateKey`), the key
types a Pod's certificate may carry (`LeafKeyType`), how one is generated from kubelet's
`keyType` spelling, and which digest a signature with it uses.

Decisions:

- Key types use kubelet's `keyType` names (`ECDSAP256`, `RSA3072`, `ED25519`, …);
  `RSA2048` is accepted for CAs only, because tests want fast keys.
- ML-DSA (`MLDSA44`, `MLDSA65`, `MLDSA87`; FIPS 204, Kubernetes 1.38 behind the
  `PodCertificateMLDSA` gate) is a *leaf* key type only: a Pod's key, signed by a CA of
  one of the classical types. A CA key is never ML-DSA (`PrivateKey` excludes it), so
  nothing that signs, publishes or validates CAs meets one.
- The signature digest follows the key: SHA-256 (RSA PKCS#1 v1.5, P-256), SHA-384
  (P-384), SHA-512 (P-521), none for Ed25519.
"""

from __future__ import annotations

from typing import Literal, TypeAlias, get_args

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, mldsa, rsa

KeyType: TypeAlias = Literal[
    "ECDSAP256", "ECDSAP384", "ECDSAP521", "RSA2048", "RSA3072", "RSA4096", "ED25519"
]
KEY_TYPES: tuple[KeyType, ...] = get_args(KeyType)

MLDSAKeyType: TypeAlias = Literal["MLDSA44", "MLDSA65", "MLDSA87"]
MLDSA_KEY_TYPES: tuple[MLDSAKeyType, ...] = get_args(MLDSAKeyType)
LeafKeyType: TypeAlias = KeyType | MLDSAKeyType
LEAF_KEY_TYPES: tuple[LeafKeyType, ...] = KEY_TYPES + MLDSA_KEY_TYPES

PrivateKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
MLDSAPrivateKey: TypeAlias = (
    mldsa.MLDSA44PrivateKey | mldsa.MLDSA65PrivateKey | mldsa.MLDSA87PrivateKey
)
LeafPrivateKey: TypeAlias = PrivateKey | MLDSAPrivateKey


def generate_key(key_type: KeyType = "ECDSAP256") -> PrivateKey:
    """A fresh private key of `key_type` (kubelet `keyType` names)."""
    if key_type == "ECDSAP256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type == "ECDSAP384":
        return ec.generate_private_key(ec.SECP384R1())
    if key_type == "ECDSAP521":
        return ec.generate_private_key(ec.SECP521R1())
    if key_type == "ED25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type in ("RSA2048", "RSA3072", "RSA4096"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type[3:]))
    raise ValueError(f"unknown key type {key_type!r}; use one of {', '.join(KEY_TYPES)}")


def generate_leaf_key(key_type: LeafKeyType = "ECDSAP256") -> LeafPrivateKey:
    """A fresh key of any type a Pod's certificate may carry, ML-DSA included."""
    if key_type == "MLDSA44":
        return mldsa.MLDSA44PrivateKey.generate()
    if key_type == "MLDSA65":
        return mldsa.MLDSA65PrivateKey.generate()
    if key_type == "MLDSA87":
        return mldsa.MLDSA87PrivateKey.generate()
    if key_type in KEY_TYPES:
        return generate_key(key_type)
    raise ValueError(f"unknown key type {key_type!r}; use one of {', '.join(LEAF_KEY_TYPES)}")


def signature_hash(key: PrivateKey) -> hashes.SHA256 | hashes.SHA384 | hashes.SHA512 | None:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if isinstance(key.curve, ec.SECP384R1):
            return hashes.SHA384()
        if isinstance(key.curve, ec.SECP521R1):
            return hashes.SHA512()
        return hashes.SHA256()
    if isinstance(key, rsa.RSAPrivateKey):
        return hashes.SHA256()
    return None
