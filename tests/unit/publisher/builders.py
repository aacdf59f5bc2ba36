"""What the publisher's tests build: ClusterTrustBundles as the cache holds them, a trust
bundle read from a file, and a client that records the actions it is asked for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kube.client import ApiError
from kube.types import JSON
from publisher.decide import MANAGED_BY, MANAGED_BY_LABEL, PUBLISHED_BY_ANNOTATION
from tests.unit import pki
from tests.unit.fakes import FakeCache
from trust.bundle import (
    TrustBundle,
    bundle_name,
    normalize_bundle,
    parse_anchors,
    stable_bundle_name,
)
from trust.ca import cert_pem

SIGNER = "kubernetes.io/service-serving"
PATH = "/apis/certificates.k8s.io/v1/clustertrustbundles"
BUNDLE = normalize_bundle(cert_pem(pki.ca("pub-a").cert))
OTHER_BUNDLE = normalize_bundle(cert_pem(pki.ca("pub-b").cert))
NAME = bundle_name(SIGNER, BUNDLE)
STABLE = stable_bundle_name(SIGNER)
US, THEM = "replica-a", "replica-b"
FILE_MODIFIED = datetime(2026, 12, 1, 10, 0, 0, 500000, tzinfo=UTC)


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


def cached(objects: list[JSON], synced: bool = True) -> FakeCache[JSON]:
    return FakeCache(objects, key=lambda obj: str(obj["metadata"]["name"]), synced=synced)


def ctb(
    name: str,
    bundle: str,
    signer: str = SIGNER,
    labels: dict[str, str] | None = None,
    created: datetime | None = None,
    published_by: str | None = US,
) -> JSON:
    metadata: JSON = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "labels": {MANAGED_BY_LABEL: MANAGED_BY} if labels is None else labels,
    }
    if published_by is not None and name != STABLE:
        metadata["annotations"] = {PUBLISHED_BY_ANNOTATION: published_by}
    if created is not None:
        metadata["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "ClusterTrustBundle",
        "metadata": metadata,
        "spec": {"signerName": signer, "trustBundle": bundle},
    }


def trust_bundle(pem: str = BUNDLE, modified: datetime = FILE_MODIFIED) -> TrustBundle:
    return TrustBundle(pem, tuple(parse_anchors(pem)), modified)
