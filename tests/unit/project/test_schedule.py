"""How `make test` hands test files to its workers (tests/schedule.py): the named files
exist, files sharing dist/ form one unit, the spread file's tests are units of their own,
and the long files are handed out before the others, the unit tests last."""

from __future__ import annotations

from pathlib import Path

from tests.schedule import FIRST, SPREAD, TOGETHER, rank, scope_of

ROOT = Path(__file__).resolve().parents[3]


def test_every_file_the_schedule_names_exists() -> None:
    named = {*FIRST, *SPREAD, *TOGETHER}
    assert [path for path in sorted(named) if not (ROOT / path).is_file()] == []


def test_files_writing_dist_run_as_one_unit_and_others_by_file_or_test() -> None:
    [group] = set(TOGETHER.values())
    assert {scope_of(f"{path}::test_x[a]") for path in TOGETHER} == {group}
    [spread] = sorted(SPREAD)
    assert scope_of(f"{spread}::test_x[a]") != scope_of(f"{spread}::test_x[b]")
    other = "tests/integration/test_presence.py"
    assert scope_of(f"{other}::test_x[a]") == scope_of(f"{other}::test_y") == other


def test_long_files_go_first_then_integration_then_unit_files() -> None:
    scopes = [
        "tests/unit/signer/test_policy.py",
        "tests/integration/test_presence.py",
        scope_of(f"{FIRST[1]}::test_x"),
        scope_of(f"{FIRST[0]}::test_x"),
        TOGETHER["tests/integration/test_documented_install.py"],
    ]
    ordered = sorted(scopes, key=rank)
    assert ordered[:2] == [scope_of(f"{FIRST[0]}::test_x"), scope_of(f"{FIRST[1]}::test_x")]
    assert ordered[-2:] == [
        "tests/integration/test_presence.py",
        "tests/unit/signer/test_policy.py",
    ]
    assert rank(TOGETHER["tests/integration/test_dist_output.py"]) == rank(
        "tests/integration/test_documented_install.py"
    )
