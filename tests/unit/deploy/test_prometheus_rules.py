"""The alert rules pass `promtool check rules` and the promtool unit tests in
config/prometheus/tests/alerts_test.yaml. promtool comes from hack/promtool.sh (Debian's
`prometheus` package unpacked into ~/.cache, no root install)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.deploy.kustomize import CONFIG

PROMTOOL_SH = CONFIG.parent / "hack" / "promtool.sh"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = subprocess.run(
        [str(PROMTOOL_SH), "--path"], capture_output=True, text=True, timeout=600
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    """The PrometheusRule's spec as a plain rule file, next to the promtool test file."""
    rule = yaml.safe_load((CONFIG / "prometheus" / "prometheus_rule.yaml").read_text())
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    shutil.copy(CONFIG / "prometheus" / "tests" / "alerts_test.yaml", tmp_path)
    return tmp_path


def run_promtool(promtool: str, rules_dir: Path, *args: str, timeout: float) -> str:
    """promtool's stdout, once it exited 0 (else the test fails with what it said)."""
    result = subprocess.run(
        [promtool, *args], cwd=rules_dir, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_promtool_check_rules_accepts_the_prometheus_rule(promtool: str, rules_dir: Path) -> None:
    result = run_promtool(promtool, rules_dir, "check", "rules", "rules.yaml", timeout=60)
    assert "SUCCESS" in result


def test_promtool_alert_unit_tests_pass(promtool: str, rules_dir: Path) -> None:
    result = run_promtool(promtool, rules_dir, "test", "rules", "alerts_test.yaml", timeout=120)
    assert "SUCCESS" in result


def test_every_alert_has_a_unit_test() -> None:
    rule = yaml.safe_load((CONFIG / "prometheus" / "prometheus_rule.yaml").read_text())
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    tests = yaml.safe_load((CONFIG / "prometheus" / "tests" / "alerts_test.yaml").read_text())
    tested = {
        case["alertname"]
        for group in tests["tests"]
        for case in group.get("alert_rule_test", [])
        if case["exp_alerts"]
    }
    assert alerts == tested


DOCS = CONFIG.parent / "docs"
RUNBOOK_BASE = "https://github.com/service-serving-signer/service-serving-signer/blob/main/docs/"


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation other than
    `-` and `_` dropped, spaces as `-`."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {
        github_anchor(line.lstrip("#"))
        for line in page.read_text().splitlines()
        if re.match(r"#{1,6} ", line)
    }


def test_github_anchor_follows_githubs_rule() -> None:
    assert github_anchor(" CA rotation (no restart)") == "ca-rotation-no-restart"
    assert github_anchor("ServiceServingSignerNoLeader") == "serviceservingsignernoleader"


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    """Every alert carries a runbook_url into docs/, at a heading of that page (the
    managed CA's are in docs/managed-ca.md; the others each have a section of their own
    in docs/troubleshoot.md)."""
    rule = yaml.safe_load((CONFIG / "prometheus" / "prometheus_rule.yaml").read_text())
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            name = alert["alert"]
            url = alert["annotations"].get("runbook_url", "")
            assert url.startswith(RUNBOOK_BASE), name
            page, _, anchor = url[len(RUNBOOK_BASE) :].partition("#")
            assert anchor in anchors(DOCS / page), f"{name}: no section #{anchor} in docs/{page}"
            if page == "troubleshoot.md":  # its "Alert runbooks": one section per alert
                assert anchor == name.lower(), name
