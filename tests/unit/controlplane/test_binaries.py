"""Which control-plane binaries a run would build, per kube-apiserver version, with which
Go toolchain, which versions the version-sensitive tests run on, the flags that make each
tested version serve the certificates APIs, and the demo saying it builds only when it
does."""

from __future__ import annotations

import os
import shutil
import subprocess
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


def test_a_kubelet_gets_the_gates_its_plane_has() -> None:
    """1.38: the ML-DSA gate; 1.37: none (the APIs are GA); 1.36: the beta gates of
    PodCertificateRequest and ClusterTrustBundle projection, as its kube-apiserver."""
    assert node_feature_gates("v1.38.0-beta.0") == ("PodCertificateMLDSA=true",)
    assert node_feature_gates("v1.37.2") == ()
    assert node_feature_gates("v1.36.5") == (
        "PodCertificateRequest=true",
        "ClusterTrustBundle=true",
        "ClusterTrustBundleProjection=true",
    )


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


# 1.38 as it ships ---------------------------------------------------------------------------

SERVED_TODAY = ["v1.37.1", "v1.37.2", "v1.38.0-alpha.1", "v1.38.0-beta.0"]


def test_without_ga_the_newest_pre_release_is_taken_and_said() -> None:
    choice = binaries.choose_next(SERVED_TODAY)
    assert choice.version == "v1.38.0-beta.0"
    assert "v1.38.0 is not served by the Go module proxy yet" in choice.why
    assert "newest 1.38 pre-release it serves, v1.38.0-beta.0" in choice.why


def test_ga_is_taken_the_day_the_proxy_serves_it() -> None:
    served = [*SERVED_TODAY, "v1.38.0-rc.0", "v1.38.0-rc.1", "v1.38.0", "v1.39.0-alpha.0"]
    assert binaries.choose_next(served) == binaries.NextChoice(
        "v1.38.0", "Kubernetes 1.38: v1.38.0, released"
    )
    assert binaries.choose_next([*served, "v1.38.2", "v1.38.10"]).version == "v1.38.10"


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (["v1.38.0-rc.0", "v1.38.0-beta.2", "v1.38.0-alpha.3"], "v1.38.0-rc.0"),
        (["v1.38.0-beta.10", "v1.38.0-beta.9"], "v1.38.0-beta.10"),
        (["v1.39.0-rc.0", "v1.37.2"], binaries.NEXT_KNOWN),
        ([], binaries.NEXT_KNOWN),
    ],
)
def test_pre_releases_order_by_stage_then_number(served: list[str], expected: str) -> None:
    assert binaries.choose_next(served).version == expected


def test_the_next_version_can_be_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_NEXT_VERSION", "v1.38.0-rc.1")
    assert binaries.resolve_next().version == "v1.38.0-rc.1"


def test_a_kept_answer_is_reused_without_asking(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_NEXT_VERSION", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    record = binaries.cache_dir().parent / "next-version.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"version": "v1.38.0", "why": "kept"}')
    monkeypatch.setattr(binaries, "served_versions", lambda: pytest.fail("asked the proxy"))
    assert binaries.resolve_next() == binaries.NextChoice("v1.38.0", "kept")


def test_an_unreachable_proxy_falls_back_to_the_last_answer_then_the_known_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_NEXT_VERSION", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(binaries, "served_versions", lambda: None)
    assert binaries.resolve_next().version == binaries.NEXT_KNOWN
    record = binaries.cache_dir().parent / "next-version.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"version": "v1.38.0-rc.1", "why": "old"}')
    os.utime(record, (0, 0))  # stale: the proxy is asked, and cannot answer
    assert binaries.resolve_next().version == "v1.38.0-rc.1"


