"""`service-serving-signer version`: the distribution's version and the commit the build
was made from — the image's stamped COMMIT file, else git in a checkout, else `unknown`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli.main import main
from manager import buildinfo

ROOT = Path(__file__).resolve().parents[3]


def test_version_prints_version_and_the_checkouts_commit() -> None:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    result = CliRunner().invoke(main, ["version", "-o", "json"])
    assert result.exit_code == 0
    info = json.loads(result.stdout)
    assert info["name"] == "service-serving-signer"
    assert info["version"] == buildinfo.version()
    assert info["commit"] in (head, f"{head}-dirty")
    text = CliRunner().invoke(main, ["version", "--client"]).stdout
    assert text == f"service-serving-signer {info['version']} (commit {info['commit']})\n"


def test_a_stamped_commit_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "COMMIT").write_text("0123abc\n")
    monkeypatch.setattr(buildinfo, "_HERE", tmp_path)
    assert buildinfo.commit() == "0123abc"


def test_outside_a_checkout_without_a_stamp_the_commit_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(buildinfo, "_HERE", tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert buildinfo.commit() == "unknown"
