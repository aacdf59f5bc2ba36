"""Signing sets whose chains no TLS client accepts are refused:
a throw-away leaf issued with the set (the signer's real profile) must verify for server
auth against the set's own anchors, and the signing cert must outlive the next hour."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from prometheus_client import CollectorRegistry

from signer.authority import issue_probe
from trust.ca import cert_pem, key_pem
from trust.files import FileMaterialSource
from trust.keys import KeyType, PrivateKey, generate_key, signature_hash
from trust.material import MaterialError, MaterialFiles, SigningMaterial, validate_material

NOW = datetime.now(UTC).replace(microsecond=0)


@dataclass(frozen=True)
class Cert:
    key: PrivateKey
    cert: x509.Certificate


def make_ca(
    name: str,
    key_type: KeyType = "ECDSAP256",
    issuer: Cert | None = None,
    *,
    path_length: int | None = None,
    eku: list[x509.ObjectIdentifier] | None = None,
    constraints: x509.NameConstraints | None = None,
    not_before: datetime = NOW - timedelta(days=1),
    not_after: datetime = NOW + timedelta(days=365),
) -> Cert:
    key = generate_key(key_type)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    signer_key = issuer.key if issuer else key
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()),
            critical=False,
        )
    )
    if eku is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(eku), critical=False)
    if constraints is not None:
        builder = builder.add_extension(constraints, critical=True)
    return Cert(key, builder.sign(signer_key, signature_hash(signer_key)))


@dataclass(frozen=True)
class Chain:
    """The signing cert (whose key is the CA key), the rest of the cert file, the bundle."""

    signing: Cert
    rest: tuple[x509.Certificate, ...]
    anchors: tuple[x509.Certificate, ...]

    def files(self) -> MaterialFiles:
        return MaterialFiles(
            key_pem(self.signing.key),
            cert_pem(self.signing.cert, *self.rest),
            cert_pem(*self.anchors),
        )


def two_level(key_type: KeyType = "ECDSAP256", **intermediate: object) -> Chain:
    root = make_ca("root", key_type)
    signing = make_ca("signing", key_type, root, **intermediate)  # type: ignore[arg-type]
    return Chain(signing, (), (root.cert,))


def root_path_len_zero_above_intermediate(key_type: KeyType = "ECDSAP256") -> Chain:
    root = make_ca("root pathLen 0", key_type, path_length=0)
    signing = make_ca("signing", key_type, root)
    return Chain(signing, (), (root.cert,))


def intermediate_path_len_zero_above_signing() -> Chain:
    root = make_ca("root")
    middle = make_ca("middle pathLen 0", issuer=root, path_length=0)
    signing = make_ca("signing", issuer=middle)
    return Chain(signing, (middle.cert,), (root.cert,))


def intermediate_eku_client_auth_only(key_type: KeyType = "ECDSAP256") -> Chain:
    return two_level(key_type, eku=[ExtendedKeyUsageOID.CLIENT_AUTH])


def name_constraints_excluding_svc() -> Chain:
    excluded = x509.NameConstraints(
        permitted_subtrees=None, excluded_subtrees=[x509.DNSName("svc")]
    )
    return two_level(constraints=excluded)


def name_constraints_permitting_only_the_cluster_domain() -> Chain:
    permitted = x509.NameConstraints(
        permitted_subtrees=[x509.DNSName("cluster.local")], excluded_subtrees=None
    )
    root = make_ca("root cluster.local only", constraints=permitted)
    signing = make_ca("signing", issuer=root)
    return Chain(signing, (), (root.cert,))


def expired_intermediate_in_cert_file() -> Chain:
    root = make_ca("root")
    middle = make_ca(
        "middle expired",
        issuer=root,
        not_before=NOW - timedelta(days=30),
        not_after=NOW - timedelta(days=1),
    )
    signing = make_ca("signing", issuer=middle)
    return Chain(signing, (middle.cert,), (root.cert,))


def signing_cert_expiring_within_the_hour() -> Chain:
    root = make_ca("root")
    signing = make_ca("signing", issuer=root, not_after=NOW + timedelta(minutes=50))
    return Chain(signing, (), (root.cert,))


BAD_CHAINS: dict[str, tuple[Callable[[], Chain], str]] = {
    "root-pathlen-0-above-intermediate": (
        root_path_len_zero_above_intermediate,
        "path length constraint violated",
    ),
    "intermediate-pathlen-0-above-signing": (
        intermediate_path_len_zero_above_signing,
        "path length constraint violated",
    ),
    "intermediate-eku-clientauth-only": (intermediate_eku_client_auth_only, "EKU"),
    "name-constraints-exclude-svc": (name_constraints_excluding_svc, "excluded name constraint"),
    "name-constraints-permit-only-cluster-domain": (
        name_constraints_permitting_only_the_cluster_domain,
        "no permitted name constraints matched",
    ),
    "ed25519-root-pathlen-0": (
        lambda: root_path_len_zero_above_intermediate("ED25519"),
        "path length constraint exceeded",
    ),
    "ed25519-intermediate-eku-clientauth-only": (
        lambda: intermediate_eku_client_auth_only("ED25519"),
        "unsuitable certificate purpose",
    ),
}


def validate(chain: Chain) -> SigningMaterial:
    return validate_material(
        chain.files(), "ca.key", "ca.crt", "bundle.pem", NOW, issuer=issue_probe
    )


@pytest.mark.parametrize(("build", "reason"), BAD_CHAINS.values(), ids=BAD_CHAINS.keys())
def test_chain_shapes_no_client_accepts_are_refused_with_a_one_line_reason(
    build: Callable[[], Chain], reason: str
) -> None:
    with pytest.raises(MaterialError) as info:
        validate(build())
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith("ca.crt: a test certificate issued with this set does not verify"), text
    assert "bundle.pem" in text
    assert reason in text, text


def test_expired_intermediate_in_the_cert_file_is_refused_naming_it() -> None:
    with pytest.raises(MaterialError) as info:
        validate(expired_intermediate_in_cert_file())
    assert str(info.value).startswith(
        "ca.crt: intermediate certificate 'CN=middle expired' expired at"
    )


def test_signing_cert_expiring_within_the_hour_is_refused() -> None:
    with pytest.raises(MaterialError) as info:
        validate(signing_cert_expiring_within_the_hour())
    text = str(info.value)
    assert text.startswith("ca.crt: signing certificate 'CN=signing' expires at"), text
    assert "within the hour" in text


@pytest.mark.parametrize("key_type", ["ECDSAP256", "ECDSAP384", "ECDSAP521", "RSA2048", "ED25519"])
@pytest.mark.parametrize("levels", [1, 2, 3])
def test_sound_chains_of_every_key_type_and_depth_are_accepted(
    key_type: KeyType, levels: int
) -> None:
    root = make_ca("root", key_type)
    certs = [root]
    for i in range(levels - 1):
        certs.append(make_ca(f"level {i}", key_type, certs[-1]))
    chain = Chain(certs[-1], tuple(c.cert for c in reversed(certs[1:-1])), (root.cert,))
    material = validate(chain)
    assert material.signing_cert == certs[-1].cert
    assert material.anchors == (root.cert,)


def test_name_constraints_permitting_svc_and_the_domain_are_accepted() -> None:
    permitted = x509.NameConstraints(
        permitted_subtrees=[x509.DNSName("svc"), x509.DNSName("svc.cluster.local")],
        excluded_subtrees=None,
    )
    chain = two_level(constraints=permitted)
    assert validate(chain).signing_cert == chain.signing.cert


def test_custom_cluster_domain_is_what_the_probe_checks() -> None:
    permitted = x509.NameConstraints(
        permitted_subtrees=[x509.DNSName("svc"), x509.DNSName("svc.example.org")],
        excluded_subtrees=None,
    )
    chain = two_level(constraints=permitted)
    validate_material(
        chain.files(), "ca.key", "ca.crt", "b.pem", NOW, issuer=issue_probe, domain="example.org"
    )
    with pytest.raises(MaterialError, match="no permitted name constraints matched"):
        validate(chain)  # cluster.local is outside the permitted names


# on reload ----------------------------------------------------------------------------


def write(d: Path, chain: Chain) -> None:
    files = chain.files()
    (d / "ca.key").write_bytes(files.key)
    (d / "ca.crt").write_bytes(files.cert)
    (d / "bundle.pem").write_bytes(files.bundle)


@pytest.mark.parametrize(
    "build",
    [
        root_path_len_zero_above_intermediate,
        intermediate_eku_client_auth_only,
        name_constraints_excluding_svc,
        expired_intermediate_in_cert_file,
        signing_cert_expiring_within_the_hour,
    ],
)
def test_reload_keeps_the_last_good_set_when_the_new_one_cannot_issue(
    tmp_path: Path, build: Callable[[], Chain], caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, two_level())
    registry = CollectorRegistry()
    source = FileMaterialSource(
        tmp_path / "ca.key",
        tmp_path / "ca.crt",
        tmp_path / "bundle.pem",
        registry,
        issuer=issue_probe,
    )
    good = source.current()
    write(tmp_path, build())
    with caplog.at_level(logging.ERROR):
        source.poll()
    assert source.current() is good
    assert registry.get_sample_value("service_serving_ca_controller_material_invalid") == 1
    (record,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert str(getattr(record, "err", "")).startswith(str(tmp_path / "ca.crt"))


def test_start_up_refuses_a_set_that_cannot_issue(tmp_path: Path) -> None:
    write(tmp_path, root_path_len_zero_above_intermediate())
    with pytest.raises(MaterialError, match="path length constraint violated"):
        FileMaterialSource(
            tmp_path / "ca.key", tmp_path / "ca.crt", tmp_path / "bundle.pem", issuer=issue_probe
        )


def test_start_up_accepts_a_signing_cert_expiring_within_the_hour_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing better to keep: run (and publish, and report SignerCertificateExpiring)
    # rather than crash-loop until the files are rotated.
    write(tmp_path, signing_cert_expiring_within_the_hour())
    with caplog.at_level(logging.WARNING):
        source = FileMaterialSource(
            tmp_path / "ca.key", tmp_path / "ca.crt", tmp_path / "bundle.pem", issuer=issue_probe
        )
    assert source.current().signing_cert.subject.rfc4514_string() == "CN=signing"
    assert any("expires within the hour" in r.getMessage() for r in caplog.records)
