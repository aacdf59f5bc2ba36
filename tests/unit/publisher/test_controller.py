"""The publisher's `sync` against a seeded cache: which API actions it takes."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from urllib.parse import quote, unquote

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError
from kube.types import JSON
from publisher.controller import KEY, Caches, PublisherController
from publisher.decide import MANAGED_BY, MANAGED_BY_LABEL, PUBLISHED_BY_ANNOTATION
from tests.unit import pki
from tests.unit.fakes import FakeCache
from tests.unit.publisher.builders import (
    BUNDLE,
    FILE_MODIFIED,
    NAME,
    OTHER_BUNDLE,
    PATH,
    SIGNER,
    STABLE,
    THEM,
    US,
    FakeClient,
    cached,
    ctb,
    trust_bundle,
)
from trust.bundle import (
    TrustBundle,
    anchor_ders,
    bundle_name,
    earliest_expiry,
    normalize_bundle,
    unlinked_bundle_name,
)
from trust.ca import cert_pem


def controller(
    cache: FakeCache[JSON],
    client: FakeClient,
    registry: CollectorRegistry | None = None,
    source: TrustBundle | None = None,
) -> PublisherController:
    return PublisherController(
        client,  # type: ignore[arg-type]
        Caches(cache),
        lambda: source or trust_bundle(),
        signer_name=SIGNER,
        ctb_version="v1",
        registry=registry or CollectorRegistry(),
        publisher_id=US,
    )


def published(bundle: str = BUNDLE) -> list[JSON]:
    """Our hash-named bundle and the stable one, both holding `bundle`."""
    return [ctb(bundle_name(SIGNER, bundle), bundle), ctb(STABLE, bundle)]


def test_creates_the_bundle_when_missing() -> None:
    client = FakeClient()
    controller(cached([]), client).sync()
    [(verb, path, body), (verb2, path2, stable)] = client.actions
    assert (verb, path, verb2, path2) == ("create", PATH, "create", PATH)
    assert body["metadata"] == {
        "name": NAME,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        "annotations": {PUBLISHED_BY_ANNOTATION: US},
    }
    assert body["spec"] == {"signerName": SIGNER, "trustBundle": BUNDLE}
    assert body["apiVersion"] == "certificates.k8s.io/v1"
    assert stable["metadata"] == {"name": STABLE, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    assert stable["spec"] == {"signerName": SIGNER, "trustBundle": BUNDLE}


def test_does_nothing_when_up_to_date() -> None:
    client = FakeClient()
    controller(cached(published()), client).sync()
    assert client.actions == []


@pytest.mark.parametrize(
    "current",
    [ctb(NAME, OTHER_BUNDLE), ctb(NAME, BUNDLE, labels={"x": "y"})],
    ids=["edited-content", "label-removed"],
)
def test_restores_an_edited_bundle_conditionally(current: JSON) -> None:
    client = FakeClient()
    controller(cached([current, ctb(STABLE, BUNDLE)]), client).sync()
    [(verb, path, body)] = client.actions
    assert verb == "replace"
    assert path == f"{PATH}/kubernetes.io%3Aservice-serving%3A{NAME.rsplit(':', 1)[1]}"
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
    assert body["spec"] == {"signerName": SIGNER, "trustBundle": BUNDLE}


def test_creates_new_before_deleting_stale_bundles_of_our_signer_only() -> None:
    client = FakeClient()
    stale = ctb(bundle_name(SIGNER, OTHER_BUNDLE), OTHER_BUNDLE)
    foreign = ctb("example.com:other:abc", OTHER_BUNDLE, signer="example.com/other")
    controller(cached([stale, foreign]), client).sync()
    assert [a[0] for a in client.actions] == ["create", "create", "delete"]
    _, path, body = client.actions[2]
    assert path.endswith(bundle_name(SIGNER, OTHER_BUNDLE).rsplit(":", 1)[1])
    assert body["preconditions"] == {"uid": stale["metadata"]["uid"]}


def loop_count(registry: CollectorRegistry, result: str) -> float | None:
    return registry.get_sample_value(
        "controller_sync_total", {"controller": "publisher", "result": result}
    )


def test_delete_of_already_gone_bundle_is_success() -> None:
    registry = CollectorRegistry()
    client = FakeClient(fail={"delete": ApiError(404, "Not Found")})
    stale = ctb(bundle_name(SIGNER, OTHER_BUNDLE), OTHER_BUNDLE)
    pub = controller(cached([*published(), stale]), client, registry)
    pub.queue.add(KEY)
    assert pub.loop.process_next_work_item()
    assert [(verb, path) for verb, path, _ in client.actions] == [
        ("delete", f"{PATH}/{quote(bundle_name(SIGNER, OTHER_BUNDLE), safe='')}")
    ]
    assert (loop_count(registry, "success"), loop_count(registry, "error")) == (1, 0)
    pub.queue.shut_down()


def test_create_racing_a_lagging_cache_is_success() -> None:
    registry = CollectorRegistry()
    client = FakeClient(fail={"create": ApiError(409, "Conflict", {"reason": "AlreadyExists"})})
    pub = controller(cached([]), client, registry)
    pub.queue.add(KEY)
    assert pub.loop.process_next_work_item()
    assert client.actions and {(verb, path) for verb, path, _ in client.actions} == {
        ("create", PATH)
    }
    assert (loop_count(registry, "success"), loop_count(registry, "error")) == (1, 0)
    pub.queue.shut_down()


def test_api_failure_is_raised_for_the_loop_which_counts_and_retries_it() -> None:
    registry = CollectorRegistry()
    client = FakeClient(fail={"create": ApiError(503, "Service Unavailable")})
    pub = controller(cached([]), client, registry)
    with pytest.raises(ApiError):
        pub.sync()
    pub.queue.add(KEY)
    assert pub.loop.process_next_work_item()
    assert loop_count(registry, "error") == 1
    assert pub.queue.num_requeues(KEY) == 1
    pub.queue.shut_down()


def test_no_reconcile_before_the_cache_has_synced() -> None:
    """Deciding from an empty cache would create and delete against live objects: the
    loop starts the worker only once the cache has synced."""
    client = FakeClient()
    cache = cached([], synced=False)
    stop = threading.Event()
    thread = threading.Thread(target=controller(cache, client).run, args=(stop,), daemon=True)
    thread.start()
    try:
        time.sleep(0.3)
        assert client.actions == []
        cache.synced = True
        deadline = time.monotonic() + 5
        while not client.actions and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [verb for verb, _, _ in client.actions] == ["create", "create"]
    finally:
        stop.set()
        thread.join(5)


def test_success_sets_the_expiry_gauge() -> None:
    registry = CollectorRegistry()
    pub = controller(cached(published()), FakeClient(), registry)
    assert pub.sync() is None
    assert (
        registry.get_sample_value("service_serving_ca_controller_trust_bundle_expiry_seconds")
        == earliest_expiry(BUNDLE).timestamp()
    )


# a replica with a stale ConfigMap volume -------------------------

BOTH = normalize_bundle(cert_pem(pki.ca("pub-a").cert, pki.ca("pub-b").cert))


def deletes(client: FakeClient) -> list[str]:
    return [unquote(path.rsplit("/", 1)[1]) for verb, path, _ in client.actions if verb == "delete"]


def newer(created: datetime, published_by: str | None = THEM) -> JSON:
    """A bundle of old + new root published at `created`."""
    return ctb(bundle_name(SIGNER, BOTH), BOTH, created=created, published_by=published_by)


def test_keeps_another_replicas_newer_bundle_holding_an_anchor_our_file_lacks() -> None:
    # Another replica published old + new root after our file was last written here.
    client = FakeClient()
    controller(cached([newer(FILE_MODIFIED + timedelta(minutes=1))]), client).sync()
    assert [verb for verb, _, _ in client.actions] == ["create", "create"]  # ours, stable
    assert deletes(client) == []
    # The stable bundle holds the union: what a signerName projection sees anyway.
    assert anchor_ders(client.actions[1][2]["spec"]["trustBundle"]) == anchor_ders(BOTH)


@pytest.mark.parametrize("published_by", [THEM, None], ids=["other-replica", "older-version"])
def test_keeps_it_when_created_in_the_same_second_as_our_file_changed(
    published_by: str | None,
) -> None:
    other = newer(FILE_MODIFIED.replace(microsecond=0), published_by)
    client = FakeClient()
    controller(cached([ctb(NAME, BUNDLE), ctb(STABLE, BOTH), other]), client).sync()
    assert deletes(client) == []


def test_a_bundle_we_published_ourselves_is_never_kept_however_new() -> None:
    """Two writes to our file within one second (the first's bundle
    is created in the same second as the second write). Ours, so it goes."""
    ours = newer(FILE_MODIFIED.replace(microsecond=0), US)
    client = FakeClient()
    controller(cached([ctb(NAME, BUNDLE), ctb(STABLE, BOTH), ours]), client).sync()
    assert [verb for verb, _, _ in client.actions] == ["replace", "delete"]
    assert client.actions[0][2]["spec"]["trustBundle"] == BUNDLE  # stable first, in place
    assert deletes(client) == [bundle_name(SIGNER, BOTH)]


@pytest.mark.parametrize(
    "case",
    [
        "older-than-our-file",
        "no-managed-by-label",
        "lacks-anchors-instead",
        "no-creation-timestamp",
    ],
)
def test_deletes_other_bundles_that_are_not_newer_and_ours(case: str) -> None:
    created: datetime | None = FILE_MODIFIED + timedelta(minutes=1)
    labels: dict[str, str] | None = None
    ours, theirs = BUNDLE, BOTH
    if case == "older-than-our-file":
        created = FILE_MODIFIED - timedelta(minutes=1)
    elif case == "no-managed-by-label":
        labels = {}
    elif case == "lacks-anchors-instead":  # runbook step 3: our file dropped the old root
        ours, theirs = BOTH, BUNDLE
    else:
        created = None
    other = ctb(
        bundle_name(SIGNER, theirs), theirs, labels=labels, created=created, published_by=THEM
    )
    client = FakeClient()
    pub = controller(cached([*published(ours), other]), client, None, trust_bundle(ours))
    pub.sync()
    assert deletes(client) == [bundle_name(SIGNER, theirs)]


def test_deletes_the_kept_bundle_once_our_file_changes_after_it() -> None:
    kept = newer(FILE_MODIFIED + timedelta(minutes=1))
    client = FakeClient()
    later = trust_bundle(BUNDLE, FILE_MODIFIED + timedelta(minutes=5))  # e.g. a revert
    controller(cached([ctb(NAME, BUNDLE), ctb(STABLE, BOTH), kept]), client, None, later).sync()
    assert deletes(client) == [bundle_name(SIGNER, BOTH)]


# the stable bundle ---------------------------------------------------------


def test_stable_bundle_is_updated_in_place_before_stale_ones_are_deleted() -> None:
    """old → new: the stable bundle is replaced conditionally, never deleted."""
    client = FakeClient()
    old = ctb(bundle_name(SIGNER, OTHER_BUNDLE), OTHER_BUNDLE)
    controller(cached([ctb(NAME, BUNDLE), ctb(STABLE, OTHER_BUNDLE), old]), client).sync()
    assert [verb for verb, _, _ in client.actions] == ["replace", "delete"]
    _, path, body = client.actions[0]
    assert unquote(path).endswith(STABLE)
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["spec"] == {"signerName": SIGNER, "trustBundle": BUNDLE}
    assert deletes(client) == [bundle_name(SIGNER, OTHER_BUNDLE)]


def test_a_stable_bundle_write_that_does_not_go_through_defers_the_deletes() -> None:
    """Our cache lags (our own update, or someone's edit): the write's event reconciles
    again; until then no hash-named bundle is deleted, so nothing leaves a projection that
    the stable bundle does not hold yet."""
    client = FakeClient(fail={"replace": ApiError(409, "Conflict", {"reason": "Conflict"})})
    old = ctb(bundle_name(SIGNER, OTHER_BUNDLE), OTHER_BUNDLE)
    controller(cached([ctb(NAME, BUNDLE), ctb(STABLE, OTHER_BUNDLE), old]), client).sync()
    assert deletes(client) == []


def test_an_edited_stable_bundle_is_restored() -> None:
    client = FakeClient()
    controller(cached([ctb(NAME, BUNDLE), ctb(STABLE, OTHER_BUNDLE, labels={})]), client).sync()
    [(verb, path, body)] = client.actions
    assert (verb, unquote(path).rsplit("/", 1)[1]) == ("replace", STABLE)
    assert body["metadata"]["labels"] == {MANAGED_BY_LABEL: MANAGED_BY}
    assert body["spec"]["trustBundle"] == BUNDLE


# the opt-in unlinked bundle --------------------------------------


def test_an_opted_in_publisher_writes_the_unlinked_bundle_from_its_own_cache() -> None:
    """The unlinked bundle has no signerName, so the signer's informer never sees it: the
    publisher reads it from a cache of its own, and writes it after the stable bundle."""
    unlinked_name = unlinked_bundle_name(SIGNER)
    client = FakeClient()
    pub = PublisherController(
        client,  # type: ignore[arg-type]
        Caches(cached(published()), unlinked=cached([])),
        trust_bundle,
        signer_name=SIGNER,
        ctb_version="v1",
        registry=CollectorRegistry(),
        publisher_id=US,
        publish_unlinked=True,
    )
    pub.sync()
    [(verb, path, body)] = client.actions
    assert (verb, path) == ("create", PATH)
    assert body["metadata"]["name"] == unlinked_name
    assert body["spec"] == {"trustBundle": BUNDLE}


def test_no_reconcile_before_the_unlinked_bundles_cache_has_synced_too() -> None:
    """Deciding before it has synced would take a bundle in place for a missing one."""
    pub = PublisherController(
        FakeClient(),  # type: ignore[arg-type]
        Caches(cached(published()), unlinked=cached([], synced=False)),
        trust_bundle,
        signer_name=SIGNER,
        ctb_version="v1",
        registry=CollectorRegistry(),
        publisher_id=US,
        publish_unlinked=True,
    )
    assert not pub.loop.has_synced()
