"""Each kind the injector writes (`injector.kinds.ALL_KINDS`) is allowed exactly where it
must be: an RBAC rule granting get/list/watch/patch on its resource in
config/injector/cluster_role.yaml and in the chart's templates/injector.yaml, and a
ValidatingAdmissionPolicy on its UPDATEs with a binding in
config/injector-admission-policy/policy.yaml. A kind added without them fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from injector.kinds import ALL_KINDS
from injector.targets import Kind

ROOT = Path(__file__).resolve().parents[3]
CLUSTER_ROLE = ROOT / "config" / "injector" / "cluster_role.yaml"
CHART = ROOT / "charts" / "service-serving-signer" / "templates" / "injector.yaml"
POLICY = ROOT / "config" / "injector-admission-policy" / "policy.yaml"
INJECTOR_VERBS = {"get", "list", "watch", "patch"}

_RULE = re.compile(
    r"-\s*apiGroups:\s*\[(?P<groups>[^\]]*)\]\s*\n\s*resources:\s*\[(?P<resources>[^\]]*)\]"
    r"\s*\n\s*verbs:\s*\[(?P<verbs>[^\]]*)\]"
)


def _words(text: str) -> set[str]:
    return {w.strip().strip("\"'") for w in text.split(",") if w.strip()}


def rules_in(text: str) -> list[tuple[set[str], set[str], set[str]]]:
    """(apiGroups, resources, verbs) of each rule written in flow style, as both files do
    (the chart's template is not YAML until rendered, so the rules are read as text)."""
    return [
        (_words(m["groups"]), _words(m["resources"]), _words(m["verbs"]))
        for m in _RULE.finditer(text)
    ]


def granted(rules: list[tuple[set[str], set[str], set[str]]], kind: Kind) -> set[str]:
    verbs: set[str] = set()
    for groups, resources, rule_verbs in rules:
        if kind.group in groups and kind.resource in resources:
            verbs |= rule_verbs
    return verbs


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.kind)
@pytest.mark.parametrize("where", [CLUSTER_ROLE, CHART], ids=["config", "chart"])
def test_every_kind_has_its_rbac_rule(kind: Kind, where: Path) -> None:
    """The injector's ClusterRole (config and chart) lets it list, watch and patch the
    kind: an informer or a write of a kind without it fails only on a real cluster."""
    assert granted(rules_in(where.read_text()), kind) >= INJECTOR_VERBS, (
        f"{where.relative_to(ROOT)} grants {sorted(granted(rules_in(where.read_text()), kind))} "
        f"on {kind.group or 'core'}/{kind.resource}; the injector needs {sorted(INJECTOR_VERBS)}"
    )


def policies() -> tuple[list[dict[str, Any]], set[str]]:
    docs = [d for d in yaml.safe_load_all(POLICY.read_text()) if isinstance(d, dict)]
    found = [d for d in docs if d.get("kind") == "ValidatingAdmissionPolicy"]
    bound = {
        d["spec"]["policyName"]
        for d in docs
        if d.get("kind") == "ValidatingAdmissionPolicyBinding"
        and "Deny" in d["spec"].get("validationActions", [])
    }
    return found, bound


@pytest.mark.parametrize("kind", ALL_KINDS, ids=lambda k: k.kind)
def test_every_kind_has_an_admission_policy_on_its_updates_and_a_binding(kind: Kind) -> None:
    """A stolen injector token may patch any object of every kind the RBAC grants: each
    kind has a ValidatingAdmissionPolicy confining its UPDATEs to what the injector
    writes, bound with Deny."""
    found, bound = policies()
    covering = [
        policy["metadata"]["name"]
        for policy in found
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        if kind.group in rule["apiGroups"]
        and kind.resource in rule["resources"]
        and "UPDATE" in rule["operations"]
    ]
    assert covering, f"no admission policy covers UPDATE of {kind.resource}"
    assert set(covering) & bound, f"the policies {covering} on {kind.resource} are not bound"


def test_the_rule_reader_sees_the_files_rules() -> None:
    """The reader above is not vacuous: it finds every rule of the ClusterRole."""
    rules = rules_in(CLUSTER_ROLE.read_text())
    role = yaml.safe_load(CLUSTER_ROLE.read_text())
    assert len(rules) == len(role["rules"])
    assert len(rules_in(CHART.read_text())) >= len(rules)
