"""The classification rules are each pinned by a test: `hack/knock-out-injector.py`
removes each rule in turn (on a copy of the checkout) and runs the tests that pin it;
every rule must make one fail. Run here so CI runs it, and a refactor that moves a
quoted line fails it instead of leaving the script to rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "knock-out-injector.py"


@pytest.mark.timeout(900)  # the suite's 300 s is too short for 24 rules on a loaded machine
def test_every_classification_rule_is_killed_by_a_test_when_knocked_out() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=900, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SURVIVED" not in result.stdout and "MISSING" not in result.stdout
