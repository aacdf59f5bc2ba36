"""The managed CA's Secret: encoded and decoded without loss, and served by the API
material source only once confirmed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from kube.client import Client
from managedca import decide as d
from managedca.codec import PHASE, StoreError, ca_info, decode, encode
from managedca.material import CONFIRMED_AT, ApiMaterialSource, pem_fingerprints
from signer.authority import issue_probe
from trust.ca import cert_pem, generate_ca, key_pem

NOW = datetime.now(UTC).replace(microsecond=0)


def _ca(name: str) -> tuple[bytes, bytes]:
    ca = generate_ca(name, validity=timedelta(days=30))
    return key_pem(ca.key), cert_pem(ca.cert)


A_KEY, A = _ca("a")
B_KEY, B = _ca("b")
C_KEY, C = _ca("c")


def _secret(state: d.State, next_key: bytes | None = None, rv: str = "1") -> dict[str, Any]:
    certs = {ca_info(p).fingerprint: p for p in (A, B, C)}
    body = encode("ns", "ca", state, certs, A_KEY, next_key)
    body["metadata"]["resourceVersion"] = rv
    return body


def test_a_staged_state_with_a_previous_root_round_trips() -> None:
    state = d.State(
        current=ca_info(A),
        confirmed_at=NOW,
        next=ca_info(B),
        staged_at=NOW,
        published_at=NOW + timedelta(seconds=3),
        swap_not_before=NOW + timedelta(minutes=10),
        previous=(d.Previous(ca_info(C), NOW - timedelta(days=1), NOW + timedelta(hours=2)),),
        swapped_at=NOW - timedelta(days=1),
    )
    secret = _secret(state, B_KEY)
    stored = decode(secret)
    assert stored.state == state
    assert stored.current_key == A_KEY and stored.next_key == B_KEY
    assert secret["metadata"]["annotations"][PHASE] == "Staged"
    assert "PRIVATE KEY" not in repr(stored)


def test_other_annotations_survive_a_write_and_ours_are_replaced() -> None:
    state = d.State(current=ca_info(A))
    existing = {"annotations": {"team": "x", CONFIRMED_AT: "2020-01-01T00:00:00Z"}}
    body = encode("ns", "ca", state, {state.current.fingerprint: A}, A_KEY, None, "7", existing)
    assert body["metadata"]["annotations"]["team"] == "x"
    assert CONFIRMED_AT not in body["metadata"]["annotations"]
    assert body["metadata"]["resourceVersion"] == "7"


def test_a_secret_edited_into_nonsense_is_one_line_without_key_bytes() -> None:
    secret = _secret(d.State(current=ca_info(A)))
    secret["data"]["ca.crt"] = "bm9wZQ=="
    with pytest.raises(StoreError) as err:
        decode(secret)
    assert "\n" not in str(err.value) and "PRIVATE" not in str(err.value)


def _source() -> ApiMaterialSource:
    return ApiMaterialSource(cast(Client, object()), "ns", "ca", issuer=issue_probe)


def test_an_unconfirmed_ca_is_published_but_not_signed_with() -> None:
    source = _source()
    source.apply(_secret(d.State(current=ca_info(A)), rv="5"))
    assert source.has_bundle() and not source.has_signing_set()
    assert pem_fingerprints(source.trust_bundle().pem) == pem_fingerprints(A)
    with pytest.raises(RuntimeError, match="no confirmed managed CA"):
        source.current()
    source.apply(_secret(d.State(current=ca_info(A), confirmed_at=NOW), rv="6"))
    assert source.current().signing_fingerprint == ca_info(A).fingerprint
    assert source.loaded().anchors == tuple(pem_fingerprints(A))
    assert source.loaded().signing == ca_info(A).fingerprint


def test_an_older_secret_does_not_undo_a_newer_one() -> None:
    source = _source()
    staged = d.State(current=ca_info(A), confirmed_at=NOW, next=ca_info(B), staged_at=NOW)
    source.apply(_secret(staged, B_KEY, rv="10"))
    source.apply(_secret(d.State(current=ca_info(A), confirmed_at=NOW), rv="9"))
    assert sorted(source.loaded().anchors) == sorted(pem_fingerprints(A + B))


def test_a_previous_root_without_its_annotation_entry_is_kept_not_dropped() -> None:
    """A human edit of `ca-previous`: the root stays (retire time unset: scheduled again
    once every replica signs with the current CA), so the next write cannot delete it."""
    state = d.State(
        current=ca_info(A),
        confirmed_at=NOW,
        previous=(d.Previous(ca_info(C), NOW - timedelta(days=1), NOW + timedelta(hours=2)),),
    )
    secret = _secret(state)
    del secret["metadata"]["annotations"]["service-serving-signer/ca-previous"]
    stored = decode(secret)
    assert [p.ca for p in stored.state.previous] == [ca_info(C)]
    assert stored.state.previous[0].retire_at is None


def test_a_secret_without_ca_key_is_a_store_error_not_an_assert() -> None:
    secret = _secret(d.State(current=ca_info(A), confirmed_at=NOW))
    del secret["data"]["ca.key"]
    with pytest.raises(StoreError, match=r"ca\.key"):
        decode(secret)


def test_an_emergency_and_the_revoked_roots_round_trip() -> None:
    state = d.State(
        current=ca_info(B),
        previous=(d.Previous(ca_info(C), NOW, None),),
        revoked=frozenset({ca_info(A).fingerprint}),
        emergency=True,
    )
    assert decode(_secret(state)).state == state
    asked = d.State(
        current=ca_info(A),
        confirmed_at=NOW,
        emergency_requested_at=NOW,
        revoke=frozenset({ca_info(A).fingerprint}),
    )
    assert decode(_secret(asked)).state == asked


def test_a_managed_root_signs_leaves_only() -> None:
    from cryptography import x509

    from managedca.wiring import Settings, make_ca_of

    settings = Settings(
        "ns", "ca", "file-ca", "example.com/x", "ECDSAP256", "cluster.local", d.Config()
    )
    _key, cert = make_ca_of(settings)(NOW)
    constraints = x509.load_pem_x509_certificate(cert).extensions.get_extension_for_class(
        x509.BasicConstraints
    )
    assert constraints.value.ca and constraints.value.path_length == 0


def test_the_recorded_lifetimes_round_trip() -> None:
    state = d.State(
        current=ca_info(A),
        confirmed_at=NOW,
        issued_lifetime=timedelta(hours=48),
        previous=(d.Previous(ca_info(C), NOW, None, timedelta(hours=24)),),
    )
    assert decode(_secret(state)).state == state


def test_a_skip_of_the_lagging_consumers_survives_every_write() -> None:
    key, pem = _ca("skip")
    info = ca_info(pem)
    state = d.State(current=info, consumers_skipped_for="bb" * 32, consumers_skipped_by="alice")
    secret = encode("ns", "ca", state, {info.fingerprint: pem}, key, None)
    back = decode(secret).state
    assert back.consumers_skipped_for == "bb" * 32 and back.consumers_skipped_by == "alice"
