"""`explain` names the key type of each request (kubelet's spelling, ML-DSA included), in
text beside its creation time and as `keyType` in `-o json`; and an issued leaf's IP
SANs (`--cluster-ip-sans`) beside its DNS names."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest

from controlplane.kubelet import generate_key, stub_csr
from troubleshoot.explain import Outcome, RequestReport, request_key_type
from troubleshoot.render import request_json, request_lines

KUBELET_KEY_TYPES = (
    "RSA3072",
    "ECDSAP256",
    "ECDSAP384",
    "ECDSAP521",
    "ED25519",
    "MLDSA44",
    "MLDSA65",
    "MLDSA87",
)


@pytest.mark.parametrize("key_type", KUBELET_KEY_TYPES)
def test_the_key_type_is_read_from_the_stub_csr(key_type: str) -> None:
    stub = base64.b64encode(stub_csr(generate_key(key_type))).decode()
    assert request_key_type({"spec": {"stubPKCS10Request": stub}}) == key_type


def test_a_key_the_signer_would_deny_has_no_key_type() -> None:
    assert request_key_type({"spec": {"stubPKCS10Request": "bm90IGRlcg=="}}) is None
    assert request_key_type({"spec": {}}) is None


def test_the_key_type_is_printed_beside_the_creation_time_and_in_json() -> None:
    created = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)
    report = RequestReport(
        name="req-1",
        created=created,
        outcome=Outcome.ISSUE,
        summary="would be issued now",
        key_type="MLDSA65",
    )
    [line] = request_lines(report, created)
    assert line == (
        "  PodCertificateRequest req-1 (created 2026-12-04T16:00:00Z, 0s ago; key MLDSA65): "
        "would be issued now"
    )
    assert request_json(report)["keyType"] == "MLDSA65"


def test_an_issued_leafs_ip_sans_are_listed_after_its_dns_names() -> None:
    created = datetime(2026, 12, 4, 16, 0, tzinfo=UTC)
    report = RequestReport(
        name="req-1",
        created=created,
        outcome=Outcome.ISSUE,
        summary="Issued",
        dns_names=("web.shop.svc",),
        ip_addresses=("10.96.0.10",),
    )
    assert "    names: web.shop.svc, 10.96.0.10" in request_lines(report, created)
    assert request_json(report)["ipAddresses"] == ["10.96.0.10"]
