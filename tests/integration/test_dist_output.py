"""`make dist` (hack/dist.sh) says what it does in a few lines and prints the two files;
setuptools' ~550 lines of `copying …`/`adding …` are kept back unless the build fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]


def test_make_dist_prints_its_steps_and_the_two_files_not_setuptools_chatter() -> None:
    done = subprocess.run(
        ["bash", "hack/dist.sh"], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == sorted(done.stdout.split()) and len(done.stdout.split()) == 2
    assert len(done.stderr.splitlines()) <= 3, done.stderr[:2000]
    assert "copying" not in done.stderr and "adding '" not in done.stderr
