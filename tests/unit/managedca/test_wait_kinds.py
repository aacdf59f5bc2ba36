"""Which waits are held and which are the calendar is stated once
(`managedca.decide.WAIT_KINDS`): the narrator's Warnings, the ManagedCAWaiting alert's
regex and docs/managed-ca.md are derived from it, and this test compares each with it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from managedca import decide as d
from managedca import faults, narrator

ROOT = Path(__file__).resolve().parents[3]
ALERT = "ServiceServingSignerManagedCAWaiting"


def _alert_expr() -> str:
    rules = yaml.safe_load((ROOT / "config/prometheus/prometheus_rule.yaml").read_text())
    for group in rules["spec"]["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == ALERT:
                return str(rule["expr"])
    raise AssertionError(f"no {ALERT} rule")


def test_every_wait_reason_is_of_one_kind() -> None:
    assert set(d.WAIT_KINDS.values()) == {d.CALENDAR, d.PASSING, d.HELD}
    assert tuple(d.WAIT_KINDS) == d.WAIT_REASONS


def test_the_narrator_warns_for_the_held_waits_only() -> None:
    assert frozenset(d.waits(d.HELD)) == narrator.HELD


def test_the_alert_regex_is_rendered_from_the_statement() -> None:
    expr = _alert_expr()
    found = re.search(r'managed_ca_waiting\{reason!~"([^"]*)"\}', expr)
    assert found, expr
    assert found.group(1) == d.alert_regex(), (
        f"the alert excludes {found.group(1)!r}; managedca.decide says {d.alert_regex()!r}"
    )


def test_the_docs_say_which_waits_are_held_as_rendered() -> None:
    doc = (ROOT / "docs/managed-ca.md").read_text()
    found = re.search(r"<!-- wait-kinds -->\n(.*?)<!-- /wait-kinds -->", doc, re.S)
    assert found and found.group(1) == faults.render_wait_kinds(), (
        "regenerate it: .venv/bin/python -m managedca.faults"
    )
    for reason in d.WAIT_REASONS:  # the reason table: the calendar ones say so
        row = re.search(rf"^\| `{re.escape(reason)}` \| (.*?) \|", doc, re.M)
        if row is None:
            continue  # documented with another (`injector-report-missing` / `-stale`)
        assert row.group(1).startswith("the calendar") == (d.WAIT_KINDS[reason] == d.CALENDAR), (
            reason
        )
