"""Annotation policy, SAN order and the public-key step (docs/reference.md §5.2 steps 1-2,
§5.3)."""

from __future__ import annotations

import base64
import re

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import AttributeOID, NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from signer.policy import (
    ADD_POD_FQDN,
    INVALID_ANNOTATIONS,
    INVALID_PKIX,
    INVALID_STUB,
    REASON_PATTERN,
    SERVICE_NAMES,
    UNSUPPORTED_KEY,
    Denial,
    NameRequest,
    decide_names,
    key_type_of,
    public_key_from_request,
    sans_for,
    suggested_service_name,
)
from tests.unit import pki
from trust import keys
from trust.keys import LeafKeyType, LeafPrivateKey

# annotations: accepted forms -----------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({SERVICE_NAMES: "web"}, NameRequest(("web",), False)),
        ({SERVICE_NAMES: "web,api"}, NameRequest(("web", "api"), False)),
        ({SERVICE_NAMES: " web , api "}, NameRequest(("web", "api"), False)),
        ({SERVICE_NAMES: "web,\tapi"}, NameRequest(("web", "api"), False)),
        ({SERVICE_NAMES: "api,web,api,web"}, NameRequest(("api", "web"), False)),
        ({SERVICE_NAMES: "a"}, NameRequest(("a",), False)),
        ({SERVICE_NAMES: "a-1"}, NameRequest(("a-1",), False)),
        ({SERVICE_NAMES: "1api"}, NameRequest(("1api",), False)),
        ({SERVICE_NAMES: "0"}, NameRequest(("0",), False)),
        ({SERVICE_NAMES: "123"}, NameRequest(("123",), False)),
        ({SERVICE_NAMES: "9-to-5,web"}, NameRequest(("9-to-5", "web"), False)),
        ({SERVICE_NAMES: "a" * 63}, NameRequest(("a" * 63,), False)),
        ({SERVICE_NAMES: ",".join(f"s{i}" for i in range(32))}, None),
        ({SERVICE_NAMES: ",".join(["s1"] * 40)}, NameRequest(("s1",), False)),
        ({ADD_POD_FQDN: "true"}, NameRequest((), True)),
        ({ADD_POD_FQDN: "true", SERVICE_NAMES: "web"}, NameRequest(("web",), True)),
    ],
    ids=[
        "one",
        "two",
        "spaces",
        "tab",
        "duplicates-collapse-in-first-order",
        "single-letter",
        "dash-digit",
        "leading-digit-dns1123",
        "single-digit",
        "all-digits",
        "leading-digit-and-dash",
        "63-chars",
        "32-names",
        "40-duplicates-are-one",
        "pod-fqdn-only",
        "both",
    ],
)
def test_accepts_annotation_form(annotations: dict[str, str], expected: NameRequest | None) -> None:
    result = decide_names(annotations)
    assert isinstance(result, NameRequest), result
    if expected is not None:
        assert result == expected
    else:
        assert len(result.service_names) == 32


