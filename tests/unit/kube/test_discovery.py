"""served_version picks the first preferred version whose discovery lists the resource."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kube.client import ApiError
from kube.discovery import served_version
from tests.unit.fakeapi import FakeApi


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi().start()
    api.discovery["/apis/certificates.k8s.io/v1beta1"] = {
        "kind": "APIResourceList",
        "groupVersion": "certificates.k8s.io/v1beta1",
        "resources": [
            {"name": "podcertificaterequests", "namespaced": True},
            {"name": "podcertificaterequests/status", "namespaced": True},
        ],
    }
    api.discovery["/apis/certificates.k8s.io/v1"] = {
        "kind": "APIResourceList",
        "groupVersion": "certificates.k8s.io/v1",
        "resources": [{"name": "certificatesigningrequests", "namespaced": False}],
    }
    api.discovery["/api/v1"] = {"kind": "APIResourceList", "resources": [{"name": "pods"}]}
    yield api
    api.stop()


def test_unserved_versions_and_versions_without_the_resource_are_skipped(
    fake: FakeApi,
) -> None:
    client = fake.client()
    versions = ["v2", "v1", "v1beta1", "v1alpha1"]
    assert served_version(client, "certificates.k8s.io", "podcertificaterequests", versions) == (
        "v1beta1"
    )
    assert (
        served_version(client, "certificates.k8s.io", "certificatesigningrequests", versions)
        == "v1"
    )


def test_nothing_served_is_none(fake: FakeApi) -> None:
    assert served_version(fake.client(), "example.com", "widgets", ["v1", "v1beta1"]) is None


def test_core_group_uses_the_legacy_path(fake: FakeApi) -> None:
    assert served_version(fake.client(), "", "pods", ["v1"]) == "v1"


def test_errors_other_than_not_found_are_raised(fake: FakeApi) -> None:
    fake.fail("GET", "/apis/certificates.k8s.io/v1", 503)
    with pytest.raises(ApiError) as err:
        served_version(fake.client(), "certificates.k8s.io", "podcertificaterequests", ["v1"])
    assert err.value.status == 503
