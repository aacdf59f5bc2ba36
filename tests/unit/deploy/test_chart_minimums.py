"""The chart refuses the managed-CA values `run` refuses (`retireMargin=1m` installed and
crash-looped): its template's minimums are the binary's constants (the propagation delay's
two: without and with the unlinked bundle)."""

from __future__ import annotations

import re
from pathlib import Path

from manager.options import (
    KUBELET_PROJECTION_WORST_CASE,
    MIN_RETIRE_MARGIN,
    UNLINKED_PROJECTION_WORST_CASE,
)

TEMPLATE = (
    Path(__file__).resolve().parents[3]
    / "charts"
    / "service-serving-signer"
    / "templates"
    / "_managed-ca.tpl"
)


def _minimums(variable: str) -> list[int]:
    # `lt $delay 0.0` is the sign check, not a minimum.
    found = re.findall(rf"lt \${variable} (\d+(?:\.\d+)?)", TEMPLATE.read_text())
    return sorted(int(float(f)) for f in found if float(f) > 0)


def test_the_charts_managed_ca_minimums_are_the_binarys() -> None:
    assert _minimums("margin") == [MIN_RETIRE_MARGIN]
    assert _minimums("delay") == sorted(
        [UNLINKED_PROJECTION_WORST_CASE, KUBELET_PROJECTION_WORST_CASE]
    )
