"""Shared fixtures: one real control plane per test session (built or found by
`controlplane`, never skipped), an admin client, and a fresh namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from kube.client import Client


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane.start() as plane:
        yield plane


@pytest.fixture(scope="session")
def client(control_plane: ControlPlane) -> Client:
    admin: Client = control_plane.client()
    return admin


def create_test_namespace(client: Client, request: pytest.FixtureRequest) -> str:
    """A new namespace named after the test (DNS-1123, unique), for its objects."""
    base = request.node.name.lower().replace("_", "-")
    base = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:6]}"
    client.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )
    return name


@pytest.fixture
def namespace(client: Client, request: pytest.FixtureRequest) -> str:
    return create_test_namespace(client, request)


@pytest.fixture
def kubelet(client: Client) -> Kubelet:
    return Kubelet(client)


_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A skipped test hides a missing component: the run fails instead
    (docs/development.md)."""
    if _skipped and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nFAILED: {len(_skipped)} test(s) skipped; skips are not allowed here:")
        for nodeid in _skipped:
            print(f"  {nodeid}")
