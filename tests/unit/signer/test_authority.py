"""The issued certificate (docs/reference.md §5.3): extensions, validity clamps, refresh
time, chain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store

from signer.authority import (
    BACKDATE,
    LifetimeTooShort,
    issue,
    new_serial,
    validity,
)
from signer.policy import PublicKey
from tests.unit import pki
from tests.unit.signer.helpers import material
from trust import keys
from trust.ca import CertificateAuthority, generate_ca
from trust.keys import KeyType, LeafKeyType

NOW = datetime(2026, 9, 1, 12, 0, 0, 123456, tzinfo=UTC)
DAY = 86400
NAMES = ["web.ns.svc.cluster.local", "web.ns.svc"]
LEAF_TYPES: list[LeafKeyType] = list(keys.leaf_key_types())  # kubelet's nine


def public(key_type: LeafKeyType) -> PublicKey:
    return pki.leaf_key(key_type).public_key()


@pytest.fixture(scope="module")
def root() -> CertificateAuthority:
    return generate_ca("authority test root", not_before=NOW - timedelta(days=1))


def leaf_of(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificates(pem.encode())[0]


def verify_server(
    chain_pem: str, anchor: x509.Certificate, name: str, at: datetime
) -> list[x509.Certificate]:
    """The verified path, leaf first and `anchor` last (raises when it does not verify)."""
    certs = x509.load_pem_x509_certificates(chain_pem.encode())
    verifier = (
        PolicyBuilder().store(Store([anchor])).time(at).build_server_verifier(x509.DNSName(name))
    )
    return verifier.verify(certs[0], certs[1:])


# extensions, per leaf key type -------------------------------------------------------


@pytest.mark.parametrize("key_type", LEAF_TYPES)
def test_issued_leaf_verifies_as_tls_server_for_each_leaf_key_type(
    root: CertificateAuthority, key_type: LeafKeyType
) -> None:
    issued = issue(material(root), public(key_type), NAMES, DAY, DAY, NOW)
    for name in NAMES:
        assert verify_server(issued.chain_pem, root.cert, name, NOW)[-1] == root.cert


DIGITAL_SIGNATURE_ONLY = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


@pytest.mark.parametrize("key_type", ["MLDSA44", "MLDSA65", "MLDSA87"])
def test_ml_dsa_leaves_carry_digital_signature_only(
    root: CertificateAuthority, key_type: LeafKeyType
) -> None:
    """RFC 9881: an ML-DSA key signs; key encipherment, key agreement and data encipherment
    are forbidden (kube-apiserver 1.38 refuses them in ML-DSA CSRs), and a leaf has no
    business with certificate or CRL signing."""
    leaf = leaf_of(issue(material(root), public(key_type), NAMES, DAY, DAY, NOW).chain_pem)
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value == DIGITAL_SIGNATURE_ONLY


@pytest.mark.parametrize("key_type", LEAF_TYPES)
def test_issued_leaf_has_spec_extensions(root: CertificateAuthority, key_type: LeafKeyType) -> None:
    key = public(key_type)
    leaf = leaf_of(issue(material(root), key, NAMES, DAY, DAY, NOW).chain_pem)
    ext = leaf.extensions
    assert leaf.subject == x509.Name([])
    san = ext.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.critical and san.value.get_values_for_type(x509.DNSName) == NAMES
    assert not san.value.get_values_for_type(x509.IPAddress)
    usage = ext.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.digital_signature
    assert usage.value.key_encipherment == key_type.startswith("RSA")
    assert not usage.value.key_cert_sign
    assert list(ext.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]
    constraints = ext.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and not constraints.value.ca
    assert ext.get_extension_for_class(x509.SubjectKeyIdentifier).value == (
        x509.SubjectKeyIdentifier.from_public_key(key)
    )
    root_ski = root.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert (
        ext.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
        == root_ski.digest
    )
    assert leaf.public_key().public_bytes(
        Encoding.DER, PublicFormat.SubjectPublicKeyInfo
    ) == key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


@pytest.mark.parametrize(
    ("ca_type", "digest"),
    [
        ("ECDSAP256", hashes.SHA256),
        ("ECDSAP384", hashes.SHA384),
        ("ECDSAP521", hashes.SHA512),
        ("RSA2048", hashes.SHA256),
        ("ED25519", type(None)),
    ],
)
def test_signature_digest_follows_ca_key(ca_type: KeyType, digest: type) -> None:
    authority = pki.ca(f"digest-{ca_type}", ca_type)
    at = authority.cert.not_valid_before_utc + timedelta(minutes=5)
    issued = issue(material(authority), public("ECDSAP256"), NAMES, DAY, DAY, at)
    leaf = leaf_of(issued.chain_pem)
    assert isinstance(leaf.signature_hash_algorithm, digest)
    leaf.verify_directly_issued_by(authority.cert)


def test_serial_is_random_positive_128_bits(root: CertificateAuthority) -> None:
    serials = {new_serial() for _ in range(200)}
    assert len(serials) == 200
    assert all(0 < s < 2**128 for s in serials)
    assert max(serials).bit_length() > 120
    leaf = leaf_of(issue(material(root), public("ECDSAP256"), NAMES, DAY, DAY, NOW).chain_pem)
    assert 0 < leaf.serial_number < 2**128


def test_explicit_serial_is_used(root: CertificateAuthority) -> None:
    issued = issue(material(root), public("ED25519"), NAMES, DAY, DAY, NOW, serial=42)
    assert leaf_of(issued.chain_pem).serial_number == 42


def test_aki_falls_back_to_issuer_public_key_when_ca_has_no_ski() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "no ski")])
    cert = pki.hand_made_ca(key, name, NOW)
    authority = CertificateAuthority(key=key, cert=cert)
    leaf = leaf_of(issue(material(authority), public("ECDSAP256"), NAMES, DAY, DAY, NOW).chain_pem)
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki == x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key())


def test_rejects_empty_dns_names(root: CertificateAuthority) -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        issue(material(root), public("ECDSAP256"), [], DAY, DAY, NOW)


# chain --------------------------------------------------------------------------------


def test_chain_is_leaf_then_intermediate_without_root() -> None:
    inter = generate_ca("authority inter", parent=pki.ca("chain-root"))
    mat = material(inter, extra_chain=(pki.ca("chain-root").cert,))
    assert len(mat.chain) == 2  # the cert file also carries the root
    at = inter.cert.not_valid_before_utc + timedelta(minutes=5)
    issued = issue(mat, public("ECDSAP256"), NAMES, DAY, DAY, at)
    certs = x509.load_pem_x509_certificates(issued.chain_pem.encode())
    assert [c.subject for c in certs[1:]] == [inter.cert.subject]
    verify_server(issued.chain_pem, pki.ca("chain-root").cert, NAMES[0], at)


def test_chain_of_root_signer_is_the_leaf_only(root: CertificateAuthority) -> None:
    issued = issue(material(root), public("ECDSAP256"), NAMES, DAY, DAY, NOW)
    assert len(x509.load_pem_x509_certificates(issued.chain_pem.encode())) == 1


# validity -----------------------------------------------------------------------------


def test_not_before_is_backdated_two_minutes_truncated_to_seconds(
    root: CertificateAuthority,
) -> None:
    issued = issue(material(root), public("ECDSAP256"), NAMES, DAY, DAY, NOW)
    assert issued.not_before == (NOW - BACKDATE).replace(microsecond=0)
    assert issued.not_before.microsecond == 0


def test_status_times_are_read_back_from_the_encoded_leaf(root: CertificateAuthority) -> None:
    issued = issue(material(root), public("ECDSAP256"), NAMES, 7200, DAY, NOW)
    leaf = leaf_of(issued.chain_pem)
    assert (issued.not_before, issued.not_after) == (
        leaf.not_valid_before_utc,
        leaf.not_valid_after_utc,
    )


@pytest.mark.parametrize(
    ("max_seconds", "cap_seconds", "lifetime"),
    [
        (DAY, DAY, DAY),
        (3600, DAY, 3600),
        (DAY, 7200, 7200),
        (5000, 6000, 5000),
    ],
    ids=["24h", "request-shorter", "cap-shorter", "min-wins"],
)
def test_lifetime_is_min_of_request_and_cap_backdate_included(
    max_seconds: int, cap_seconds: int, lifetime: int
) -> None:
    nb, na, _ = validity(NOW, max_seconds, cap_seconds, NOW + timedelta(days=365))
    assert na - nb == timedelta(seconds=lifetime)


def test_not_after_is_capped_at_signing_cert_not_after() -> None:
    ca_end = NOW + timedelta(hours=5, seconds=30)
    _nb, na, _ = validity(NOW, DAY, DAY, ca_end)
    assert na == ca_end.replace(microsecond=0)


@pytest.mark.parametrize(
    "ca_left",
    [timedelta(hours=5, seconds=30), timedelta(hours=1, minutes=30), timedelta(hours=23)],
    ids=["5h", "90min", "23h"],
)
def test_refresh_is_half_the_effective_lifetime_when_the_signing_cert_ends_first(
    ca_left: timedelta,
) -> None:
    """Kubelet starts a refresh at beginRefreshAt (+ up to 5 min jitter) and warns
    CertificateOverdueForRefresh 10 min later; a new request may wait up to the 15 min
    the cleaner gives it. Half of a 24 h request lies past a capped notAfter, and the
    clamp to 10 min before it would leave none of that slack, and keep a rotated CA's
    certificates out until then: so half of the certificate's real life."""
    nb, na, refresh = validity(NOW, DAY, DAY, NOW + ca_left)
    assert na == (NOW + ca_left).replace(microsecond=0)
    assert refresh == nb + timedelta(seconds=int((na - nb).total_seconds()) // 2)


def test_refuses_when_signing_cert_leaves_under_one_hour() -> None:
    with pytest.raises(LifetimeTooShort, match="signing certificate expires"):
        validity(NOW, DAY, DAY, NOW + timedelta(minutes=50))


def test_exactly_one_hour_is_enough() -> None:
    nb, na, _ = validity(
        NOW, DAY, DAY, (NOW - BACKDATE).replace(microsecond=0) + timedelta(hours=1)
    )
    assert na - nb == timedelta(hours=1)


def test_issue_raises_lifetime_too_short_near_ca_expiry() -> None:
    authority = generate_ca("short ca", validity=timedelta(hours=2))
    late = authority.cert.not_valid_after_utc - timedelta(minutes=30)
    with pytest.raises(LifetimeTooShort):
        issue(material(authority), public("ECDSAP256"), NAMES, DAY, DAY, late)


@pytest.mark.parametrize(
    ("seconds", "refresh_after_nb"),
    [
        (DAY, timedelta(hours=12)),
        (3600, timedelta(minutes=30)),
        (3601, timedelta(seconds=1800)),
    ],
    ids=["24h-half", "1h-half", "odd-seconds-truncate"],
)
def test_begin_refresh_at_is_half_the_lifetime(seconds: int, refresh_after_nb: timedelta) -> None:
    nb, na, refresh = validity(NOW, seconds, DAY, NOW + timedelta(days=365))
    assert refresh - nb == refresh_after_nb
    assert nb + timedelta(minutes=10) <= refresh <= na - timedelta(minutes=10)
    assert refresh.microsecond == 0


def test_refresh_always_within_ten_minute_margins() -> None:
    for minutes in range(60, 60 * 25, 7):
        nb, na, refresh = validity(NOW, minutes * 60, DAY, NOW + timedelta(days=365))
        assert nb + timedelta(minutes=10) <= refresh <= na - timedelta(minutes=10)


def test_rsa_ca_signs_with_pkcs1v15_sha256() -> None:
    authority = pki.ca("digest-RSA2048", "RSA2048")
    at = authority.cert.not_valid_before_utc + timedelta(minutes=5)
    leaf = leaf_of(issue(material(authority), public("ED25519"), NAMES, DAY, DAY, at).chain_pem)
    assert isinstance(authority.key, rsa.RSAPrivateKey)
    assert leaf.signature_algorithm_oid == x509.SignatureAlgorithmOID.RSA_WITH_SHA256