class FakeProxy:
    """A Go module proxy over HTTP that serves `served` versions of k8s.io/kubernetes
    (`@v/<version>.info`) but lists only `listed` (`@v/list`); any other version gets
    the 403 "This module version is not available." a real proxy gives."""

    def __init__(self, listed: list[str], served: list[str]) -> None:
        import http.server
        import threading

        outer = self
        self.asked: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked.append(self.path)
                prefix = "/k8s.io/kubernetes/@v/"
                name = self.path.removeprefix(prefix)
                if self.path == prefix + "list":
                    self._answer(200, "".join(f"{v}\n" for v in listed))
                elif name.endswith(".info") and name.removesuffix(".info") in served:
                    version = name.removesuffix(".info")
                    self._answer(200, f'{{"Version":"{version}","Time":"2026-12-16T00:00:00Z"}}')
                else:
                    self._answer(403, "This module version is not available.")

            def _answer(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


LISTED = ["v1.36.1", "v1.36.3", "v1.37.2", "v1.38.0-beta.0"]


@pytest.mark.parametrize(
    ("unlisted", "expected"),
    [
        (["v1.36.5", "v1.37.1"], "v1.38.0-beta.0"),
        (["v1.38.0-rc.0", "v1.38.0-rc.1"], "v1.38.0-rc.1"),
        (["v1.38.0-rc.0", "v1.38.0-rc.1", "v1.38.0"], "v1.38.0"),
        (["v1.38.0", "v1.38.1"], "v1.38.1"),
    ],
)
def test_a_version_the_proxy_serves_but_does_not_list_is_found_by_asking_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, unlisted: list[str], expected: str
) -> None:
    """1.38 on day 0: the proxy's list omits versions it serves, so the probe asks for
    v1.38.0, its patches and its release candidates by name, and the build moves to GA
    the day it is servable."""
    proxy = FakeProxy(LISTED, [*LISTED, *unlisted])
    try:
        monkeypatch.setenv("GOPROXY", f"{proxy.url},direct")
        monkeypatch.delenv("KUBERNETES_NEXT_VERSION", raising=False)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
        served = binaries.served_versions()
        assert served is not None and set(LISTED) <= set(served)
        assert binaries.choose_next(served).version == expected
        assert binaries.resolve_next().version == expected
        assert "/k8s.io/kubernetes/@v/v1.38.0.info" in proxy.asked
    finally:
        proxy.close()


def test_a_proxy_that_cannot_be_reached_is_no_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9,off")
    assert binaries.served_versions() is None


def test_a_hollow_kubelet_with_another_resync_is_a_binary_of_its_own_from_the_same_source() -> None:
    """`hollow-node-resync-60` is hollownode with a 60 s Pod resync: its own file beside the
    shared `hollow-node` (building it never replaces that one), stale whenever hollownode's
    source changes."""
    assert binaries.hollow_node_binary() == "hollow-node"
    assert binaries.hollow_node_binary(60) == "hollow-node-resync-60"
    assert binaries.source_digest("hollow-node-resync-60") == binaries.source_digest("hollow-node")
    with pytest.raises(ValueError):
        binaries.hollow_node_binary(0)


def test_the_build_finds_the_one_resync_line_it_changes_in_the_hollow_kubelet() -> None:
    """build-binaries.sh sets the resync of `hollow-node-resync-<N>` by rewriting this exact
    line of hollownode/kubelet.go (and refuses to build when it is not there once)."""
    kubelet = binaries.PROJECT_SOURCES["hollow-node"] / "kubelet.go"
    line = "\tc.SyncFrequency.Duration = 10 * time.Second"
    assert kubelet.read_text().splitlines().count(line) == 1
    assert line.strip() in binaries.BUILD_SCRIPT.read_text().replace("\\", "")


def test_the_1_36_compatibility_patch_still_applies_to_the_hollow_kubelets_source(
    tmp_path: Path,
) -> None:
    """build-binaries.sh builds hollow-node for 1.36 from hollownode/ with
    hollownode-v1.36.patch applied (1.36's kubelet packages predate two calls it makes):
    a change to hollownode/ that the patch no longer fits fails here, not in a 1.36 build."""
    source = binaries.PROJECT_SOURCES["hollow-node"]
    patch = source.with_name("hollownode-v1.36.patch")
    for go in source.glob("*.go"):
        shutil.copy(go, tmp_path / go.name)
    result = subprocess.run(
        ["patch", "--dry-run", "-d", str(tmp_path), "-p1"],
        input=patch.read_bytes(),
        capture_output=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
