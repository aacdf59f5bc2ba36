"""The Grafana dashboard (config/grafana, shipped in the chart too): every panel's PromQL
parses with promtool, and every metric a panel names is exported by a running signer
(the real CLI against the local control plane) — a renamed metric breaks this test, not
the dashboard in someone's Grafana."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import ControlPlane
from tests.integration.manager_process import eventually, signer_with_a_new_ca
from tests.unit.deploy.kustomize import CONFIG

DASHBOARD = CONFIG / "grafana" / "service-serving-signer.json"
CHART_COPY = CONFIG.parent / "charts" / "service-serving-signer" / "files" / "dashboard.json"
# Grafana's variables, as Grafana would expand them for one query.
VARIABLES = {
    "$__rate_interval": "5m",
    "$injector_job": ".+",
    "$job": ".+",
    "${job}": ".+",
}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without"}


def panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out += [panel, *panel.get("panels", [])]
    return [p for p in out if p.get("targets")]


def expressions() -> list[tuple[str, str]]:
    """(panel title, expression with Grafana's variables expanded)."""
    found = []
    for panel in panels():
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            found.append((panel["title"], expr))
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a (valid) PromQL expression selects."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for token in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if text[token.end() :].lstrip().startswith("(") or token.group() in KEYWORDS:
            continue
        names.add(token.group())
    return names


def exported(metrics_text: str) -> set[str]:
    return {
        re.split(r"[{ ]", line, maxsplit=1)[0]
        for line in metrics_text.splitlines()
        if line and not line.startswith("#")
    }


@pytest.fixture(scope="module")
def promtool() -> str:
    found = subprocess.run(
        [str(CONFIG.parent / "hack" / "promtool.sh"), "--path"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


def test_every_panel_query_parses_with_promtool(promtool: str, tmp_path: Path) -> None:
    exprs = expressions()
    assert len(exprs) >= 16
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"panel:{i}", "expr": e} for i, (_, e) in enumerate(exprs)],
            }
        ]
    }
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [promtool, "check", "rules", "panels.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


def test_promtool_rejects_a_broken_panel_query(promtool: str, tmp_path: Path) -> None:
    """The check above can fail: a malformed query is reported."""
    rules = {"groups": [{"name": "x", "rules": [{"record": "r", "expr": "sum by (le (x)"}]}]}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [promtool, "check", "rules", "bad.yaml"], cwd=tmp_path, capture_output=True, check=False
    )
    assert result.returncode != 0


def test_metric_names_are_read_from_queries() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, name) "
        '(rate(workqueue_queue_duration_seconds_bucket{job=~".+"}[5m])))'
        " + min(a_total > 0) - time()"
    )
    assert metric_names(expr) == {"workqueue_queue_duration_seconds_bucket", "a_total"}


def test_dashboard_covers_what_operators_watch() -> None:
    named = set().union(*(metric_names(e) for _, e in expressions()))
    for metric in [
        "service_serving_ca_controller_requests_total",
        "service_serving_ca_controller_denied_total",
        "service_serving_ca_controller_pending_requests",
        "service_serving_ca_controller_oldest_pending_seconds",
        "service_serving_ca_controller_issuance_duration_seconds_bucket",
        "service_serving_ca_controller_signer_ttl_seconds",
        "service_serving_ca_controller_trust_bundle_expiry_seconds",
        "workqueue_depth",
        "workqueue_retries_total",
        "leader_election_master_status",
        "service_serving_ca_controller_material_invalid",
        "service_serving_ca_controller_material_info",
        "cabundle_injector_sync_total",
        "cabundle_injector_anchor_expiry_seconds",
        "cabundle_injector_objects",
    ]:
        assert metric in named, metric
    assert CHART_COPY.read_text() == DASHBOARD.read_text()


def test_every_metric_a_panel_names_is_exported_by_a_running_signer(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    signer = signer_with_a_new_ca(
        control_plane,
        tmp_path,
        "--leader-elect-resource-name=dashboard-test",
        "--controllers=*,injector",  # every controller's metrics in one process
    )
    try:
        assert eventually(signer.ready, 60), "\n".join(signer.log_lines()[-20:])
        assert eventually(signer.leading, 30)
        code, text = signer.get("/metrics")
        assert code == 200
        have = exported(text)
        for title, expr in expressions():
            missing = metric_names(expr) - have
            assert not missing, (
                f"panel {title!r} names metrics the signer does not export: {missing}"
            )
    finally:
        assert signer.stop() == 0