# annotations: rejected forms -----------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "fragments"),
    [
        ({}, ["at least one of", SERVICE_NAMES, ADD_POD_FQDN]),
        (None, ["at least one of"]),
        ({"example.com/other": "x"}, ["'example.com/other'", SERVICE_NAMES, ADD_POD_FQDN]),
        ({SERVICE_NAMES: "web", "kubernetes.io/add-pod-ip": "true"}, ["add-pod-ip"]),
        ({ADD_POD_FQDN: "True"}, ['exactly "true"', "'True'"]),
        ({ADD_POD_FQDN: "yes"}, ['exactly "true"']),
        ({ADD_POD_FQDN: ""}, ['exactly "true"']),
        ({ADD_POD_FQDN: " true"}, ['exactly "true"']),
        ({SERVICE_NAMES: ""}, ["entry 1", "is empty"]),
        ({SERVICE_NAMES: "web,,api"}, ["entry 2", "is empty"]),
        ({SERVICE_NAMES: "web,"}, ["entry 2", "is empty"]),
        ({SERVICE_NAMES: " "}, ["is empty"]),
        ({SERVICE_NAMES: "other/web"}, ["'other/web'", "namespace", "'web'"]),
        ({SERVICE_NAMES: "web.ns.svc"}, ["'web.ns.svc'", "dot", "'web'"]),
        ({SERVICE_NAMES: "web.ns.svc.cluster.local"}, ["dot", "'web'"]),
        ({SERVICE_NAMES: "Web"}, ["'Web'", "uppercase", "'web'"]),
        ({SERVICE_NAMES: "a" * 64}, ["64 characters", "at most 63"]),
        ({SERVICE_NAMES: "1web-"}, ["'1web-'", "DNS-1123"]),
        ({SERVICE_NAMES: "web-"}, ["'web-'", "DNS-1123"]),
        ({SERVICE_NAMES: "-web"}, ["DNS-1123"]),
        ({SERVICE_NAMES: "we_b"}, ["DNS-1123"]),
        ({SERVICE_NAMES: "web api"}, ["'web api'", "DNS-1123"]),
        ({SERVICE_NAMES: "*"}, ["DNS-1123"]),
        ({SERVICE_NAMES: "1API"}, ["uppercase", "'1api'"]),
        ({SERVICE_NAMES: "10.0.0.1"}, ["dot"]),
        ({SERVICE_NAMES: ",".join(f"s{i}" for i in range(33))}, ["33 Services", "at most 32"]),
        ({ADD_POD_FQDN: "true", SERVICE_NAMES: "Bad"}, ["uppercase"]),
    ],
    ids=[
        "none",
        "nil",
        "unknown-key",
        "unknown-key-next-to-known",
        "fqdn-True",
        "fqdn-yes",
        "fqdn-empty",
        "fqdn-space",
        "names-empty",
        "names-empty-middle",
        "names-trailing-comma",
        "names-blank",
        "names-namespaced",
        "names-dotted",
        "names-fqdn",
        "names-uppercase",
        "names-64-chars",
        "names-leading-digit-trailing-dash",
        "names-trailing-dash",
        "names-leading-dash",
        "names-underscore",
        "names-inner-space",
        "names-wildcard",
        "names-uppercase-leading-digit",
        "names-ip",
        "names-33",
        "bad-name-with-fqdn",
    ],
)
def test_denies_annotation_form(annotations: dict[str, str] | None, fragments: list[str]) -> None:
    result = decide_names(annotations)
    assert isinstance(result, Denial), result
    assert result.reason == INVALID_ANNOTATIONS
    for fragment in fragments:
        assert fragment in result.message


def test_denial_messages_truncate_long_values() -> None:
    result = decide_names({ADD_POD_FQDN: "x" * 10_000})
    assert isinstance(result, Denial)
    assert len(result.message) < 300


def test_denial_rejects_reason_outside_condition_grammar() -> None:
    with pytest.raises(ValueError, match="invalid condition reason"):
        Denial("Bad Reason", "x")


# annotations: grammar properties -----------------------------------------------------

LABELS = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
SPACES = st.sampled_from(["", " ", "  ", "\t"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(SPACES, LABELS, SPACES), min_size=1, max_size=40))
def test_any_list_of_dns1123_labels_is_accepted_as_unique_names_in_order(
    entries: list[tuple[str, str, str]],
) -> None:
    value = ",".join(f"{a}{name}{b}" for a, name, b in entries)
    names = [name for _, name, _ in entries]
    unique = list(dict.fromkeys(names))
    result = decide_names({SERVICE_NAMES: value})
    if len(unique) > 32:
        assert isinstance(result, Denial)
        assert "at most 32" in result.message
    else:
        assert result == NameRequest(tuple(unique), False)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_any_service_names_value_is_accepted_only_if_every_entry_is_a_label(value: str) -> None:
    result = decide_names({SERVICE_NAMES: value})
    label = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")  # DNS-1123 label
    entries = [e.strip(" \t") for e in value.split(",")]
    valid = all(len(e) <= 63 and label.fullmatch(e) for e in entries)
    assert isinstance(result, NameRequest) == (valid and len(set(entries)) <= 32)
    if isinstance(result, Denial):
        assert REASON_PATTERN.fullmatch(result.reason)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=10), min_size=1))
