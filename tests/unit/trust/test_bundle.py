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

from tests.unit import pki
from trust.bundle import (
    MAX_TRUST_BUNDLE_SIZE,
    BundleError,
    bundle_name,
    decode_pem,
    earliest_expiry,
    encode_pem,
    normalize_bundle,
    parse_anchors,
)
from trust.ca import cert_pem, key_pem

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
    from trust.ca import generate_ca
    from trust.keys import generate_key

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


def test_a_fingerprint_is_what_fingerprint_gives_and_nothing_else() -> None:
    from trust.bundle import fingerprint, is_fingerprint

    assert is_fingerprint(fingerprint(b"any DER"))
    for text in ("", "A" * 64, "a" * 63, "a" * 65, "sha256:" + "a" * 64, "g" * 64, "a" * 64 + "\n"):
        assert not is_fingerprint(text), text
