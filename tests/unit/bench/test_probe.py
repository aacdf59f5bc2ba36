"""The bench's CPU-interference probe times a real unit of signer work."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import probe


def test_probe_counts_units_of_work_and_their_cpu(tmp_path: Path) -> None:
    checks = iter(range(200))
    result = probe.run_probe(tmp_path, lambda: next(checks) >= 3)

    assert result["units"] >= 3
    assert result["cpu_ms_per_unit"] > 0


def test_probe_runs_in_a_child_process_for_as_long_as_a_body_lasts(tmp_path: Path) -> None:
    quiet = probe.quiet(tmp_path, 0.2)
    with probe.Beside(tmp_path) as beside:
        pass  # even a body that ends at once gets one slice of work timed

    assert quiet["units"] > 0 and quiet["cpu_ms_per_unit"] > 0
    assert beside.result["units"] > 0 and beside.result["cpu_ms_per_unit"] > 0


def test_a_failing_body_is_not_masked_by_the_probe(tmp_path: Path) -> None:
    with pytest.raises(KeyError), probe.Beside(tmp_path) as beside:
        raise KeyError("the drain failed")

    assert beside.result == {}
