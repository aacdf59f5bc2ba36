"""Aggregated APIs and CRD conversion with injected caBundles:
kube-apiserver's aggregator and its CRD conversion client both verify our test server's
PCR-issued certificate against what the injector wrote."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kube.client import ApiError, Client
from tests.integration.injector_harness import (
    APISERVICE_PATH,
    CRD_PATH,
    SERVICE_PORT,
    Issuer,
    RunningInjector,
    api_service,
    b64,
    ca_bundles,
    conversion_crd,
    create_service,
    delete_quietly,
    endpoint_slice,
)
from tests.integration.signer_harness import eventually
from tests.integration.webhook_server import WebhookServer


@pytest.fixture
def issuer(client: Client) -> Iterator[Issuer]:
    with Issuer(client) as running:
        yield running


def start_server(
    issuer: Issuer, namespace: str, service: str, *, endpoints: bool = False
) -> WebhookServer:
    cluster_ip = create_service(issuer.client, namespace, service)
    if endpoints:
        endpoint_slice(issuer.client, namespace, service)
    chain, key = issuer.serving_certificate(namespace, service)
    return WebhookServer(cluster_ip, SERVICE_PORT, chain, key).start()


def available(client: Client, name: str) -> dict[str, Any] | None:
    status = client.get(f"{APISERVICE_PATH}/{name}").get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Available":
            return dict(condition)
    return None


def test_apiservice_becomes_available_and_serves_discovery_through_kube_apiserver(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    name = f"v1alpha1.{group}"
    server = start_server(issuer, namespace, "api", endpoints=True)
    try:
        client.create(APISERVICE_PATH, api_service(group, namespace, issuer.selector()))
        # Before: no caBundle; the availability check fails TLS verification.
        before = eventually(
            lambda: (c := available(client, name)) and c["status"] == "False" and c, timeout=30
        )
        assert before["reason"] == "FailedDiscoveryCheck", before
        assert "x509" in before["message"] or "certificate" in before["message"], before

        with RunningInjector(client):
            expected = b64(issuer.bundle())
            eventually(
                lambda: ca_bundles(client.get(f"{APISERVICE_PATH}/{name}")) == [expected],
                timeout=30,
            )
            after = eventually(
                lambda: (c := available(client, name)) and c["status"] == "True" and c,
                timeout=60,
                interval=0.2,
            )
            assert after["reason"] == "Passed"
            discovered = eventually(
                lambda: _get_or_none(client, f"/apis/{group}/v1alpha1"), timeout=30, interval=0.2
            )
            assert discovered["groupVersion"] == f"{group}/v1alpha1"
            assert [r["name"] for r in discovered["resources"]] == ["widgets"]
            assert server.discovery_calls >= 1
    finally:
        delete_quietly(client, APISERVICE_PATH, name)
        server.close()


def _get_or_none(client: Client, path: str) -> dict[str, Any] | None:
    try:
        return client.get(path)
    except ApiError:
        return None


def test_crd_conversion_webhook_serves_the_non_stored_version_after_injection(
    client: Client, namespace: str, issuer: Issuer
) -> None:
    group = f"g{uuid.uuid4().hex[:8]}.example.com"
    crd_name = f"things.{group}"
    server = start_server(issuer, namespace, "convert")
    try:
        client.create(CRD_PATH, conversion_crd(group, namespace, issuer.selector()))
        v1 = f"/apis/{group}/v1/namespaces/{namespace}/things"
        eventually(lambda: _get_or_none(client, v1), timeout=30, what="the CRD served")
        client.create(
            v1,
            {
                "apiVersion": f"{group}/v1",
                "kind": "Thing",
                "metadata": {"name": "one"},
                "spec": {"size": 3},
            },
        )
        v2 = f"/apis/{group}/v2/namespaces/{namespace}/things/one"
        # Before: the conversion webhook is not trusted, so v2 cannot be served.
        with pytest.raises(ApiError) as before:
            client.get(v2)
        assert "conversion webhook" in str(before.value) and "x509" in str(before.value)

        with RunningInjector(client) as injector:
            expected = b64(issuer.bundle())
            eventually(
                lambda: ca_bundles(client.get(f"{CRD_PATH}/{crd_name}")) == [expected],
                timeout=30,
            )
            converted = eventually(lambda: _get_or_none(client, v2), timeout=30, interval=0.2)
            assert converted["apiVersion"] == f"{group}/v2"
            assert converted["spec"] == {"replicas": 3}
            assert server.conversion_calls >= 1
            stored = client.get(f"{CRD_PATH}/{crd_name}")
            assert stored["spec"]["conversion"]["strategy"] == "Webhook"
            assert injector.controller.metrics.count("CustomResourceDefinition", "injected") >= 1
    finally:
        delete_quietly(client, CRD_PATH, crd_name)
        server.close()
