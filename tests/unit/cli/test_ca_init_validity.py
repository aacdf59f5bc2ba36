"""`ca init --validity` refuses a CA too short to sign with: `10s` used to write a CA that
was already expired (its notBefore is backdated 5 minutes), and `-5h` printed the
cryptography library's message."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main


@pytest.mark.parametrize("validity", ["10s", "1h59m", "-5h", "0"])
def test_ca_init_refuses_a_validity_shorter_than_two_hours(tmp_path: Path, validity: str) -> None:
    result = CliRunner().invoke(
        main, ["ca", "init", "--out", str(tmp_path), "--validity", validity]
    )
    assert result.exit_code == 1
    assert "ca init: --validity" in result.output
    assert "at least 2h0m0s" in result.output
    assert "not valid after" not in result.output
    assert not list(tmp_path.iterdir()), "nothing written"


def test_ca_init_accepts_two_hours(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["ca", "init", "--out", str(tmp_path), "--validity", "2h"])
    assert result.exit_code == 0, result.output
