"""`kubectl apply -k config/samples`, as the README and docs/install.md give it, on a fresh
kube-apiserver: it creates everything it names, its namespace included, and
`kubectl delete -k config/samples` removes it again."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import ControlPlane
from controlplane.binaries import tool
from kube.client import Client
from tests.integration.signer_harness import eventually

ROOT = Path(__file__).resolve().parents[2]
LINE = "kubectl apply -k config/samples"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    with ControlPlane.start() as started:
        yield started


def documented_lines() -> list[str]:
    """Each place the two pages give the samples' apply, as a shell line (a code block's
    line without its comment, or the command in backquotes)."""
    lines = []
    for page in (ROOT / "README.md", ROOT / "docs" / "install.md"):
        text = page.read_text()
        found = [m.split("#", 1)[0].strip() for m in re.findall(rf"^\s*({LINE}.*)$", text, re.M)]
        found += re.findall(rf"`({LINE}[^`]*)`", text)
        assert found, f"{page.name} no longer documents {LINE!r}"
        lines += found
    return sorted(set(lines))


def run(plane: ControlPlane, line: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tool("kubectl").parent
    return subprocess.run(
        ["bash", "-c", line],
        cwd=ROOT,
        env={
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "KUBECONFIG": str(plane.kubeconfig),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_documented_samples_apply_creates_its_namespace_and_workloads(
    plane: ControlPlane,
) -> None:
    """On a cluster with no `demo` namespace, the documented line exits 0 and leaves the
    Deployment, the StatefulSet and their Services in `demo`; delete -k takes them back."""
    client: Client = plane.client()
    assert all(ns["metadata"]["name"] != "demo" for ns in client.get("/api/v1/namespaces")["items"])
    for line in documented_lines():
        done = run(plane, line)
        assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr}"
    assert client.get("/apis/apps/v1/namespaces/demo/deployments/web")
    assert client.get("/apis/apps/v1/namespaces/demo/statefulsets/db")
    assert client.get("/api/v1/namespaces/demo/services/web")
    done = run(plane, "kubectl delete -k config/samples --wait=false")
    assert done.returncode == 0, done.stderr

    def terminating() -> bool:
        namespaces = client.get("/api/v1/namespaces")["items"]
        demo = [ns for ns in namespaces if ns["metadata"]["name"] == "demo"]
        return not demo or bool(demo[0]["metadata"].get("deletionTimestamp"))

    eventually(terminating, timeout=30, what="namespace demo deleted")
