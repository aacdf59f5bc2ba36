"""Helm and kustomize for the deploy tests: the chart and config/ paths, `helm` and
`kustomize` run from the project's tool cache, rendered documents, and an overlay of
config/default as users write one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from controlplane.binaries import tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "service-serving-signer"
CONFIG = ROOT / "config"
RELEASE = NAMESPACE = "service-serving-signer"


def helm(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool("helm")), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "HELM_CACHE_HOME": "/tmp/helm-cache", **(env or {})},
    )


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def template(*sets: str) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    result = helm(*args)
    assert result.returncode == 0, result.stderr
    return docs(result.stdout)


def kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [str(tool("kustomize")), "build", str(directory)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return docs(result.stdout)


def overlay(tmp_path: Path, *components: str, config: Path = CONFIG) -> Path:
    """An overlay of config/default (of the tree at `config`) with the named components,
    as users write one."""
    directory = tmp_path / f"overlay-{len(list(tmp_path.glob('overlay*')))}"
    directory.mkdir()
    rel = os.path.relpath(config, directory)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{rel}/default"],
                "components": [f"{rel}/{c}" for c in components],
            }
        )
    )
    return directory
