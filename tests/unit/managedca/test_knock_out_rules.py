"""hack/knock-out-gates.py removes each gate and rule of the managed CA in turn and runs
the unit tests against the weakened code (minutes: run it by hand or in CI). This keeps
it honest between runs: every rule's text is still in the code, exactly once, so a
refactor cannot silently turn a knock-out into a no-op."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("knock_out", ROOT / "hack/knock-out-gates.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()
RULES = [
    (kind, name, file, text)
    for kind, rules in (("gate", TOOL.GATES), ("subsumed", TOOL.SUBSUMED))
    for name, edits in rules.items()
    for file, text, _ in edits
]


@pytest.mark.parametrize(("kind", "name", "file", "text"), RULES, ids=[r[1] for r in RULES])
def test_every_knock_out_rule_still_matches_the_code_once(
    kind: str, name: str, file: str, text: str
) -> None:
    assert (ROOT / file).read_text().count(text) == 1, (
        f"{kind} {name!r}: its text is not in {file} exactly once; update the script"
    )