def test_any_unrecognised_key_is_denied(annotations: dict[str, str]) -> None:
    result = decide_names(annotations)
    if set(annotations) - {SERVICE_NAMES, ADD_POD_FQDN}:
        assert isinstance(result, Denial)
        assert result.reason == INVALID_ANNOTATIONS


# SANs ---------------------------------------------------------------------------------


def test_sans_follow_spec_order_services_then_pod_fqdn() -> None:
    assert sans_for("ns", "cluster.local", ("web", "api"), ("web-0", "db")) == [
        "web.ns.svc.cluster.local",
        "web.ns.svc",
        "api.ns.svc.cluster.local",
        "api.ns.svc",
        "web-0.db.ns.svc.cluster.local",
        "web-0.db.ns.svc",
    ]


def test_sans_are_de_duplicated() -> None:
    assert sans_for("ns", "example.org", ["web", "web"], None) == [
        "web.ns.svc.example.org",
        "web.ns.svc",
    ]


def test_sans_for_pod_fqdn_only() -> None:
    assert sans_for("ns", "cluster.local", (), ("h", "s")) == [
        "h.s.ns.svc.cluster.local",
        "h.s.ns.svc",
    ]


# public key ---------------------------------------------------------------------------

CLASSICAL: list[LeafKeyType] = [
    "RSA3072",
    "RSA4096",
    "ECDSAP256",
    "ECDSAP384",
    "ECDSAP521",
    "ED25519",
]
MLDSA_KEY_TYPES = keys.gated_key_types(keys.MLDSA_GATE)
SUPPORTED: list[LeafKeyType] = [*CLASSICAL, *MLDSA_KEY_TYPES]


def stub_csr(
    key: LeafPrivateKey | dsa.DSAPrivateKey | ed448.Ed448PrivateKey | ec.EllipticCurvePrivateKey,
    *,
    subject: x509.Name | None = None,
    extension: bool = False,
    attribute: bool = False,
) -> bytes:
    builder = x509.CertificateSigningRequestBuilder().subject_name(subject or x509.Name([]))
    if extension:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("evil.example")]), critical=False
        )
    if attribute:
        builder = builder.add_attribute(AttributeOID.CHALLENGE_PASSWORD, b"secret")
    prehashed = isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | dsa.DSAPrivateKey)
    algorithm = hashes.SHA256() if prehashed else None  # EdDSA and ML-DSA sign the message
    return builder.sign(key, algorithm).public_bytes(Encoding.DER)


def spki(key: LeafPrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)


@pytest.mark.parametrize("key_type", SUPPORTED)
def test_accepts_supported_key_from_stub_csr_bytes_and_base64(key_type: LeafKeyType) -> None:
    key = pki.leaf_key(key_type)
    der = stub_csr(key)
    for value in (der, base64.b64encode(der).decode()):
        got = public_key_from_request(value, None)
        assert not isinstance(got, Denial), got
        assert got.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo) == spki(key)


@pytest.mark.parametrize("key_type", CLASSICAL)
def test_accepts_supported_key_from_legacy_pkix_public_key(key_type: LeafKeyType) -> None:
    key = pki.leaf_key(key_type)
    got = public_key_from_request(None, base64.b64encode(spki(key)).decode())
    assert not isinstance(got, Denial), got
    assert got.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo) == spki(key)


@pytest.mark.parametrize("key_type", MLDSA_KEY_TYPES)
def test_denies_an_mldsa_key_in_legacy_pkix_public_key(key_type: LeafKeyType) -> None:
    """No kube-apiserver verifies an ML-DSA `proofOfPossession` (1.38 refuses the key
    there), so the signer must not be the first to certify one."""
    got = public_key_from_request(None, spki(pki.leaf_key(key_type)))
    assert isinstance(got, Denial)
    assert got.reason == UNSUPPORTED_KEY
    assert "stubPKCS10Request" in got.message


@pytest.mark.parametrize("key_type", SUPPORTED)
def test_key_type_is_named_in_kubelet_spelling(key_type: LeafKeyType) -> None:
    assert key_type_of(pki.leaf_key(key_type).public_key()) == key_type


