"""Code, tests, docs, deploy files and benchmarks say what a thing does, not which tracker entry
asked for it: a reader of the repository cannot see the tracker ("issue 22", "round 3",
"must-show 5", "finding 4" are references to nothing for them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TRACKER = re.compile(r"\b(issues? \d+\b(?!,\d)|round \d|must-shows?\b|finding \d)", re.I)
"""(`issue 31,700-year leaves` is the verb.)"""
SKIPPED = ("tests/unit/project/test_no_tracker_numbers.py",)
"""This file, which must spell what it looks for."""


def tracked_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    suffixes = (".py", ".md", ".yaml", ".yml", ".tpl", ".sh", ".toml", ".txt", ".json")
    return [
        path
        for path in listed
        if path.endswith(suffixes) and not path.startswith(SKIPPED) and (ROOT / path).is_file()
    ]


def test_nothing_cites_a_tracker_the_reader_cannot_see() -> None:
    cited = [
        f"{path}:{number}: {line.strip()}"
        for path in tracked_text_files()
        for number, line in enumerate((ROOT / path).read_text(errors="replace").splitlines(), 1)
        if TRACKER.search(line)
    ]
    assert cited == []
