"""The Dockerfile as text: multi-stage on Debian bookworm-slim (a build argument) with
Debian's python3, dependencies hash-pinned by requirements.lock and installed with
--require-hashes without resolution, a non-root numeric user, the `run` entry point, and
no test harness in the build context. (tests/integration/test_image.py builds and runs
the image.)"""

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


def lock_entries(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name → (version, hashes) of a pip-compile --generate-hashes file."""
    text = re.sub(r"\\\n", " ", path.read_text())
    entries: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            spec, *options = line.split()
            name, sep, version = spec.partition("==")
            assert sep, f"unpinned line in {path.name}: {line!r}"
            hashes = [o.removeprefix("--hash=") for o in options if o.startswith("--hash=")]
            entries[canonicalize_name(name)] = (version, hashes)
    return entries


def lock() -> dict[str, str]:
    return {name: v for name, (v, _) in lock_entries(ROOT / "requirements.lock").items()}


def test_is_multi_stage_on_a_debian_base_build_argument() -> None:
    args = dict(rest.split("=", 1) for kw, rest in instructions() if kw == "ARG" and "=" in rest)
    assert args["BASE_IMAGE"] == "docker.io/library/debian:bookworm-slim"
    froms = [rest for kw, rest in instructions() if kw == "FROM"]
    assert len(froms) >= 2
    assert all(f.startswith("${BASE_IMAGE}") for f in froms)
    runtime = stages()[-1]
    assert any(kw == "COPY" and rest.startswith("--from=build") for kw, rest in runtime)
    # Debian's python3, not a python.org build: the base stands in faithfully.
    assert any(
        kw == "RUN" and "apt-get install" in rest and "python3" in rest for kw, rest in runtime
    )


def test_every_lock_entry_carries_sha256_hashes() -> None:
    for path in (ROOT / "requirements.lock", ROOT / "hack" / "build-requirements.lock"):
        for name, (_, hashes) in lock_entries(path).items():
            assert hashes, f"{path.name}: {name} has no --hash"
            assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_build_tools_are_locked_and_stay_out_of_the_runtime_stage() -> None:
    build = lock_entries(ROOT / "hack" / "build-requirements.lock")
    assert set(build) == {"setuptools", "wheel"}
    assert not set(build) & set(lock())
    runtime = " ".join(rest for _, rest in stages()[-1])
    assert "/opt/build" not in runtime and "pip" not in runtime


def test_runtime_stage_runs_as_non_root_numeric_user() -> None:
    users = [rest for kw, rest in stages()[-1] if kw == "USER"]
    assert users, "runtime stage sets no USER"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) == 65532
    assert not group or group.isdigit()


def test_entrypoint_is_service_serving_signer_run() -> None:
    entrypoints = [rest for kw, rest in stages()[-1] if kw == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["service-serving-signer", "run"]


def test_dependencies_install_only_from_the_locks_with_hashes_without_resolution() -> None:
    pip_runs = [rest for kw, rest in instructions() if kw == "RUN" and "pip " in rest]
    installs = [
        command
        for run in pip_runs
        for command in re.split(r"&&", run)
        if re.search(r"pip( --python \S+)? install", command)
    ]
    assert installs
    for command in installs:
        assert "--no-deps" in command, command
        if " -r " in command:
            assert "--require-hashes" in command, command
    assert any("-r requirements.lock" in c for c in installs)
    assert any("-r build-requirements.lock" in c for c in installs)
    assert any(
        "pip check" in rest or "pip --python /opt/venv/bin/python check" in rest
        for rest in pip_runs
    )


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
    "path",
    ["kube", "trust", "signer", "publisher", "injector", "managedca", "manager", "pyproject.toml"],
)
def test_dockerignore_lets_the_sources_in(path: str) -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in lines
    assert f"!{path}/" in lines or f"!{path}" in lines
    copies = " ".join(rest for kw, rest in instructions() if kw == "COPY")
    assert path in copies


@pytest.mark.parametrize("path", ["controlplane", "tests", "bench"])
def test_test_harness_is_not_in_the_build_context(path: str) -> None:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    assert f"!{path}/" not in lines and f"!{path}" not in lines
    copies = " ".join(rest for kw, rest in instructions() if kw == "COPY")
    assert path not in copies.split()
