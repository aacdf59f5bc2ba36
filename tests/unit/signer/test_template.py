"""The DER template (`signer.template`) writes exactly the certificate the builder writes.

Property-based: for generated serials, validity times and DNS names, for every key type a
request may carry and every CA key type (and CAs with an unusual subject or no SKI), the
template's TBSCertificate is byte-identical to the builder's, its signature verifies under
the CA key, and for deterministic signature schemes (RSA PKCS#1 v1.5, Ed25519) the whole
PEM is identical. Inputs the template does not cover make it step aside (None), and
`issue` then uses the builder."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from signer import authority
from signer.policy import PublicKey
from signer.template import IPAddress, LeafTemplate
from tests.unit import pki
from tests.unit.signer.helpers import material
from trust import keys
from trust.ca import CertificateAuthority
from trust.keys import LeafKeyType

LEAF_TYPES: tuple[LeafKeyType, ...] = tuple(s.name for s in keys.KEYS)  # kubelet's nine, RSA2048
LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=63)
NAME = st.lists(LABEL, min_size=1, max_size=5).map(".".join)
NAMES = st.lists(NAME, min_size=1, max_size=12)
SERIAL = st.integers(min_value=1, max_value=2**159 - 1)
IPS = st.lists(st.ip_addresses(), max_size=4)
# Pod names (DNS subdomains), namespaces and UIDs; now and then a value outside
# PrintableString, which the subject then writes as UTF8String.
SUBJECT = st.none() | st.builds(
    authority.PodSubject,
    name=NAME,
    namespace=LABEL,
    uid=st.uuids().map(str) | st.text(min_size=1, max_size=20),
)
TIME = st.datetimes(
    min_value=datetime(1950, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(UTC)
).map(lambda t: t.replace(microsecond=0))


def odd_subject_ca() -> CertificateAuthority:
    """A root whose subject has several RDNs, a multi-valued RDN and PrintableString
    values, and no SKI (the AKI then comes from its public key)."""
    key = ec.generate_private_key(ec.SECP384R1())
    name = x509.Name(
        [
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE")]),
            x509.RelativeDistinguishedName(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Zeta"),
                    x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Alpha"),
                ]
            ),
            x509.RelativeDistinguishedName(
                [x509.NameAttribute(NameOID.COMMON_NAME, "odd ca", _ASN1Type.PrintableString)]
            ),
        ]
    )
    now = datetime.now(UTC).replace(microsecond=0)
    cert = pki.hand_made_ca(key, name, now, serial=99, hash_algorithm=hashes.SHA384())
    return CertificateAuthority(key=key, cert=cert)


@functools.cache
def signing(kind: str) -> CertificateAuthority:
    if kind == "odd":
        return odd_subject_ca()
    if kind == "intermediate":
        return pki.intermediate()
    return pki.ca("template", kind)


CA_KINDS = ("ECDSAP256", "ECDSAP384", "ECDSAP521", "RSA2048", "ED25519", "intermediate", "odd")


def public(key_type: LeafKeyType) -> PublicKey:
    return pki.leaf_key(key_type).public_key()


def builder_leaf(
    ca: CertificateAuthority,
    key: PublicKey,
    serial: int,
    not_before: datetime,
    not_after: datetime,
    names: Sequence[str],
    ips: Sequence[IPAddress] = (),
    subject: authority.PodSubject | None = None,
) -> x509.Certificate:
    rsa_leaf = isinstance(key, rsa.RSAPublicKey)
    name = subject.x509_name() if subject else None
    return authority._build(
        ca.cert, ca.key, rsa_leaf, key, serial, not_before, not_after, names, ips, name
    )


def template_of(ca: CertificateAuthority, key: PublicKey) -> LeafTemplate:
    rsa_leaf = isinstance(key, rsa.RSAPublicKey)
    template = authority._template(ca.cert, ca.key, rsa_leaf)
    assert template is not None, "the template reproduces the builder for this CA"
    return template


@pytest.mark.parametrize("ca_kind", CA_KINDS)
@settings(max_examples=40, deadline=None)
@given(
    leaf_type=st.sampled_from(LEAF_TYPES),
    serial=SERIAL,
    not_before=TIME,
    lifetime=st.integers(min_value=0, max_value=400 * 86400),
    names=NAMES,
    ips=IPS,
    subject=SUBJECT,
)
def test_template_leaf_is_the_builder_leaf(
    ca_kind: str,
    leaf_type: LeafKeyType,
    serial: int,
    not_before: datetime,
    lifetime: int,
    names: list[str],
    ips: list[IPAddress],
    subject: authority.PodSubject | None,
) -> None:
    ca = signing(ca_kind)
    key = public(leaf_type)
    not_after = min(not_before + timedelta(seconds=lifetime), datetime(9999, 1, 1, tzinfo=UTC))
    built = builder_leaf(ca, key, serial, not_before, not_after, names, ips, subject)
    template = template_of(ca, key)
    der = subject.x509_name().public_bytes() if subject else None

    spliced = template.tbs(key, serial, not_before, not_after, names, ips, der)
    assert spliced == built.tbs_certificate_bytes
    pem = template.pem(key, serial, not_before, not_after, names, ips, der)
    assert pem is not None
    leaf = x509.load_pem_x509_certificate(pem)
    assert leaf.tbs_certificate_bytes == built.tbs_certificate_bytes
    assert leaf.signature_algorithm_oid == built.signature_algorithm_oid
    leaf.verify_directly_issued_by(ca.cert)
    if isinstance(ca.key, rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
        # Deterministic signatures: the very same bytes (ECDSA's are randomised).
        assert pem == built.public_bytes(serialization.Encoding.PEM)


@pytest.mark.parametrize("ca_kind", CA_KINDS)
@pytest.mark.parametrize("leaf_type", LEAF_TYPES)
def test_issue_output_parses_like_the_builders(ca_kind: str, leaf_type: LeafKeyType) -> None:
    """`issue` (template path) against `_build` for the same inputs, field by field."""
    ca = signing(ca_kind)
    key = public(leaf_type)
    signing_material = material(ca)
    now = ca.cert.not_valid_before_utc + timedelta(hours=1)
    names = ["web.ns.svc", "web.ns.svc.cluster.local"]
    issued = authority.issue(signing_material, key, names, 86400, 86400 * 365, now, serial=12345)
    leaf = x509.load_pem_x509_certificates(issued.chain_pem.encode())[0]
    built = builder_leaf(ca, key, 12345, issued.not_before, issued.not_after, names)
    assert leaf.tbs_certificate_bytes == built.tbs_certificate_bytes
    leaf.verify_directly_issued_by(ca.cert)


def test_inputs_the_template_does_not_cover_step_aside() -> None:
    ca = signing("ECDSAP256")
    key = public("ECDSAP256")
    template = template_of(ca, key)
    t = datetime(2030, 1, 1, tzinfo=UTC)
    assert template.tbs(key, 1, t.replace(microsecond=5), t, ["a"]) is None
    assert template.tbs(key, 1, datetime(1949, 12, 31, tzinfo=UTC), t, ["a"]) is None
    assert template.tbs(key, 1, t, t, ["bücher.example"]) is None
    assert template.tbs(key, 0, t, t, ["a"]) is None


def test_issue_uses_the_builder_when_the_template_steps_aside() -> None:
    """A non-ASCII name: the builder's own answer (it refuses it), as before."""
    ca = signing("ECDSAP256")
    signing_material = material(ca)
    now = ca.cert.not_valid_before_utc + timedelta(hours=1)
    with pytest.raises(ValueError, match="A-label"):
        authority.issue(signing_material, public("ECDSAP256"), ["bücher.example"], 3600, 3600, now)


def test_a_template_that_cannot_reproduce_the_reference_is_not_used() -> None:
    """The self-check at `learn`: a profile with something after the SKI (not spliced)."""
    ca = signing("ECDSAP256")

    def reference(
        key: PublicKey,
        serial: int,
        nb: datetime,
        na: datetime,
        names: Sequence[str],
        ips: Sequence[IPAddress],
        subject: x509.Name | None,
    ) -> x509.Certificate:
        builder = (
            authority._base_builder(ca.cert, False)
            .subject_name(x509.Name([]))
            .public_key(key)
            .serial_number(serial)
            .not_valid_before(nb)
            .not_valid_after(na)
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=True
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key), critical=False)
            .add_extension(x509.OCSPNoCheck(), critical=False)
        )
        return builder.sign(ca.key, hashes.SHA256())

    assert LeafTemplate.learn(reference, ca.key) is None
