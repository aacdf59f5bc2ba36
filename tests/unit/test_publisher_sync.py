"""The publisher's `sync` against a seeded cache: which API actions it takes."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kube.client import JSON, ApiError
from publisher.controller import MANAGED_BY, MANAGED_BY_LABEL, NotSynced, PublisherController
from signer.ca import cert_pem
from tests.unit import pki
from trust.bundle import bundle_name, earliest_expiry, normalize_bundle

SIGNER = "kubernetes.io/service-serving"
PATH = "/apis/certificates.k8s.io/v1/clustertrustbundles"
BUNDLE = normalize_bundle(cert_pem(pki.ca("pub-a").cert))
OTHER_BUNDLE = normalize_bundle(cert_pem(pki.ca("pub-b").cert))
NAME = bundle_name(SIGNER, BUNDLE)


class FakeClient:
    def __init__(self, fail: dict[str, ApiError] | None = None) -> None:
        self.actions: list[tuple[str, str, Any]] = []
        self.fail = fail or {}

    def _act(self, verb: str, path: str, body: Any) -> JSON:
        self.actions.append((verb, path, body))
        if verb in self.fail:
            raise self.fail[verb]
        return dict(body or {})

    def create(self, path: str, body: JSON, params: Any = None) -> JSON:
        return self._act("create", path, body)

    def replace(self, path: str, body: JSON, params: Any = None) -> JSON:
        return self._act("replace", path, body)

    def delete(self, path: str, body: JSON | None = None, params: Any = None) -> JSON:
        return self._act("delete", path, body)


class FakeCache:
    def __init__(self, objects: list[JSON], synced: bool = True) -> None:
        self.objects = {o["metadata"]["name"]: o for o in objects}
        self.synced = synced

    def has_synced(self) -> bool:
        return self.synced

    def get(self, key: str) -> JSON | None:
        return self.objects.get(key)

    def list(self) -> list[JSON]:
        return list(self.objects.values())


def ctb(name: str, bundle: str, signer: str = SIGNER, labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "ClusterTrustBundle",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY} if labels is None else labels,
        },
        "spec": {"signerName": signer, "trustBundle": bundle},
    }


def controller(
    cache: FakeCache, client: FakeClient, registry: CollectorRegistry | None = None
) -> PublisherController:
    return PublisherController(
        client,  # type: ignore[arg-type]
        lambda: BUNDLE,
        signer_name=SIGNER,
        ctb_version="v1",
        registry=registry or CollectorRegistry(),
        informer=cache,
    )


def test_creates_the_bundle_when_missing() -> None:
    client = FakeClient()
    controller(FakeCache([]), client).sync()
    [(verb, path, body)] = client.actions
    assert (verb, path) == ("create", PATH)
    assert body["metadata"] == {"name": NAME, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
    assert body["spec"] == {"signerName": SIGNER, "trustBundle": BUNDLE}
    assert body["apiVersion"] == "certificates.k8s.io/v1"


def test_does_nothing_when_up_to_date() -> None:
    client = FakeClient()
    controller(FakeCache([ctb(NAME, BUNDLE)]), client).sync()
    assert client.actions == []


@pytest.mark.parametrize(
    "current",
    [ctb(NAME, OTHER_BUNDLE), ctb(NAME, BUNDLE, labels={"x": "y"})],
    ids=["edited-content", "label-removed"],
)
def test_restores_an_edited_bundle_conditionally(current: JSON) -> None:
    client = FakeClient()
    controller(FakeCache([current]), client).sync()
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
    controller(FakeCache([stale, foreign]), client).sync()
    assert [a[0] for a in client.actions] == ["create", "delete"]
    _, path, body = client.actions[1]
    assert path.endswith(bundle_name(SIGNER, OTHER_BUNDLE).rsplit(":", 1)[1])
    assert body["preconditions"] == {"uid": stale["metadata"]["uid"]}


def test_delete_of_already_gone_bundle_is_success() -> None:
    client = FakeClient(fail={"delete": ApiError(404, "Not Found")})
    stale = ctb(bundle_name(SIGNER, OTHER_BUNDLE), OTHER_BUNDLE)
    controller(FakeCache([ctb(NAME, BUNDLE), stale]), client).sync()


def test_create_racing_a_lagging_cache_is_success() -> None:
    client = FakeClient(fail={"create": ApiError(409, "Conflict", {"reason": "AlreadyExists"})})
    controller(FakeCache([]), client).sync()


def test_api_failure_is_raised_and_counted_with_its_code() -> None:
    registry = CollectorRegistry()
    client = FakeClient(fail={"create": ApiError(503, "Service Unavailable")})
    with pytest.raises(ApiError):
        controller(FakeCache([]), client, registry).sync()
    assert (
        registry.get_sample_value("clustertrustbundle_publisher_sync_total", {"code": "503"}) == 1
    )


def test_refuses_to_decide_from_an_unsynced_cache() -> None:
    client = FakeClient()
    with pytest.raises(NotSynced):
        controller(FakeCache([], synced=False), client).sync()
    assert client.actions == []


def test_success_counts_200_and_sets_expiry_gauge() -> None:
    registry = CollectorRegistry()
    assert (
        registry.get_sample_value("clustertrustbundle_publisher_sync_total", {"code": "200"})
        is None
    )
    pub = controller(FakeCache([ctb(NAME, BUNDLE)]), FakeClient(), registry)
    assert (
        registry.get_sample_value("clustertrustbundle_publisher_sync_total", {"code": "200"}) == 0
    )
    pub.sync()
    assert (
        registry.get_sample_value("clustertrustbundle_publisher_sync_total", {"code": "200"}) == 1
    )
    assert (
        registry.get_sample_value("service_serving_ca_controller_trust_bundle_expiry_seconds")
        == earliest_expiry(BUNDLE).timestamp()
    )
