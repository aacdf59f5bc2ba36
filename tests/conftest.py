"""Shared fixtures: one real control plane per test session (built or found by
`controlplane`, never skipped), an admin client, and a fresh namespace per test.

The API-version-sensitive tests take `plane` (with `plane_client`, `plane_namespace` and
`plane_pcr_version`) instead: parametrised over every tested kube-apiserver version
(`binaries.TESTED_VERSIONS`: 1.37, 1.38 and 1.36, ids `kube-1.37`, `kube-1.38`,
`kube-1.36`), the 1.37 case being the session's `control_plane` and each other one a
second light plane started on first use and shared by the session."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import settings

from controlplane import ControlPlane, binaries
from controlplane.kubelet import Kubelet
from kube.client import Client
from kube.discovery import served_version

TESTED_VERSIONS = binaries.TESTED_VERSIONS

# No per-example deadline: the suite runs beside itself (`make test`'s workers) on shared
# cores, where hypothesis's 200 ms default fails a correct example for being slow. What a
# property must hold is asserted; how long an example takes is a benchmark's question.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


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


def _minor(version: str) -> str:
    return "kube-" + ".".join(version.lstrip("v").split(".")[:2])


@pytest.fixture(scope="session")
def other_planes() -> Iterator[dict[str, tuple[ControlPlane, Client]]]:
    """The other versions' kube-apiservers by version, started by `plane` on first use."""
    planes: dict[str, tuple[ControlPlane, Client]] = {}
    try:
        yield planes
    finally:
        for plane, _ in planes.values():
            plane.stop()


@pytest.fixture(params=TESTED_VERSIONS, ids=_minor)
def plane(
    request: pytest.FixtureRequest, other_planes: dict[str, tuple[ControlPlane, Client]]
) -> ControlPlane:
    version: str = request.param
    if version == binaries.KUBERNETES_VERSION:
        main: ControlPlane = request.getfixturevalue("control_plane")
        return main
    if version not in other_planes:
        started = ControlPlane.start(version=version)
        other_planes[version] = (started, started.client())
    return other_planes[version][0]


@pytest.fixture
def plane_client(
    plane: ControlPlane,
    request: pytest.FixtureRequest,
    other_planes: dict[str, tuple[ControlPlane, Client]],
) -> Client:
    if plane.kube_version == binaries.KUBERNETES_VERSION:
        main: Client = request.getfixturevalue("client")
        return main
    return other_planes[plane.kube_version][1]


@pytest.fixture
def plane_namespace(plane_client: Client, request: pytest.FixtureRequest) -> str:
    return create_test_namespace(plane_client, request)


@pytest.fixture
def plane_pcr_version(plane_client: Client) -> str:
    """The newest PodCertificateRequest version the plane serves (what `auto` picks)."""
    version = served_version(
        plane_client, "certificates.k8s.io", "podcertificaterequests", ["v1", "v1beta1"]
    )
    assert version is not None
    return version


@pytest.fixture
def kubelet(client: Client) -> Kubelet:
    return Kubelet(client)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile` (make test): files whole, the long ones first (tests/schedule.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.schedule import FileScheduling

    return FileScheduling(config, log)


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
