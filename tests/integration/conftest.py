"""Fixtures for tests that need nodes: one `Cluster` (control plane + real
kube-controller-manager + hollow kubelets) per session, started only when a test asks for
`cluster`; the light `control_plane` of tests/conftest.py stays the default. Every test
under this directory is marked `integration` (`-m "not integration"` leaves them all out)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.cluster import Cluster
from controlplane.workload import wait_service_account
from kube.client import Client
from tests.conftest import create_test_namespace

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `integration` marker by directory: a file here needs no `pytestmark` of its own."""
    for item in items:
        if HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    with Cluster.start(nodes=2) as started:
        yield started


@pytest.fixture(scope="session")
def cluster_client(cluster: Cluster) -> Client:
    admin: Client = cluster.plane.client()
    return admin


@pytest.fixture
def node_namespace(cluster_client: Client, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace on the cluster, with its `default` ServiceAccount (made by KCM);
    deleted afterwards (KCM's namespace controller finishes the deletion)."""
    name = create_test_namespace(cluster_client, request)
    wait_service_account(cluster_client, name)
    yield name
    cluster_client.delete(f"/api/v1/namespaces/{name}")
