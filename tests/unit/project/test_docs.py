"""What the documentation tells an operator to type works, and the figures it quotes agree
with the manifests that quote them."""

from __future__ import annotations

import re
import subprocess

import yaml

from tests.unit.deploy.kustomize import CONFIG, render

ROOT = CONFIG.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
SIZING_SOURCES = [
    CONFIG / "manager" / "deployment.yaml",
    ROOT / "charts" / "service-serving-signer" / "values.yaml",
]


def _text() -> str:
    return "\n".join(page.read_text() for page in PAGES)


def test_event_commands_use_a_field_core_events_support() -> None:
    """`kubectl get events` lists core/v1 Events, whose field selectors are
    `involvedObject.*`; `regarding.*` exists only on events.k8s.io and is refused."""
    flat = " ".join(_text().split())
    assert "--field-selector regarding." not in flat
    assert "--field-selector involvedObject.name=" in flat


def test_sizing_comments_in_the_manifests_quote_the_performance_page() -> None:
    page = (ROOT / "docs" / "performance.md").read_text()
    model = re.search(r"RSS ≈ (\d+) MiB \+ (\d+) B per Pod", page)
    row = re.search(r"\| 150,000 [^|]*\| (\d+) MiB \(measured\) \| (\d+) MiB \(measured\)", page)
    assert model and row
    for source in SIZING_SOURCES:
        comment = " ".join(
            line.strip().lstrip("#").strip()
            for line in source.read_text().splitlines()
            if line.strip().startswith("#")
        )
        assert 'docs/performance.md "Sizing"' in comment, source
        assert f"{model.group(1)} MiB + ~{model.group(2)} B per Pod" in comment, source
        assert f"{row.group(1)} MiB steady" in comment, source
    shipped = re.search(r"The shipped Deployment requests (\d+Mi) and limits at (\d+Mi)", page)
    assert shipped
    deployment = yaml.safe_load((CONFIG / "manager" / "deployment.yaml").read_text())
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "signer"
    ]
    values = yaml.safe_load(SIZING_SOURCES[1].read_text())
    for resources in (container["resources"], values["resources"]):
        assert resources["requests"]["memory"] == shipped.group(1)
        assert resources["limits"]["memory"] == shipped.group(2)


def test_samples_land_in_the_namespace_their_comment_names() -> None:
    kustomization = (CONFIG / "samples" / "kustomization.yaml").read_text()
    command = re.search(r"kubectl [^\n]*apply -k config/samples", kustomization)
    assert command is not None
    named = re.findall(r"namespace:? (\w+)", kustomization)
    namespaces = set(named)
    assert len(namespaces) == 1, namespaces
    (namespace,) = namespaces
    for obj in render(CONFIG / "samples"):
        if obj["kind"] == "Namespace":  # the samples ship their namespace
            assert obj["metadata"]["name"] == namespace
        else:
            assert obj["metadata"].get("namespace") == namespace, obj["metadata"]["name"]


def test_the_documented_alert_test_command_runs_as_written() -> None:
    flat = " ".join((ROOT / "docs" / "operate.md").read_text().split())
    command = re.search(r"`(hack/test-alerts\.sh)`", flat)
    assert command is not None, "docs/operate.md names the command that runs the alert tests"
    result = subprocess.run(
        command.group(1).split(), cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_signer_decide_numbers_its_steps_as_reference_section_5_2_does() -> None:
    """A reader going from docs/reference.md §5.2 to signer/decide.py (or from the
    controller's "§5.2 step 6") finds the same step under the same number."""
    import signer.decide

    reference = (ROOT / "docs" / "reference.md").read_text()
    section = reference.split("### 5.2 Deciding", 1)[1].split("### 5.3", 1)[0]
    documented = re.findall(r"^(\d)\. \*\*", section, flags=re.M)
    numbered = re.findall(r"^(\d)\. \*\*", signer.decide.__doc__ or "", flags=re.M)
    assert documented == ["1", "2", "3", "4", "5", "6"]
    assert [n for n in numbered if n != "0"] == documented


def test_comments_speak_to_readers_not_to_a_duplicate_finder() -> None:
    note = "Intentional" + " repeat"  # spelled in two parts, so this file is no hit itself
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    marked = [
        f"{path}:{number}"
        for path in tracked
        if (ROOT / path).is_file()
        for number, line in enumerate((ROOT / path).read_text().splitlines(), 1)
        if note in line
    ]
    assert marked == []
