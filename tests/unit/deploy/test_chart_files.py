"""The chart's `files/` are copies of what config/ ships (the Prometheus rules, the
Grafana dashboard, the injector's and the unlinked bundle's admission policies), byte for
byte: one source, and `helm install` from the chart directory reads plain files (symlinks
there made every install print `found symbolic link in path`)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FILES = ROOT / "charts" / "service-serving-signer" / "files"
SOURCES = {
    "prometheus_rule.yaml": "config/prometheus/prometheus_rule.yaml",
    "dashboard.json": "config/grafana/service-serving-signer.json",
    "injector-admission-policy.yaml": "config/injector-admission-policy/policy.yaml",
    "unlinked-bundle-policy.yaml": "config/unlinked-bundle-policy/policy.yaml",
}


def test_the_chart_files_are_exactly_the_copies_named_here() -> None:
    assert sorted(p.name for p in FILES.iterdir()) == sorted(SOURCES)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_chart_file_is_a_plain_copy_of_its_config_source(name: str) -> None:
    copy, source = FILES / name, ROOT / SOURCES[name]
    assert not copy.is_symlink(), f"{copy.relative_to(ROOT)}: a copy, not a link"
    assert copy.read_bytes() == source.read_bytes(), (
        f"{copy.relative_to(ROOT)} differs from {SOURCES[name]}, its source: "
        f"cp {SOURCES[name]} {copy.relative_to(ROOT)}"
    )
