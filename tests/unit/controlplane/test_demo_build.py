"""`make demo` builds only what the demo's cluster runs — Kubernetes 1.37's kube-apiserver,
etcd, kube-controller-manager and hollow-node — not the other versions, tools and Traefik
that `make test` builds first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from controlplane import binaries, demo

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_demo_runs_the_demo_without_building_every_test_binary_first() -> None:
    """`make -n demo` (what the target would run, nothing run) names the demo and not
    `binaries.main()`, which builds 1.38, 1.36 and Traefik for `make test`."""
    plan = subprocess.run(
        ["make", "-n", "--no-print-directory", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m controlplane.demo" in plan
    assert "controlplane.binaries" not in plan
    assert "controlplane " not in plan.replace("controlplane.demo", "")


def test_the_demos_build_step_builds_only_the_main_versions_cluster_binaries(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On an empty cache the demo builds etcd, kube-apiserver, kube-controller-manager and
    hollow-node, all of `KUBERNETES_VERSION`, and nothing else."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "hollow-node"):
        monkeypatch.delenv(f"TEST_ASSET_{name.upper().replace('-', '_')}", raising=False)
    built: list[tuple[str, str]] = []

    def build(names: list[str], version: str = binaries.KUBERNETES_VERSION) -> None:
        directory = binaries.cache_dir(version)
        directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            built.append((name, version))
            (directory / name).write_text("#!/bin/sh\n")
            (directory / name).chmod(0o755)
            digest = binaries.source_digest(name)
            if digest is not None:
                (directory / f"{name}.sha256").write_text(digest + "\n")

    monkeypatch.setattr(binaries, "build", build)
    monkeypatch.setattr(binaries, "traefik", lambda *a, **k: pytest.fail("built traefik"))
    demo.ensure_binaries()
    assert sorted(built) == sorted((n, binaries.KUBERNETES_VERSION) for n in demo.DEMO_BINARIES)
    built.clear()
    demo.ensure_binaries()  # cached: nothing more
    assert built == []
