"""The package layering (docs/design.md "Where code goes"): `kube/` is generic, `trust/`
is about certificates and bundles, each controller package stands on those two alone,
`manager/` is the process, `troubleshoot/` the read-only tools, `cli/` the command line on
top of them all, and nothing that ships imports the development harness (`controlplane/`,
which the image does not carry, or `tests/`, `bench/`, `soak/`). Every import counts,
including those made inside functions."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
HARNESS = {"controlplane", "tests", "bench", "soak"}
BASE = {"kube", "trust"}
TOOLS = {"manager", "troubleshoot", "cli"}
"""The packages by audience that are not controllers: the process, the read-only tools and
the command line."""


def _packages() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted({name.split(".")[0] for name in found})


PACKAGES = _packages()
RUNTIME = [p for p in PACKAGES if p not in HARNESS]
CONTROLLERS = [p for p in RUNTIME if p not in BASE | TOOLS]
OURS = set(PACKAGES) | HARNESS


def imports_of(package: str) -> dict[str, set[str]]:
    """Our top-level packages that `package` imports → the files that import them."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in OURS and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_the_packages_are_the_ones_the_rules_name() -> None:
    assert {"kube", "trust", "controlplane"} | TOOLS <= set(PACKAGES)
    assert CONTROLLERS == ["distributor", "injector", "managedca", "publisher", "signer"]
    assert "controlplane" not in RUNTIME


@pytest.mark.parametrize("package", RUNTIME)
def test_no_runtime_package_imports_the_development_harness(package: str) -> None:
    harness = {k: v for k, v in imports_of(package).items() if k in HARNESS}
    assert harness == {}


def test_kube_imports_nothing_of_ours() -> None:
    assert imports_of("kube") == {}


def test_trust_stands_on_kube_alone() -> None:
    assert set(imports_of("trust")) <= {"kube"}


@pytest.mark.parametrize("package", CONTROLLERS)
def test_a_controller_package_imports_no_other_controller(package: str) -> None:
    others = {k: v for k, v in imports_of(package).items() if k not in BASE}
    assert others == {}


def test_the_process_imports_controllers_but_no_tool_and_no_command_line() -> None:
    assert set(imports_of("manager")) <= BASE | set(CONTROLLERS)


def test_the_troubleshooting_tools_read_the_signer_decision_and_nothing_of_the_process() -> None:
    """`explain` runs the signer's own `decide`; it needs no process, command line or other
    controller to tell the truth."""
    assert set(imports_of("troubleshoot")) <= BASE | {"signer", "managedca"}


@pytest.mark.parametrize("package", [p for p in RUNTIME if p != "cli"])
def test_nothing_imports_the_command_line(package: str) -> None:
    assert "cli" not in imports_of(package)


def test_a_decoded_object_has_one_type_name_defined_once_in_kube() -> None:
    """`JSON = dict[str, Any]` lives in `kube.types`; a module that redefines it drifts
    from it unseen."""
    pattern = re.compile(r"^JSON(\s*:\s*TypeAlias)?\s*=", re.M)
    defined = sorted(
        str(path.relative_to(ROOT))
        for top in [*PACKAGES, *HARNESS]
        for path in (ROOT / top).rglob("*.py")
        if pattern.search(path.read_text())
    )
    assert defined == ["kube/types.py"]
