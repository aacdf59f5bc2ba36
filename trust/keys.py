"""Private keys: the one table of key types (`KEYS`) and everything derived from it — which
types a CA may use, which a Pod's certificate may carry, which a managed CA offers, which
need a feature gate, how a key of a type is generated, which type a public key is, and
which digest a signature with a key uses.

Adding a key type is one row of `KEYS` (plus its tests); the signer's policy and metrics,
`explain`, the flags and the test harness read the table, never a list of their own.

Decisions:

- Key types use kubelet's `keyType` names (`ECDSAP256`, `RSA3072`, `ED25519`, …);
  `RSA2048` is accepted for CAs only, because tests want fast keys.
- ML-DSA (`MLDSA44`, `MLDSA65`, `MLDSA87`; FIPS 204, Kubernetes 1.38 behind the
  `PodCertificateMLDSA` gate) is a *leaf* key type only: a Pod's key, signed by a CA of
  one of the classical types. A CA key is never ML-DSA (`PrivateKey` excludes it), so
  nothing that signs, publishes or validates CAs meets one.
- The signature digest follows the key: SHA-256 (RSA PKCS#1 v1.5, P-256), SHA-384
  (P-384), SHA-512 (P-521), none for Ed25519 and ML-DSA (they sign the message itself).
  A CA key of a size no row names (RSA-8192) signs like its family's first row.
- The table is read through functions, at call time, so a row added before the importers
  load (a test's fake type) reaches all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, mldsa, rsa

KeyType: TypeAlias = str
"""A CA key type's name: one of `ca_key_types()`."""
LeafKeyType: TypeAlias = str
"""A leaf key type's name: one of `leaf_key_types()` (or a CA type, for tests)."""

PrivateKey: TypeAlias = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
MLDSAPrivateKey: TypeAlias = (
    mldsa.MLDSA44PrivateKey | mldsa.MLDSA65PrivateKey | mldsa.MLDSA87PrivateKey
)
LeafPrivateKey: TypeAlias = PrivateKey | MLDSAPrivateKey
MLDSAPublicKey: TypeAlias = mldsa.MLDSA44PublicKey | mldsa.MLDSA65PublicKey | mldsa.MLDSA87PublicKey
LeafPublicKey: TypeAlias = (
    rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | MLDSAPublicKey
)
Digest: TypeAlias = hashes.SHA256 | hashes.SHA384 | hashes.SHA512

DEFAULT_KEY_TYPE = "ECDSAP256"
"""kubelet's default `keyType`, and ours wherever a key type may be left out."""
MLDSA_GATE = "PodCertificateMLDSA"
"""One name for the kube-apiserver gate, the kubelet gate and the declared node feature."""


@dataclass(frozen=True)
class KeySpec:
    """One key type: every fact about it the project uses."""

    name: str
    """kubelet's `keyType` spelling."""
    ca: bool
    """A CA may use it: `ca init --key-type`, a `--service-serving-key`."""
    leaf: bool
    """A Pod's certificate may carry it: kubelet asks for it, the signer signs for it."""
    managed: bool
    """`--managed-ca-key-type` offers it."""
    gate: str | None
    """The feature gate a Pod needs before it may ask for it (None: none)."""
    generate: Callable[[], LeafPrivateKey]
    public_key: type
    """The public key's class; with `bits` (RSA) or `curve` (ECDSA), which keys are this type."""
    bits: int | None = None
    curve: str | None = None
    key_encipherment: bool = False
    """A leaf of this type carries KeyUsage keyEncipherment (RSA key transport)."""
    digest: Callable[[], Digest] | None = None
    """The digest a signature by this key uses; None: the key signs the message itself."""
    proof_of_possession: bool = True
    """kube-apiserver verifies a `proofOfPossession` for it, so the deprecated
    `pkixPublicKey` may carry it."""

    def family(self, key: object) -> bool:
        """`key` (public) is of this type's class and curve, whatever its size."""
        if not isinstance(key, self.public_key):
            return False
        return self.curve is None or (
            isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == self.curve
        )

    def holds(self, key: object) -> bool:
        """`key` (public) is of this type."""
        return self.family(key) and (
            self.bits is None or (isinstance(key, rsa.RSAPublicKey) and key.key_size == self.bits)
        )


def _rsa(bits: int) -> Callable[[], LeafPrivateKey]:
    return lambda: rsa.generate_private_key(public_exponent=65537, key_size=bits)


def _ec(curve: ec.EllipticCurve) -> Callable[[], LeafPrivateKey]:
    return lambda: ec.generate_private_key(curve)


