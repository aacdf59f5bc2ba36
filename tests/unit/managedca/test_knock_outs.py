"""Every gate and rule of the managed CA is pinned by a test: `hack/knock-out-gates.py`
removes each in turn (in a copy of the checkout) and runs the managed CA's tests against
the weakened code; every gate must make one fail. Run here so CI runs it: a gate added
without a test that kills it, or a test weakened until it no longer does, fails the suite.
(test_knock_out_rules.py checks, quickly, that each rule's text is still in the code.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "hack" / "knock-out-gates.py"


@pytest.mark.timeout(1800)  # ~57 rules, 5 min on an idle machine, more beside the suite
def test_every_gate_of_the_managed_ca_is_killed_by_a_test_when_knocked_out() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=1800, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "survives" not in result.stdout, result.stdout
