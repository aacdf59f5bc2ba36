"""Which Gateway API CRDs `install` writes: created when missing, replaced when another
bundle (version or channel) is in place, left alone by a standard install over the
experimental bundle (a superset)."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane import gateway_api
from kube.client import ApiError


def crd(name: str, version: str, channel: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": name,
            "annotations": {
                gateway_api.BUNDLE_ANNOTATION: version,
                gateway_api.CHANNEL_ANNOTATION: channel,
            },
        },
    }


class FakeClient:
    def __init__(self, existing: dict[str, dict[str, Any]]) -> None:
        self.objects = existing
        self.writes: list[tuple[str, str]] = []

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if name in self.objects:
            raise ApiError(409, "Conflict", {"reason": "AlreadyExists"})
        self.writes.append(("create", name))
        self.objects[name] = self._established(body)
        return body

    def get(self, path: str) -> dict[str, Any]:
        return self.objects[path.rsplit("/", 1)[1]]

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = path.rsplit("/", 1)[1]
        assert body["metadata"]["resourceVersion"] == "1"  # conditional
        self.writes.append(("replace", name))
        self.objects[name] = self._established(body)
        return body

    @staticmethod
    def _established(body: dict[str, Any]) -> dict[str, Any]:
        metadata = {**body["metadata"], "resourceVersion": "1"}
        status = {"conditions": [{"type": "Established", "status": "True"}]}
        return {**body, "metadata": metadata, "status": status}


@pytest.fixture
def bundles(monkeypatch: pytest.MonkeyPatch) -> None:
    def crds(version: str, channel: str) -> list[dict[str, Any]]:
        return [crd("gateways.gateway.networking.k8s.io", version, channel)]

    monkeypatch.setattr(gateway_api, "crds", crds)


@pytest.mark.usefixtures("bundles")
def test_experimental_replaces_the_standard_bundle_and_standard_keeps_experimental() -> None:
    name = "gateways.gateway.networking.k8s.io"
    client = FakeClient({})
    gateway_api.install(client, "v1.6.3")  # type: ignore[arg-type]
    gateway_api.install(client, "v1.7.0", channel="experimental")  # type: ignore[arg-type]
    gateway_api.install(client, "v1.7.0", channel="experimental")  # type: ignore[arg-type]
    gateway_api.install(client, "v1.6.3")  # type: ignore[arg-type]
    assert client.writes == [("create", name), ("replace", name)]
    annotations = client.objects[name]["metadata"]["annotations"]
    assert annotations[gateway_api.CHANNEL_ANNOTATION] == "experimental"
