"""Issued chains verify with a second implementation: `openssl verify -x509_strict` with
the `sslserver` purpose and hostname checking, for CA and leaf key types alike, with
and without an intermediate in the cert file."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from pathlib import Path

import pytest

from controlplane.kubelet import generate_key
from signer import authority
from trust.ca import write_ca
from trust.files import load_material

BLOCK_END = "-----END CERTIFICATE-----\n"


def openssl() -> str:
    found = shutil.which("openssl")
    assert found, "the openssl CLI is needed for this cross-check (Debian package openssl)"
    return found


@pytest.mark.parametrize("intermediate", [False, True], ids=["root", "intermediate"])
@pytest.mark.parametrize("ca_type", ["RSA3072", "ECDSAP384", "ED25519"])
@pytest.mark.parametrize("leaf_type", ["RSA3072", "ECDSAP256", "ED25519"])
def test_openssl_strictly_verifies_issued_chain_for_the_service_name(
    tmp_path: Path, ca_type: str, leaf_type: str, intermediate: bool
) -> None:
    write_ca(tmp_path, key_type=ca_type, intermediate=intermediate)
    material = load_material(
        str(tmp_path / "ca.key"), str(tmp_path / "ca.crt"), str(tmp_path / "trust-bundle.pem")
    )
    key = generate_key(leaf_type)
    issued = authority.issue(
        material,
        key.public_key(),
        ["web.ns.svc.cluster.local", "web.ns.svc"],
        86400,
        86400,
        dt.datetime.now(dt.UTC),
    )
    blocks = [b + BLOCK_END for b in issued.chain_pem.split(BLOCK_END) if b.strip()]
    assert len(blocks) == (2 if intermediate else 1)
    (tmp_path / "leaf.pem").write_text(blocks[0])
    args = [openssl(), "verify", "-x509_strict", "-purpose", "sslserver"]
    args += ["-CAfile", str(tmp_path / "trust-bundle.pem")]
    if intermediate:
        (tmp_path / "untrusted.pem").write_text("".join(blocks[1:]))
        args += ["-untrusted", str(tmp_path / "untrusted.pem")]

    good = subprocess.run(
        [*args, "-verify_hostname", "web.ns.svc", str(tmp_path / "leaf.pem")],
        capture_output=True,
        text=True,
    )
    bad = subprocess.run(
        [*args, "-verify_hostname", "web.other.svc", str(tmp_path / "leaf.pem")],
        capture_output=True,
        text=True,
    )

    assert good.returncode == 0, good.stderr
    assert bad.returncode != 0
