"""Throw-away CAs (`ca init`): shape of the certificates and the files written."""

from __future__ import annotations

import stat
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography import x509

from trust.bundle import normalize_bundle
from trust.ca import generate_ca, write_ca
from trust.files import load_material
from trust.keys import KeyType, ca_key_types


@pytest.mark.parametrize("key_type", [k for k in ca_key_types() if k != "RSA4096"])
def test_root_ca_is_a_self_signed_ca_with_cert_sign_and_ski(key_type: KeyType) -> None:
    cert = generate_ca(key_type=key_type).cert
    ext = cert.extensions
    constraints = ext.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    usage = ext.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    ext.get_extension_for_class(x509.SubjectKeyIdentifier)
    cert.verify_directly_issued_by(cert)


def test_subject_carries_the_organization_when_given() -> None:
    assert generate_ca("plain").cert.subject.rfc4514_string() == "CN=plain"
    named = generate_ca("envtest-serving-ca", organization="envtest").cert
    assert named.subject.rfc4514_string() == "O=envtest,CN=envtest-serving-ca"
    assert named.issuer == named.subject


def test_intermediate_is_issued_by_root_and_names_it_in_aki() -> None:
    root = generate_ca("r")
    inter = generate_ca("i", parent=root)
    inter.cert.verify_directly_issued_by(root.cert)
    aki = inter.cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    root_ski = root.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == root_ski.digest
    assert inter.root is root
    assert inter.cert_chain == [inter.cert]


def test_validity_is_honoured() -> None:
    cert = generate_ca(validity=timedelta(days=2)).cert
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == timedelta(days=2)


@pytest.mark.parametrize("intermediate", [False, True], ids=["root", "intermediate"])
def test_write_ca_files_load_as_signing_material(tmp_path: Path, intermediate: bool) -> None:
    files = write_ca(tmp_path, intermediate=intermediate)
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    material = load_material(files.key, files.cert, files.trust_bundle)
    assert normalize_bundle(files.trust_bundle.read_bytes()) == material.trust_bundle
    assert (material.signing_cert.subject == material.anchors[0].subject) is not intermediate


def test_write_ca_refuses_to_overwrite(tmp_path: Path) -> None:
    write_ca(tmp_path)
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        write_ca(tmp_path)
    write_ca(tmp_path, overwrite=True)


def test_unknown_key_type_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown key type"):
        generate_ca(key_type="DSA")