def test_stub_csr_wins_over_pkix_public_key() -> None:
    stub_key, pkix_key = pki.leaf_key("ECDSAP256"), pki.leaf_key("ED25519")
    got = public_key_from_request(stub_csr(stub_key), spki(pkix_key))
    assert not isinstance(got, Denial)
    assert got.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo) == spki(stub_key)


@pytest.mark.parametrize(
    ("make_key", "fragment"),
    [
        (lambda: pki.leaf_key("RSA2048"), "RSA-2048"),
        (lambda: ec.generate_private_key(ec.SECP224R1()), "secp224r1"),
        (lambda: ec.generate_private_key(ec.SECP256K1()), "secp256k1"),
        (lambda: ed448.Ed448PrivateKey.generate(), "Ed448"),
        (lambda: dsa.generate_private_key(2048), "DSA"),
    ],
    ids=["rsa-2048", "p-224", "secp256k1", "ed448", "dsa"],
)
def test_denies_unsupported_key_type_suggesting_ecdsap256(make_key: object, fragment: str) -> None:
    key = make_key()  # type: ignore[operator]
    for got in (
        public_key_from_request(stub_csr(key), None),
        public_key_from_request(
            None, key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        ),
    ):
        assert isinstance(got, Denial), got
        assert got.reason == UNSUPPORTED_KEY
        assert fragment in got.message
        assert "ECDSAP256" in got.message


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"subject": x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])}, "subject"),
        ({"extension": True}, "extensions"),
        ({"attribute": True}, "attributes"),
    ],
    ids=["subject", "extensions", "attributes"],
)
def test_denies_non_empty_stub_csr(kwargs: dict[str, object], fragment: str) -> None:
    got = public_key_from_request(stub_csr(pki.leaf_key("ECDSAP256"), **kwargs), None)  # type: ignore[arg-type]
    assert isinstance(got, Denial)
    assert (got.reason, fragment in got.message) == (INVALID_STUB, True)


def test_does_not_reverify_stub_csr_signature() -> None:
    """kube-apiserver refuses a stub whose signature does not verify and the spec is
    immutable, so no stored request can carry one; the signer does not repeat the check
    (it cost up to ~570 µs per request). A corrupted signature therefore still yields the
    key — this pins that the check is gone, not that such a request can reach us."""
    key = pki.leaf_key("ECDSAP256")
    der = bytearray(stub_csr(key))
    der[-3] ^= 0xFF
    assert not x509.load_der_x509_csr(bytes(der)).is_signature_valid
    got = public_key_from_request(bytes(der), None)
    assert not isinstance(got, Denial), got
    assert got.public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("stub", "pkix", "reason"),
    [
        ("!!!", None, INVALID_STUB),
        (b"not der", None, INVALID_STUB),
        (None, None, INVALID_STUB),
        (None, "!!!", INVALID_PKIX),
        (None, b"not der", INVALID_PKIX),
    ],
    ids=["stub-bad-base64", "stub-garbage", "neither", "pkix-bad-base64", "pkix-garbage"],
)
def test_denies_unparsable_key_material(
    stub: bytes | str | None, pkix: bytes | str | None, reason: str
) -> None:
    got = public_key_from_request(stub, pkix)
    assert isinstance(got, Denial)
    assert got.reason == reason


@pytest.mark.parametrize(
    ("entry", "suggested"),
    [
        ("Shop/Web", "web"),
        ("shop/web", "web"),
        ("Web.shop.svc", "web"),
        ("Web_Bad", "web-bad"),
        ("1api_v2", "api-v2"),
    ],
)
def test_a_denied_service_name_is_told_a_value_that_would_pass(entry: str, suggested: str) -> None:
    denial = decide_names({SERVICE_NAMES: entry})
    assert isinstance(denial, Denial)
    assert f"'{suggested}'" in denial.message
    assert decide_names({SERVICE_NAMES: suggested}) == NameRequest((suggested,), False)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_every_suggested_service_name_is_accepted(entry: str) -> None:
    suggested = suggested_service_name(entry)
    if suggested is not None:
        assert decide_names({SERVICE_NAMES: suggested}) == NameRequest((suggested,), False)
