"""In a Pod the client's settings are read as client-go's `rest.InClusterConfig` reads
them, without the official `kubernetes` package: `run` there never loads it."""

from __future__ import annotations

import ast
import json
import socket
import ssl
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from kube import incluster
from kube.client import Client, pool_manager

ROOT = Path(__file__).resolve().parents[3]
POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture
def mounted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ServiceAccount volume kubelet mounts, under tmp_path."""
    (tmp_path / "token").write_text("projected")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster, "TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setattr(incluster, "CA_FILE", str(tmp_path / "ca.crt"))
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_a_pod_reaches_the_service_address_with_the_service_account_ca(mounted: Path) -> None:
    server = incluster.in_cluster(POD)
    assert server is not None
    assert (server.host, server.ssl_ca_cert, server.verify_ssl) == (
        "https://10.96.0.1:443",
        str(mounted / "ca.crt"),
        True,
    )
    assert server.proxy is None


def test_an_ipv6_service_address_is_bracketed(mounted: Path) -> None:
    server = incluster.in_cluster({**POD, "KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert server is not None and server.host == "https://[fd00::1]:443"


@pytest.mark.parametrize(
    ("environ", "remove"),
    [
        ({}, None),
        ({**POD, "KUBERNETES_SERVICE_PORT": ""}, None),
        (POD, "token"),
        (POD, "ca.crt"),
        (POD, "empty ca.crt"),
    ],
    ids=["no-variables", "empty-port", "no-token", "no-ca", "empty-ca"],
)
def test_outside_a_pod_there_is_no_in_cluster_config(
    mounted: Path, environ: dict[str, str], remove: str | None
) -> None:
    if remove == "empty ca.crt":
        (mounted / "ca.crt").write_text("")
    elif remove is not None:
        (mounted / remove).unlink()
    assert incluster.in_cluster(environ) is None


def test_the_environment_proxy_applies_unless_no_proxy_names_the_server(
    mounted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    server = incluster.in_cluster(POD)
    assert server is not None and server.proxy == "http://proxy.example:3128"
    monkeypatch.setenv("NO_PROXY", "10.96.0.1")
    server = incluster.in_cluster(POD)
    assert server is not None and server.proxy is None


def test_the_pool_verifies_with_the_ca_and_keeps_connections_alive(mounted: Path) -> None:
    server = incluster.in_cluster(POD)
    assert server is not None
    pool = pool_manager(server)
    settings = pool.connection_pool_kw
    assert settings["ca_certs"] == str(mounted / "ca.crt")
    assert settings["cert_reqs"] == ssl.CERT_REQUIRED
    assert settings["maxsize"] == 32
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in settings["socket_options"]


def test_the_client_of_a_pod_reads_the_rotating_token(
    mounted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in POD.items():
        monkeypatch.setenv(name, value)
    client = Client.from_kubeconfig(None, qps=0)
    assert client.host == "https://10.96.0.1:443"
    assert client.credentials.headers() == {"Authorization": "Bearer projected"}


RUN_IN_A_POD = """
import json, sys
from kube import incluster
incluster.TOKEN_FILE, incluster.CA_FILE = sys.argv[1], sys.argv[2]

import cli.main, manager.app, manager.controllers
import signer.controller, publisher.controller, injector.controller
import distributor.controller, managedca.controller
from kube.client import Client

client = Client.from_kubeconfig(None)
print(json.dumps({
    "host": client.host,
    "kubernetes": sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes"),
}))
"""


def test_run_in_a_pod_never_imports_the_official_client(mounted: Path) -> None:
    """The process `run` starts — the command line, the manager, every controller, the
    in-cluster client — leaves `kubernetes` unloaded (~19 MiB of RSS it would cost)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(RUN_IN_A_POD),
            str(mounted / "token"),
            str(mounted / "ca.crt"),
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **POD},
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == {"host": "https://10.96.0.1:443", "kubernetes": []}


def _kubernetes_imports() -> dict[str, list[str]]:
    """Runtime modules that import `kubernetes` → the functions that do (`<module>` for a
    top-level import)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = config["tool"]["setuptools"]["packages"]["find"]["include"]
    found: dict[str, list[str]] = {}
    for package in sorted({name.split(".")[0] for name in shipped} - {"controlplane"}):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for scope in [tree, *ast.walk(tree)]:
                if not isinstance(scope, ast.Module | ast.FunctionDef):
                    continue
                for node in scope.body:
                    names = (
                        [a.name for a in node.names]
                        if isinstance(node, ast.Import)
                        else [node.module or ""]
                        if isinstance(node, ast.ImportFrom)
                        else []
                    )
                    if any(n.split(".")[0] == "kubernetes" for n in names):
                        where = scope.name if isinstance(scope, ast.FunctionDef) else "<module>"
                        found.setdefault(str(path.relative_to(ROOT)), []).append(where)
    return found


def test_only_a_kubeconfig_is_read_with_the_official_client() -> None:
    """Loading a kubeconfig (its exec and auth-provider plugins) is the one thing the
    official client does for us, imported where a kubeconfig is read and nowhere else."""
    assert _kubernetes_imports() == {
        "cli/common.py": ["_context_namespace"],
        "kube/client.py": ["from_kubeconfig", "from_kubeconfig"],
    }
