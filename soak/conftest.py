"""`make soak`: scenarios that take real minutes (kube-controller-manager's 15-minute
PodCertificateRequest cleaner, the kubelet's token refresh), on the same node-capable
cluster fixture as tests/integration. Not part of `make test`."""

from tests.conftest import pytest_runtest_logreport, pytest_sessionfinish
from tests.integration.conftest import cluster, cluster_client, node_namespace

__all__ = [
    "cluster",
    "cluster_client",
    "node_namespace",
    "pytest_runtest_logreport",
    "pytest_sessionfinish",
]
