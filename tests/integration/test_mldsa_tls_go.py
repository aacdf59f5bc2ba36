"""What a TLS stack needs for an ML-DSA Pod certificate (docs/post-quantum.md), shown
with Go: a leaf the signer issues for each ML-DSA key size serves a TLS 1.3 handshake
in Go 1.27's crypto/tls, verified against the CA alone (tests/integration/go/mldsatls).
The go command fetches the go1.27 toolchain from the module proxy, as the 1.38 builds do."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import pytest

from controlplane import binaries
from signer import authority
from trust import keys
from trust.ca import cert_pem, generate_ca, key_pem
from trust.keys import generate_leaf_key
from trust.material import MaterialFiles, validate_material

PROGRAM = Path(__file__).with_name("go") / "mldsatls"


@pytest.mark.parametrize("key_type", keys.gated_key_types(keys.MLDSA_GATE))
def test_go_127_serves_tls_13_with_an_issued_mldsa_leaf(tmp_path: Path, key_type: str) -> None:
    ca = generate_ca("mldsa tls root")
    now = dt.datetime.now(dt.UTC)
    files = MaterialFiles(key_pem(ca.key), cert_pem(ca.cert), cert_pem(ca.cert))
    material = validate_material(files, "ca.key", "ca.crt", "bundle.pem", now)
    key = generate_leaf_key(key_type)
    issued = authority.issue(material, key.public_key(), ["web.shop.svc"], 3600, 3600, now)
    (tmp_path / "chain.pem").write_text(issued.chain_pem)
    (tmp_path / "key.pem").write_bytes(key_pem(key))
    (tmp_path / "ca.pem").write_bytes(cert_pem(ca.cert))

    paths = [str(tmp_path / f) for f in ("chain.pem", "key.pem", "ca.pem")]
    result = subprocess.run(
        ["go", "run", ".", *paths, "web.shop.svc"],
        cwd=PROGRAM,
        env={**os.environ, "GOTOOLCHAIN": binaries.GO_TOOLCHAIN, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert result.stdout.strip() == "handshake ok: TLS 1.3, ML-DSA", result.stdout + result.stderr