def _row_rsa(bits: int, *, leaf: bool) -> KeySpec:
    return KeySpec(
        f"RSA{bits}",
        ca=True,
        leaf=leaf,
        managed=True,
        gate=None,
        generate=_rsa(bits),
        public_key=rsa.RSAPublicKey,
        bits=bits,
        key_encipherment=True,
        digest=hashes.SHA256,
    )


def _row_ec(name: str, curve: ec.EllipticCurve, digest: Callable[[], Digest]) -> KeySpec:
    return KeySpec(
        name,
        ca=True,
        leaf=True,
        managed=True,
        gate=None,
        generate=_ec(curve),
        public_key=ec.EllipticCurvePublicKey,
        curve=curve.name,
        digest=digest,
    )


def _row_mldsa(name: str, private: type[MLDSAPrivateKey], public: type) -> KeySpec:
    return KeySpec(
        name,
        ca=False,
        leaf=True,
        managed=False,
        gate=MLDSA_GATE,
        generate=private.generate,
        public_key=public,
        proof_of_possession=False,
    )


KEYS: tuple[KeySpec, ...] = (
    _row_ec("ECDSAP256", ec.SECP256R1(), hashes.SHA256),
    _row_ec("ECDSAP384", ec.SECP384R1(), hashes.SHA384),
    _row_ec("ECDSAP521", ec.SECP521R1(), hashes.SHA512),
    _row_rsa(2048, leaf=False),
    _row_rsa(3072, leaf=True),
    _row_rsa(4096, leaf=True),
    KeySpec(
        "ED25519",
        ca=True,
        leaf=True,
        managed=False,
        gate=None,
        generate=ed25519.Ed25519PrivateKey.generate,
        public_key=ed25519.Ed25519PublicKey,
    ),
    _row_mldsa("MLDSA44", mldsa.MLDSA44PrivateKey, mldsa.MLDSA44PublicKey),
    _row_mldsa("MLDSA65", mldsa.MLDSA65PrivateKey, mldsa.MLDSA65PublicKey),
    _row_mldsa("MLDSA87", mldsa.MLDSA87PrivateKey, mldsa.MLDSA87PublicKey),
)
"""Every key type, in the order messages and choices list them."""


def ca_key_types() -> tuple[str, ...]:
    return tuple(spec.name for spec in KEYS if spec.ca)


def leaf_key_types() -> tuple[str, ...]:
    return tuple(spec.name for spec in KEYS if spec.leaf)


def managed_ca_key_types() -> tuple[str, ...]:
    return tuple(spec.name for spec in KEYS if spec.managed)


def gated_key_types(gate: str) -> tuple[str, ...]:
    """The leaf key types a Pod may ask for only with `gate` on."""
    return tuple(spec.name for spec in KEYS if spec.leaf and spec.gate == gate)


def ungated_leaf_key_types() -> tuple[str, ...]:
    """The leaf key types any supported kubelet may ask for."""
    return tuple(spec.name for spec in KEYS if spec.leaf and spec.gate is None)


def spec_of(name: str) -> KeySpec:
    for spec in KEYS:
        if spec.name == name:
            return spec
    raise ValueError(f"unknown key type {name!r}; use one of {', '.join(s.name for s in KEYS)}")


def spec_of_public_key(key: object) -> KeySpec | None:
    """The row whose type `key` (public) is, or None."""
    return next((spec for spec in KEYS if spec.holds(key)), None)


def family_of_public_key(key: object) -> KeySpec | None:
    """The row whose type `key` (public) is, else the first of its family (an RSA-8192
    CA key signs and is used like RSA2048), or None."""
    return spec_of_public_key(key) or next((spec for spec in KEYS if spec.family(key)), None)


def generate_key(key_type: KeyType = DEFAULT_KEY_TYPE) -> PrivateKey:
    """A fresh private key of a CA key type (kubelet `keyType` names)."""
    spec = spec_of(key_type)
    key = spec.generate()
    if not spec.ca or not isinstance(key, PrivateKey):
        raise ValueError(f"{key_type} is not a CA key type; use one of {', '.join(ca_key_types())}")
    return key


def generate_leaf_key(key_type: LeafKeyType = DEFAULT_KEY_TYPE) -> LeafPrivateKey:
    """A fresh key of any type a Pod's certificate may carry, ML-DSA included."""
    return spec_of(key_type).generate()


def signature_hash(key: LeafPrivateKey) -> Digest | None:
    """The digest a signature by `key` uses (None: the key signs the message itself)."""
    spec = family_of_public_key(key.public_key())
    if spec is None:
        raise ValueError(f"not a key type we sign with: {type(key).__name__}")
    return spec.digest() if spec.digest else None
