"""Which control-plane binaries a run would build, per kube-apiserver version, the flags
that make each tested version serve the certificates APIs, and the demo saying it builds
only when it does."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane import binaries
from controlplane.demo import build_note
from controlplane.server import version_args

OLDER = binaries.OLDER_VERSIONS[0]


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in ("KUBEBUILDER_ASSETS", "TEST_ASSET_KUBE_APISERVER", "TEST_ASSET_ETCD"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "service-serving-signer" / "controlplane"


def install(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)


def test_each_version_has_its_own_kube_apiserver_and_shares_the_main_versions_etcd(
    cache: Path,
) -> None:
    install(cache / binaries.KUBERNETES_VERSION, "etcd", "kube-apiserver")
    assert binaries.missing(("etcd", "kube-apiserver")) == []
    assert binaries.missing(("etcd", "kube-apiserver"), OLDER) == ["kube-apiserver"]
    install(cache / OLDER, "kube-apiserver")
    assert binaries.missing(("etcd", "kube-apiserver"), OLDER) == []


def test_kubebuilder_assets_name_the_main_versions_binaries_only(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    install(tmp_path / "assets", "etcd", "kube-apiserver")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path / "assets"))
    assert binaries.find("kube-apiserver") == tmp_path / "assets" / "kube-apiserver"
    assert binaries.find("kube-apiserver", OLDER) is None


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (
            "v1.37.2",
            (
                "--runtime-config=certificates.k8s.io/v1beta1/podcertificaterequests=true,"
                "certificates.k8s.io/v1beta1/clustertrustbundles=true",
            ),
        ),
        (
            "v1.36.5",
            (
                "--feature-gates=PodCertificateRequest=true,ClusterTrustBundle=true,"
                "ClusterTrustBundleProjection=true",
                "--runtime-config=certificates.k8s.io/v1beta1=true",
            ),
        ),
    ],
)
def test_version_args_turn_on_what_each_release_needs(
    version: str, expected: tuple[str, ...]
) -> None:
    assert version_args(version) == expected


def test_the_demo_mentions_a_build_only_when_something_is_built() -> None:
    assert build_note([]) is None
    note = build_note(["kube-apiserver", "hollow-node"])
    assert note is not None
    assert "kube-apiserver, hollow-node" in note and "minutes" in note


def test_traefik_has_its_own_cache_directory_and_test_asset_traefik_wins(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TEST_ASSET_TRAEFIK", raising=False)
    directory = cache.parent / "traefik" / binaries.TRAEFIK_VERSION
    install(directory, "traefik")
    assert binaries.traefik() == directory / "traefik"
    monkeypatch.setenv("TEST_ASSET_TRAEFIK", str(tmp_path / "mine"))
    assert binaries.traefik() == tmp_path / "mine"
