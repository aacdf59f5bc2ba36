"""Which build this is: the distribution's version and the source commit it was built from.

The commit comes from a `COMMIT` file next to this module, written by the image build
(`--build-arg VERSION_COMMIT`, hack/image.sh passes `git rev-parse HEAD`, with `-dirty`
for uncommitted changes) and shipped as package data; a development checkout without that
file asks git; anything else reports `unknown` rather than guessing.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "service-serving-signer"
_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BuildInfo:
    version: str
    commit: str


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def commit() -> str:
    stamped = _HERE / "COMMIT"
    if stamped.is_file():
        text = stamped.read_text(encoding="utf-8").strip()
        if text:
            return text
    return _git_commit() or "unknown"


def _git_commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", str(_HERE), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(_HERE), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


def current() -> BuildInfo:
    return BuildInfo(version=version(), commit=commit())
