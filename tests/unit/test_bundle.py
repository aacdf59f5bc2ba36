"""Trust-bundle normalisation, naming and KEP-6283 selector resolution."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import given, settings
from hypothesis import strategies as st

from signer.ca import cert_pem, key_pem
from tests.unit import pki
from trust.bundle import (
    MAX_TRUST_BUNDLE_SIZE,
    BundleError,
    SelectorError,
    bundle_name,
    decode_pem,
    earliest_expiry,
    encode_pem,
    normalize_bundle,
    parse_anchors,
    resolve_selector,
)

NAMES = ["a", "b", "c", "d"]


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode()


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(Encoding.DER)


def roots() -> list[x509.Certificate]:
    return [pki.ca(n).cert for n in NAMES]


# normalize_bundle -------------------------------------------------------------------


def test_normalize_sorts_by_der_and_reencodes_headerless() -> None:
    certs = roots()
    out = normalize_bundle("".join(pem(c) for c in reversed(certs)))
    assert out == "".join(encode_pem(d) for d in sorted(der(c) for c in certs))
    assert [der(c) for c in parse_anchors(out)] == sorted(der(c) for c in certs)


def test_encode_pem_matches_cryptography_encoding() -> None:
    cert = pki.ca("a").cert
    assert encode_pem(der(cert)) == pem(cert)


def test_normalize_drops_duplicates_headers_and_inter_block_text() -> None:
    a, b = pki.ca("a").cert, pki.ca("b").cert
    body = pem(a).split("\n", 1)[1]
    with_headers = "-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\nX-Note: hi\n\n" + body
    messy = f"# root a\n{pem(a)}\nsome text between\n{with_headers}junk\r\n{pem(b)}\ntrailer"
    assert normalize_bundle(messy) == normalize_bundle(pem(a) + pem(b))


def test_normalize_accepts_crlf_line_endings() -> None:
    a = pki.ca("a").cert
    assert normalize_bundle(pem(a).replace("\n", "\r\n")) == pem(a)


def test_normalize_accepts_bytes() -> None:
    a = pki.ca("a").cert
    assert normalize_bundle(pem(a).encode()) == pem(a)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "no certificates"),
        ("just some text\n", "no certificates"),
        ("-----BEGIN CERTIFICATE-----\nMIIB\n", "PEM block 0 (CERTIFICATE) has no '-----END"),
        (
            "-----BEGIN CERTIFICATE-----\n!!notbase64!!\n-----END CERTIFICATE-----\n",
            "PEM block 0 has invalid base64",
        ),
        (
            "-----BEGIN CERTIFICATE-----\n"
            + base64.b64encode(b"not a certificate").decode()
            + "\n-----END CERTIFICATE-----\n",
            "PEM block 0 does not parse as an X.509 certificate",
        ),
    ],
    ids=["empty", "text-only", "truncated", "bad-base64", "not-x509"],
)
def test_normalize_rejects_unusable_input(text: str, fragment: str) -> None:
    with pytest.raises(BundleError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        normalize_bundle(text)


def test_normalize_rejects_non_certificate_block_naming_its_index() -> None:
    text = pem(pki.ca("a").cert) + key_pem(pki.ca("a").key).decode()
    with pytest.raises(BundleError, match=r"PEM block 1 is a 'PRIVATE KEY' block"):
        normalize_bundle(text)


def test_normalize_rejects_end_entity_certificate_naming_its_index() -> None:
    text = pem(pki.ca("a").cert) + pem(pki.ca("b").cert) + pem(pki.non_ca_cert())
    with pytest.raises(BundleError, match=r"certificate 2 .*is not a CA"):
        normalize_bundle(text)


def test_normalize_rejects_certificate_without_basic_constraints() -> None:
    with pytest.raises(BundleError, match=r"certificate 0 .*no basicConstraints"):
        normalize_bundle(pem(pki.no_basic_constraints_cert()))


def test_normalize_rejects_bundle_over_one_mebibyte() -> None:
    # Distinct CA certs are needed to defeat de-duplication; size the count from one cert.
    one = len(pem(pki.ca("a").cert))
    count = MAX_TRUST_BUNDLE_SIZE // one + 1
    from signer.ca import generate_ca, generate_key

    key = generate_key("ED25519")
    text = "".join(pem(generate_ca(f"bulk {i:05d}" + "x" * 40, key=key).cert) for i in range(count))
    with pytest.raises(BundleError, match="at most 1048576"):
        normalize_bundle(text)


def test_decode_pem_returns_headers_and_types() -> None:
    text = "-----BEGIN FOO-----\nA: b\n\nAAAA\n-----END FOO-----\n"
    [block] = decode_pem(text)
    assert (block.type, dict(block.headers), block.der) == ("FOO", {"A": "b"}, b"\0\0\0")


# properties ---------------------------------------------------------------------------

SEPARATORS = st.sampled_from(["", "\n", "\n\n", "# comment\n", "garbage text\n", "\r\n"])


@st.composite
def bundle_texts(draw: st.DrawFn) -> tuple[str, list[x509.Certificate]]:
    certs = draw(st.lists(st.sampled_from(roots()), min_size=1, max_size=8))
    parts = []
    for cert in certs:
        parts.append(draw(SEPARATORS))
        text = pem(cert)
        if draw(st.booleans()):
            head, body = text.split("\n", 1)
            text = f"{head}\nComment: {draw(st.text('abc ', max_size=8))}\n\n{body}"
        parts.append(text)
    parts.append(draw(SEPARATORS))
    return "".join(parts), certs


@settings(max_examples=60, deadline=None)
@given(bundle_texts())
def test_normalize_is_idempotent(case: tuple[str, list[x509.Certificate]]) -> None:
    once = normalize_bundle(case[0])
    assert normalize_bundle(once) == once


@settings(max_examples=60, deadline=None)
@given(bundle_texts(), st.randoms(use_true_random=False))
def test_normalize_is_order_independent(case: tuple[str, list[x509.Certificate]], rnd: Any) -> None:
    certs = list(case[1])
    shuffled = certs[:]
    rnd.shuffle(shuffled)
    assert normalize_bundle(case[0]) == normalize_bundle("".join(pem(c) for c in shuffled))


@settings(max_examples=60, deadline=None)
@given(bundle_texts())
def test_normalize_keeps_each_distinct_certificate_once(
    case: tuple[str, list[x509.Certificate]],
) -> None:
    anchors = parse_anchors(normalize_bundle(case[0]))
    assert sorted(der(c) for c in anchors) == sorted({der(c) for c in case[1]})


# naming and expiry ------------------------------------------------------------------


def test_bundle_name_is_signer_with_colons_and_24_hex_of_sha256() -> None:
    normalized = normalize_bundle(pem(pki.ca("a").cert))
    digest = hashlib.sha256(normalized.encode()).hexdigest()[:24]
    assert bundle_name("kubernetes.io/service-serving", normalized) == (
        f"kubernetes.io:service-serving:{digest}"
    )


def test_bundle_name_changes_with_content() -> None:
    one = normalize_bundle(pem(pki.ca("a").cert))
    two = normalize_bundle(pem(pki.ca("a").cert) + pem(pki.ca("b").cert))
    assert bundle_name("example.com/serving", one) != bundle_name("example.com/serving", two)


def test_earliest_expiry_is_the_minimum_not_after() -> None:
    normalized = normalize_bundle(cert_pem(*roots()))
    assert earliest_expiry(normalized) == min(c.not_valid_after_utc for c in roots())


# resolve_selector -------------------------------------------------------------------

SIGNER = "kubernetes.io/service-serving"


def ctb(name: str, signer: str, certs: list[str], labels: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"signerName": signer, "trustBundle": "".join(pem(pki.ca(c).cert) for c in certs)},
    }


BUNDLES = [
    ctb("kubernetes.io:service-serving:1", SIGNER, ["a", "b"], {"env": "prod", "tier": "x"}),
    ctb("kubernetes.io:service-serving:2", SIGNER, ["b", "c"], {"env": "dev"}),
    ctb("kubernetes.io:service-serving:3", SIGNER, ["c"], {}),
    ctb("example.com:other:1", "example.com/other", ["d"], {"env": "prod"}),
]


def anchors_of(text: str) -> set[str]:
    return {c.subject.rfc4514_string().removeprefix("CN=test ") for c in parse_anchors(text)}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"name": "kubernetes.io:service-serving:2"}, {"b", "c"}),
        ({"name": "example.com:other:1"}, {"d"}),
        ({"signerName": SIGNER, "labelSelector": {}}, {"a", "b", "c"}),
        ({"signerName": SIGNER, "labelSelector": {"matchLabels": {"env": "prod"}}}, {"a", "b"}),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
            },
            {"a", "b", "c"},
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]},
            },
            {"c"},
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {
                    "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]
                },
            },
            {"b", "c"},
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {
                    "matchLabels": {"tier": "x"},
                    "matchExpressions": [
                        {"key": "env", "operator": "In", "values": ["prod", "dev"]}
                    ],
                },
            },
            {"a", "b"},
        ),
        ({"signerName": "example.com/other", "labelSelector": {}}, {"d"}),
    ],
    ids=[
        "by-name",
        "by-name-other-signer",
        "empty-selector-matches-all-of-signer",
        "match-labels",
        "exists",
        "does-not-exist",
        "not-in-includes-unlabelled",
        "labels-and-expressions",
        "other-signer",
    ],
)
def test_resolve_selector_unifies_matching_bundles(
    selector: dict[str, Any], expected: set[str]
) -> None:
    assert anchors_of(resolve_selector(BUNDLES, selector)) == expected


def test_resolve_selector_output_is_normalised() -> None:
    out = resolve_selector(BUNDLES, {"signerName": SIGNER, "labelSelector": {}})
    assert out == normalize_bundle(out)


@pytest.mark.parametrize(
    "selector",
    [
        None,
        {"signerName": SIGNER},
        {"signerName": SIGNER, "labelSelector": None},
        {"signerName": SIGNER, "labelSelector": {"matchLabels": {"env": "none"}}},
        {"name": "missing"},
        {"signerName": "example.com/nobody", "labelSelector": {}},
    ],
    ids=[
        "nil-selector",
        "nil-label-selector",
        "null-label-selector",
        "no-match",
        "no-name",
        "no-signer",
    ],
)
def test_resolve_selector_matching_nothing(selector: dict[str, Any] | None) -> None:
    assert resolve_selector(BUNDLES, selector, allow_missing=True) == ""
    with pytest.raises(SelectorError, match="matched zero"):
        resolve_selector(BUNDLES, selector)


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        ({"name": "x", "signerName": SIGNER}, "not both"),
        ({}, "must set name or signerName"),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
            },
            "unknown operator",
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
            },
            "needs values",
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
                },
            },
            "takes no values",
        ),
    ],
    ids=["name-and-signer", "empty", "bad-operator", "in-without-values", "exists-with-values"],
)
def test_resolve_selector_rejects_malformed_selectors(
    selector: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(SelectorError, match=fragment):
        resolve_selector(BUNDLES, selector)
