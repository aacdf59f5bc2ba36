"""The chart refuses the managed-CA values `run` refuses (`retireMargin=1m` installed and
crash-looped): its template's minimums are the binary's constants."""

from __future__ import annotations

import re
from pathlib import Path

from manager.options import KUBELET_PROJECTION_WORST_CASE, MIN_RETIRE_MARGIN

TEMPLATE = (
    Path(__file__).resolve().parents[3]
    / "charts"
    / "service-serving-signer"
    / "templates"
    / "_managed-ca.tpl"
)


def _minimum(variable: str) -> int:
    pattern = rf"if (?:and \()?lt \${variable} (\d+(?:\.\d+)?)\)?"
    # `lt $delay 0.0` is the sign check, not the minimum.
    found = [f for f in re.findall(pattern, TEMPLATE.read_text()) if float(f) > 0]
    assert len(found) == 1, f"one minimum for ${variable} in {TEMPLATE.name}"
    return int(float(found[0]))


def test_the_charts_managed_ca_minimums_are_the_binarys() -> None:
    assert _minimum("margin") == MIN_RETIRE_MARGIN
    assert _minimum("delay") == KUBELET_PROJECTION_WORST_CASE
