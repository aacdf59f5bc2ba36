"""The table of key types (`trust.keys.KEYS`): each row's facts agree with the keys it
generates, and a row added to the table reaches the signer's policy and metrics, the
command line and the flags without another edit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import rsa

from signer import policy
from trust import keys
from trust.ca import generate_ca

ROOT = Path(__file__).resolve().parents[3]
ROWS = {spec.name: spec for spec in keys.KEYS}


def test_each_name_is_one_row() -> None:
    assert len(ROWS) == len(keys.KEYS)


@pytest.mark.parametrize("name", [n for n in ROWS if n not in ("RSA4096",)])
def test_a_generated_key_is_of_its_own_row(name: str) -> None:
    key = keys.generate_leaf_key(name)
    assert keys.spec_of_public_key(key.public_key()) is ROWS[name]
    assert policy.key_type_of(key.public_key()) == name


def test_the_sets_are_read_from_the_columns() -> None:
    assert keys.ca_key_types() == tuple(n for n, s in ROWS.items() if s.ca)
    assert keys.leaf_key_types() == tuple(n for n, s in ROWS.items() if s.leaf)
    assert keys.managed_ca_key_types() == tuple(n for n, s in ROWS.items() if s.managed)
    assert set(keys.managed_ca_key_types()) <= set(keys.ca_key_types())
    assert keys.gated_key_types(keys.MLDSA_GATE) == ("MLDSA44", "MLDSA65", "MLDSA87")
    assert "RSA2048" not in keys.leaf_key_types()  # for CAs only: tests want fast keys


@pytest.mark.parametrize("name", [n for n in ROWS if n not in keys.ca_key_types()])
def test_a_key_no_ca_may_use_is_not_generated_as_a_ca_key(name: str) -> None:
    with pytest.raises(ValueError, match="not a CA key type"):
        keys.generate_key(name)


@pytest.mark.parametrize("name", [n for n in keys.ca_key_types() if n != "RSA4096"])
def test_a_ca_signs_with_its_rows_digest(name: str) -> None:
    cert = generate_ca(key_type=name).cert
    digest = ROWS[name].digest
    expected = None if digest is None else type(digest())
    got = cert.signature_hash_algorithm
    assert (None if got is None else type(got)) == expected


def test_a_ca_key_of_a_size_no_row_names_signs_like_its_family() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2304)
    assert isinstance(keys.signature_hash(key), hashes.SHA256)
    assert keys.spec_of_public_key(key.public_key()) is None
    assert keys.family_of_public_key(key.public_key()) is ROWS["RSA2048"]


def test_an_unknown_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown key type 'DSA'.*ECDSAP256"):
        keys.spec_of("DSA")


FAKE_ROW = """
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from trust import keys

FAKE = keys.KeySpec(
    "ECDSAK256",
    ca=True,
    leaf=True,
    managed=True,
    gate="FakeKeyTypeGate",
    generate=lambda: ec.generate_private_key(ec.SECP256K1()),
    public_key=ec.EllipticCurvePublicKey,
    curve="secp256k1",
    digest=hashes.SHA256,
)
keys.KEYS = (*keys.KEYS, FAKE)
"""
"""A row added before anything else loads, as a new key type's row would be."""

SEE_IT = """
import json, sys
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from prometheus_client import CollectorRegistry, generate_latest

from cli.main import main
from manager.options import MANAGED_CA_KEY_TYPES
from signer import policy
from signer.metrics import SignerMetrics

key = FAKE.generate()
stub = (
    x509.CertificateSigningRequestBuilder()
    .subject_name(x509.Name([]))
    .sign(key, hashes.SHA256())
    .public_bytes(Encoding.DER)
)
accepted = policy.public_key_from_request(stub, None)
refused = policy.public_key_from_request(None, b"\\x00")
registry = CollectorRegistry()
SignerMetrics(registry)
runner = CliRunner()
init = runner.invoke(main, ["ca", "init", "--out", sys.argv[1], "--key-type", "ECDSAK256"])
print(json.dumps({
    "policy_names": policy.key_type_of(accepted),
    "policy_lists": "ECDSAK256" in policy.supported_key_types(),
    "metrics": 'key_type="ECDSAK256"' in generate_latest(registry).decode(),
    "ca_init_help": "ECDSAK256" in runner.invoke(main, ["ca", "init", "--help"]).output,
    "ca_init": init.exit_code,
    "run_help": "ECDSAK256" in runner.invoke(main, ["run", "--help"]).output,
    "managed_ca": "ECDSAK256" in MANAGED_CA_KEY_TYPES,
}))
"""


def test_a_new_rows_key_type_reaches_policy_metrics_and_the_command_line(tmp_path: Path) -> None:
    """Adding a key type is one row: the signer accepts and names its keys, the issued
    metric carries its label from the start, `ca init` makes a CA of it and `run` offers
    it for the managed CA — no list elsewhere to edit."""
    script = textwrap.dedent(FAKE_ROW) + textwrap.dedent(SEE_IT)
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "ca")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == {
        "policy_names": "ECDSAK256",
        "policy_lists": True,
        "metrics": True,
        "ca_init_help": True,
        "ca_init": 0,
        "run_help": True,
        "managed_ca": True,
    }
    cert = x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.crt").read_bytes())
    assert cert.public_key().curve.name == "secp256k1"  # type: ignore[union-attr]
