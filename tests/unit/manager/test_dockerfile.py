"""The Dockerfile (parsed, not built — there is no Docker daemon in CI): multi-stage on a
slim Python base, dependencies pinned by requirements.lock and installed without
resolution, a non-root numeric user, and the `run` entry point."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
RUNTIME_ROOTS = ["kubernetes", "cryptography", "prometheus-client", "tenacity", "click", "orjson"]


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    result = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def stages() -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            out.append([])
        if out:
            out[-1].append((keyword, rest))
    return out


def lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"unpinned line in requirements.lock: {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def test_is_multi_stage_on_python_311_slim() -> None:
    args = dict(rest.split("=", 1) for kw, rest in instructions() if kw == "ARG" and "=" in rest)
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    froms = [rest for kw, rest in instructions() if kw == "FROM"]
    assert len(froms) >= 2
    assert all(f.startswith("${PYTHON_IMAGE}") for f in froms)
    runtime = stages()[-1]
    assert any(kw == "COPY" and rest.startswith("--from=build") for kw, rest in runtime)


def test_runtime_stage_runs_as_non_root_numeric_user() -> None:
    users = [rest for kw, rest in stages()[-1] if kw == "USER"]
    assert users, "runtime stage sets no USER"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) == 65532
    assert not group or group.isdigit()


def test_entrypoint_is_service_serving_signer_run() -> None:
    entrypoints = [rest for kw, rest in stages()[-1] if kw == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["service-serving-signer", "run"]


def test_dependencies_install_only_from_the_lock_without_resolution() -> None:
    pip_runs = [rest for kw, rest in instructions() if kw == "RUN" and "pip install" in rest]
    for run in pip_runs:
        for command in re.split(r"&&", run):
            if "/opt/venv/bin/pip install" in command:
                assert "--no-deps" in command, command
    assert any("-r requirements.lock" in run for run in pip_runs)
    for run in pip_runs:
        for spec in re.findall(r"\b([A-Za-z][\w.-]*)([=<>~!]=?)([\w.]+)", run):
            assert spec[1] == "==", f"build tool not pinned exactly: {spec}"
    assert any("pip check" in rest for kw, rest in instructions() if kw == "RUN")


def test_lock_pins_exactly_the_runtime_closure_at_tested_versions() -> None:
    closure: dict[str, str] = {}
    todo = list(RUNTIME_ROOTS)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in closure:
            continue
        dist = metadata.distribution(name)
        closure[name] = dist.version
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    assert lock() == closure


def test_lock_covers_pyproject_dependencies() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = lock()
    for raw in project["dependencies"]:
        req = Requirement(raw)
        name = canonicalize_name(req.name)
        assert name in pins, name
        assert req.specifier.contains(pins[name]), (name, pins[name], str(req.specifier))


@pytest.mark.parametrize(
    "path", ["kube", "trust", "signer", "publisher", "manager", "pyproject.toml"]
)
def test_dockerignore_lets_the_sources_in(path: str) -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines
    assert f"!{path}/" in lines or f"!{path}" in lines
    copies = " ".join(rest for kw, rest in instructions() if kw == "COPY")
    assert path in copies
