"""`make release` (hack/release.sh) refuses, before building anything, a tree with
uncommitted changes — naming them — and a base image not pinned by digest unless told
(`RELEASE_ALLOW_UNPINNED_BASE=1`); `ca init --out ca` in the checkout writes a key git
ignores."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PINNED = "docker.io/library/debian:bookworm-slim@sha256:" + "0" * 64
# What release.sh reads before it builds; hack/image.sh is a stub recording its call.
COPIED = (
    "pyproject.toml",
    "Dockerfile",
    "charts/service-serving-signer/Chart.yaml",
    "hack/release.sh",
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name in COPIED:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repo / name)
    stub = repo / "hack" / "image.sh"
    stub.write_text('#!/bin/sh\necho "image.sh called BASE_IMAGE=${BASE_IMAGE:-}" >&2\nexit 3\n')
    stub.chmod(0o755)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release")
    return repo


def release(repo: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("RELEASE_", "BASE_IMAGE"))}
    return subprocess.run(
        ["bash", "hack/release.sh"],
        cwd=repo,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_dirty_tree_is_refused_with_the_files_named(repo: Path) -> None:
    (repo / "Dockerfile").write_text("# edited\n")
    (repo / "notes.txt").write_text("untracked\n")
    done = release(repo, BASE_IMAGE=PINNED)
    assert done.returncode == 1
    assert "the tree has uncommitted changes" in done.stderr
    assert " M Dockerfile" in done.stderr
    assert "?? notes.txt" in done.stderr
    assert "image.sh called" not in done.stderr


def test_an_unpinned_base_image_is_refused_unless_allowed(repo: Path) -> None:
    refused = release(repo)
    assert refused.returncode == 1
    assert "is not pinned by digest" in refused.stderr
    assert "RELEASE_ALLOW_UNPINNED_BASE=1" in refused.stderr
    assert "image.sh called" not in refused.stderr
    allowed = release(repo, RELEASE_ALLOW_UNPINNED_BASE="1")
    assert "warning: the base image" in allowed.stderr
    assert "image.sh called BASE_IMAGE=\n" in allowed.stderr


def test_a_pinned_base_image_is_built_on(repo: Path) -> None:
    done = release(repo, BASE_IMAGE=PINNED)
    assert "not pinned" not in done.stderr
    assert f"image.sh called BASE_IMAGE={PINNED}" in done.stderr


def test_the_quick_installs_ca_directory_is_ignored_by_git() -> None:
    """README: `ca init --out ca` in the checkout; the private key is never one
    `git add -A` from a commit."""
    paths = ["ca/ca.key", "ca/ca.crt", "ca/trust-bundle.pem"]
    done = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", *paths], capture_output=True, text=True
    )
    assert done.stdout.split() == paths
