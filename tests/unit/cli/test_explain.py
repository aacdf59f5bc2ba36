"""`explain`/`status` command surface: kubectl's ways of naming things, the plugin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cli.explain import _target, plugin
from cli.main import main


@pytest.mark.parametrize(
    ("kind", "name", "namespace", "expected"),
    [
        ("pod", "web-0", None, ("pod", None, "web-0")),
        ("pod", "shop/web-0", None, ("pod", "shop", "web-0")),
        ("pod/web-0", None, None, ("pod", None, "web-0")),
        ("pods", "web-0", "shop", ("pod", None, "web-0")),
        ("podcertificaterequest", "req-x", None, ("pcr", None, "req-x")),
        ("pcr", "shop/req-x", "shop", ("pcr", "shop", "req-x")),
    ],
)
def test_targets_as_kubectl_names_them(
    kind: str, name: str | None, namespace: str | None, expected: tuple[str, str | None, str]
) -> None:
    assert _target(kind, name, namespace) == expected


@pytest.mark.parametrize(
    ("kind", "name", "namespace", "complaint"),
    [
        ("deployment", "web", None, "unknown kind 'deployment'"),
        ("pod", None, None, "name a Pod or a request"),
        ("pod", "a/b/c", None, "is not NAME or NAMESPACE/NAME"),
        ("pod", "shop/web-0", "other", "names namespace shop, but -n says other"),
    ],
)
def test_bad_targets_are_one_line_errors(
    kind: str, name: str | None, namespace: str | None, complaint: str
) -> None:
    with pytest.raises(click.ClickException, match=complaint):
        _target(kind, name, namespace)


def test_explain_all_takes_no_name() -> None:
    result = CliRunner().invoke(main, ["explain", "pod", "web-0", "--all"])
    assert result.exit_code == 1
    assert result.stderr == "error: explain: --all takes no Pod or request name\n"


def test_plugin_offers_explain_and_status_with_kubectl_flags() -> None:
    assert sorted(plugin.commands) == ["explain", "status"]
    result = CliRunner().invoke(plugin, ["explain", "--help"], prog_name="kubectl service-serving")
    assert result.exit_code == 0
    for flag in ("-n, --namespace", "--context", "--kubeconfig", "-o, --output", "--all"):
        assert flag in result.stdout


def test_kubectl_finds_the_plugin_executable() -> None:
    """kubectl looks up `kubectl-service_serving` on PATH for `kubectl service-serving`."""
    found = shutil.which("kubectl-service_serving", path=str(Path(sys.executable).parent))
    assert found is not None, "console script missing: reinstall the project (make venv)"
    result = subprocess.run(
        [found, "status", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: kubectl service-serving status [OPTIONS]")


def test_the_plugins_help_names_the_plugin_as_it_was_invoked() -> None:
    """`kubectl service-serving-signer status --help` says `kubectl service-serving-signer`,
    the older name says its own."""
    found = shutil.which("kubectl-service_serving_signer", path=str(Path(sys.executable).parent))
    assert found is not None, "console script missing: reinstall the project (make venv)"
    result = subprocess.run(
        [found, "status", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: kubectl service-serving-signer status [OPTIONS]")
