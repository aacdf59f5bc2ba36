"""Which control-plane binaries a run would build, per kube-apiserver version, with which
Go toolchain, which versions the version-sensitive tests run on, the flags that make each
tested version serve the certificates APIs, and the demo saying it builds only when it
does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from controlplane import binaries
from controlplane.demo import build_note
from controlplane.server import node_feature_gates, version_args

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
            "v1.38.0-beta.0",
            (
                "--feature-gates=PodCertificateMLDSA=true",
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


def test_a_hollow_node_built_from_other_source_is_rebuilt(cache: Path) -> None:
    next_dir = cache / binaries.NEXT_VERSION
    install(next_dir, "hollow-node", "kube-controller-manager")
    assert binaries.missing(("kube-controller-manager", "hollow-node"), binaries.NEXT_VERSION) == [
        "hollow-node"
    ]
    (next_dir / "hollow-node.sha256").write_text("0" * 64 + "\n")
    assert binaries.missing(("hollow-node",), binaries.NEXT_VERSION) == ["hollow-node"]
    (next_dir / "hollow-node.sha256").write_text(f"{binaries.source_digest('hollow-node')}\n")
    assert binaries.missing(("hollow-node",), binaries.NEXT_VERSION) == []


def test_any_change_under_the_hollow_nodes_source_changes_its_digest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    source = tmp_path / "hollownode"
    shutil.copytree(binaries.PROJECT_SOURCES["hollow-node"], source)
    monkeypatch.setitem(binaries.PROJECT_SOURCES, "hollow-node", source)
    before = binaries.source_digest("hollow-node")
    stand_in = source / "iptables-wrappers" / "pkg" / "iptables" / "iptables.go"
    stand_in.write_text(stand_in.read_text() + "// changed\n")
    assert binaries.source_digest("hollow-node") != before
    assert binaries.source_digest("kube-apiserver") is None


def test_only_a_1_38_kubelet_gets_the_ml_dsa_gate_its_plane_has() -> None:
    assert node_feature_gates("v1.38.0-beta.0") == ("PodCertificateMLDSA=true",)
    assert node_feature_gates("v1.37.2") == ()
    assert node_feature_gates("v1.36.5") == ()


def test_the_version_sensitive_tests_run_on_1_37_first_then_1_38_and_1_36() -> None:
    assert [v.split(".")[1] for v in binaries.TESTED_VERSIONS] == ["37", "38", "36"]
    assert binaries.TESTED_VERSIONS[0] == binaries.KUBERNETES_VERSION


def test_builds_use_go_1_27_unless_the_caller_chose_a_toolchain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GOTOOLCHAIN", raising=False)
    assert binaries.build_env()["GOTOOLCHAIN"] == "go1.27.3"
    monkeypatch.setenv("GOTOOLCHAIN", "local")
    assert binaries.build_env()["GOTOOLCHAIN"] == "local"


def test_a_stale_binary_is_named_for_the_build_to_replace() -> None:
    assert binaries.build_env(stale=["hollow-node"])["REBUILD"] == "hollow-node"
    assert binaries.build_env()["REBUILD"] == ""


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
