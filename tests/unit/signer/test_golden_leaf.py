"""Without the opt-ins, a leaf is byte-for-byte the leaf this signer issued before
`--pod-identity-subject` and `--cluster-ip-sans` existed (docs/configuration.md, "Certificate
shape"): the same inputs — an Ed25519 CA and fixed leaf keys, serial, time and names — give
the very bytes recorded in tests/unit/signer/data/ (written at commit 6a92e91; Ed25519
signatures are deterministic, so the whole certificate is comparable)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from signer import authority
from signer.policy import PublicKey
from trust.ca import cert_pem, key_pem
from trust.material import MaterialFiles, SigningMaterial, validate_material

DATA = Path(__file__).with_name("data")
NOW = dt.datetime(2026, 12, 4, 12, 0, 0, tzinfo=dt.UTC)
SERIAL = 0x1234567890ABCDEF1234567890ABCDEF
NAMES = [
    "web.shop.svc.cluster.local",
    "web.shop.svc",
    "web-0.peers.shop.svc.cluster.local",
    "web-0.peers.shop.svc",
]
LEAF_KEYS: dict[str, PublicKey] = {
    "ed25519": ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64))).public_key(),
    "p256": ec.derive_private_key(0x5EED_1234, ec.SECP256R1()).public_key(),
}


def golden_material() -> SigningMaterial:
    ca_key = ed25519.Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    ca = x509.load_pem_x509_certificate((DATA / "golden-ca.pem").read_bytes())
    files = MaterialFiles(key_pem(ca_key), cert_pem(ca), cert_pem(ca))
    return validate_material(files, "ca.key", "ca.crt", "bundle.pem", NOW)


@pytest.mark.parametrize("leaf", sorted(LEAF_KEYS))
def test_without_opt_ins_the_leaf_is_byte_for_byte_todays(leaf: str) -> None:
    issued = authority.issue(
        golden_material(), LEAF_KEYS[leaf], NAMES, 86400, 86400, NOW, serial=SERIAL
    )
    assert issued.chain_pem == (DATA / f"golden-leaf-{leaf}.pem").read_text()
