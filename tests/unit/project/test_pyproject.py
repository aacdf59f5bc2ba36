"""pyproject.toml installs without setuptools' deprecation warnings (PEP 639 license)."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())


def test_license_is_an_spdx_string_not_the_deprecated_table() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"


def test_build_backend_is_new_enough_to_read_an_spdx_license() -> None:
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert floor is not None and int(floor.group(1)) >= 77, setuptools


def test_every_subpackage_of_a_shipped_package_is_in_the_wheel() -> None:
    """A subpackage the include list does not name is left out of the wheel and the image,
    and `run` fails on its import there while every test from the checkout passes."""
    root = Path(__file__).resolve().parents[3]
    include: list[str] = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = {name.split(".")[0] for name in include}
    on_disk = {
        ".".join(init.parent.relative_to(root).parts)
        for top in tops
        for init in (root / top).rglob("__init__.py")
    }
    # setuptools' find matches each package's dotted name against the patterns (fnmatch).
    left_out = {name for name in on_disk if not any(fnmatch(name, p) for p in include)}
    assert left_out == set()
