"""After `ca rotate --emergency`, the revoked root is remembered on the stable
ClusterTrustBundle (`managedca.revocations`); a publisher never keeps another replica's
bundle that holds it — a lagging publisher (leader election off, a split publisher
Deployment, a paused old leader) that re-created its bundle with the revoked root after
our source changed, then died, must not keep the root published until our next change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry

from kube.client import path_segment
from managedca.layout import REVOKED_ROOTS, pem_fingerprints
from publisher.controller import Caches, PublisherController
from publisher.decide import REVOKED_ROOTS_ANNOTATION
from tests.unit.publisher.builders import FakeClient, cached, ctb, trust_bundle
from trust.bundle import anchor_ders, bundle_name, normalize_bundle, stable_bundle_name
from trust.ca import cert_pem, generate_ca

SIGNER = "kubernetes.io/service-serving"
LOADED_AT = datetime(2026, 12, 5, 3, 0, 0, tzinfo=UTC)


def _pem(name: str) -> str:
    return normalize_bundle(cert_pem(generate_ca(name, validity=timedelta(days=30)).cert).decode())


COMPROMISED, CLEAN = _pem("compromised"), _pem("clean")


def _stable_after_sync(remembered: str) -> set[bytes]:
    compromised, clean = COMPROMISED, CLEAN
    stale = ctb(
        bundle_name(SIGNER, compromised),
        compromised,
        signer=SIGNER,
        created=LOADED_AT + timedelta(seconds=2),
        published_by="replica-b",
    )
    stable = ctb(stable_bundle_name(SIGNER), clean, signer=SIGNER)
    if remembered:
        stable["metadata"]["annotations"] = {REVOKED_ROOTS_ANNOTATION: remembered}
    client = FakeClient()
    PublisherController(
        client,  # type: ignore[arg-type]
        Caches(cached([stale, stable])),
        lambda: trust_bundle(clean, LOADED_AT),
        signer_name=SIGNER,
        ctb_version="v1",
        registry=CollectorRegistry(),
        publisher_id="replica-a",
    ).sync()
    writes = [
        b
        for verb, _, b in client.actions
        if verb in ("create", "replace") and b["metadata"]["name"] == stable_bundle_name(SIGNER)
    ]
    held = writes[-1]["spec"]["trustBundle"] if writes else clean
    deleted = {p.rsplit("/", 1)[-1] for verb, p, _ in client.actions if verb == "delete"}
    assert (path_segment(bundle_name(SIGNER, compromised)) in deleted) == bool(remembered)
    return set(anchor_ders(held)) & set(anchor_ders(compromised))


def test_a_lagging_publishers_bundle_does_not_keep_a_revoked_root_published() -> None:
    assert not _stable_after_sync(pem_fingerprints(COMPROMISED)[0])


def test_without_a_revocation_a_newer_bundle_of_another_replica_is_still_kept() -> None:
    """The rule it refines (a replica whose volume refreshed first publishes a new root
    of a rotation: deleting it would take the root back out) is unchanged."""
    assert _stable_after_sync("")


def test_the_publisher_reads_the_annotation_the_managed_ca_writes() -> None:
    assert REVOKED_ROOTS_ANNOTATION == REVOKED_ROOTS
