"""The PKCS#12 truststore read by the JDK's own tools: every anchor is a
`trustedCertEntry` for `keytool` (Java 17+), the password is enforced, and openssl reads
the same certificates (a second implementation)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from tests.hostile import with_mac_iterations
from tests.unit import pki
from trust.bundle import anchor_ders, normalize_bundle
from trust.truststore import java_truststore, truststore_anchors


def bundle(*names: str) -> str:
    return normalize_bundle(
        "".join(pki.ca(n).cert.public_bytes(Encoding.PEM).decode() for n in names)
    )


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, (
        f"the {name} CLI is needed for this cross-check (Debian: openjdk-17-jdk-headless, openssl)"
    )
    return found


def keytool_list(path: Path, *password: str) -> subprocess.CompletedProcess[str]:
    args = [tool("keytool"), "-list", "-keystore", str(path), "-storetype", "PKCS12"]
    if password:
        args += ["-storepass", password[0]]
    return subprocess.run(args, input="\n", capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("password", ["", "changeit"])
def test_keytool_lists_every_anchor_as_a_trusted_certificate_entry(
    tmp_path: Path, password: str
) -> None:
    pem = bundle("truststore a", "truststore b")
    path = tmp_path / "truststore.p12"
    path.write_bytes(java_truststore(pem, password))
    listed = keytool_list(path, *([password] if password else []))
    assert listed.returncode == 0, listed.stderr + listed.stdout
    assert "Your keystore contains 2 entries" in listed.stdout, listed.stdout
    assert listed.stdout.count("trustedCertEntry") == 2, listed.stdout
    assert truststore_anchors(path.read_bytes(), password) == anchor_ders(pem)


def test_a_password_protected_truststore_refuses_the_wrong_password(tmp_path: Path) -> None:
    path = tmp_path / "truststore.p12"
    path.write_bytes(java_truststore(bundle("truststore a"), "changeit"))
    listed = keytool_list(path, "wrong-password")
    assert listed.returncode != 0
    assert "password was incorrect" in listed.stdout + listed.stderr or "Integrity" in (
        listed.stdout + listed.stderr
    )
    assert truststore_anchors(path.read_bytes(), "wrong-password") is None


def test_openssl_reads_the_same_anchors_with_the_java_trust_attribute(tmp_path: Path) -> None:
    pem = bundle("truststore a", "truststore b")
    path = tmp_path / "truststore.p12"
    path.write_bytes(java_truststore(pem))
    out = subprocess.run(
        [tool("openssl"), "pkcs12", "-in", str(path), "-nokeys", "-passin", "pass:"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    # Oracle's trusted-key-usage attribute on every bag: what makes the JDK trust it.
    assert out.count("2.16.840.1.113894.746875.1.1") == 2, out
    assert normalize_bundle(out) == pem


def test_unreadable_data_is_no_truststore() -> None:
    assert truststore_anchors(b"not pkcs12") is None
    assert truststore_anchors(b"") is None


def test_a_kdf_that_claims_2_to_the_31_iterations_is_refused_without_running_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cryptography.hazmat.primitives.serialization import pkcs12

    store = with_mac_iterations(java_truststore(bundle("truststore a"), "changeit"), 2**31 - 1)

    def no_kdf(*_: object, **__: object) -> None:
        raise AssertionError("the file's KDF must not run")

    monkeypatch.setattr(pkcs12, "load_pkcs12", no_kdf)
    assert truststore_anchors(store, "changeit") is None


def test_a_truststore_larger_than_a_config_map_is_not_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cryptography.hazmat.primitives.serialization import pkcs12

    def no_parse(*_: object, **__: object) -> None:
        raise AssertionError("too large to parse")

    monkeypatch.setattr(pkcs12, "load_pkcs12", no_parse)
    assert truststore_anchors(b"\x30\x84" + b"\x00" * (1 << 20)) is None


def test_our_own_truststores_are_within_the_kdf_bound() -> None:
    pem = bundle("truststore a", "truststore b")
    assert truststore_anchors(java_truststore(pem, "changeit"), "changeit") == anchor_ders(pem)
