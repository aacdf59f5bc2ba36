"""Who may write the Leases the managed CA's gates read, in every kustomize install:
the signer's leader Lease and its replicas' reports only by the signer's ServiceAccount;
the injector's leader Lease and convergence report by the injector's ServiceAccount, by
name only, and shipped (its Role has no create); nothing else in the signer's namespace
for anyone. The Deployments' own Lease names are the ones the Roles name, so the narrowed
Roles still let the shipped processes lead and report."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.kustomize import CONFIG, find, render
from trust.convergence import REPORT_NAME  # one name, whatever the injector's Lease

NAMESPACE = "service-serving-signer"
SIGNER_SA = "service-serving-signer"
INJECTOR_SA = "service-serving-signer-injector"
WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}


def _overlay(directory: Path, base: str, *components: str) -> Path:
    rel = [os.path.relpath(CONFIG / c, directory) for c in components]
    (directory / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{os.path.relpath(CONFIG / base, directory)}]\n"
        f"components: [{', '.join(rel)}]\n"
    )
    return directory


def _base(name: str) -> Callable[[Path], Path]:
    return lambda _tmp: CONFIG / name


def _with_injector(base: str) -> Callable[[Path], Path]:
    return lambda tmp: _overlay(tmp, base, "injector")


INSTALLS: dict[str, Callable[[Path], Path]] = {
    "default": _base("default"),
    "managed": _base("managed"),
    "default+injector": _with_injector("default"),
    "managed+injector": _with_injector("managed"),
}


@pytest.fixture(params=sorted(INSTALLS))
def install(request: pytest.FixtureRequest, tmp_path: Path) -> list[dict[str, Any]]:
    return render(INSTALLS[request.param](tmp_path))


def lease_rules(
    objects: list[dict[str, Any]], sa: str
) -> list[tuple[frozenset[str], tuple[str, ...]]]:
    """(verbs, resourceNames) of every rule on Leases in the signer's namespace that is
    bound to ServiceAccount `sa` (by a RoleBinding there or a ClusterRoleBinding)."""
    roles = {
        (o["kind"], o["metadata"]["name"]): o
        for o in objects
        if o["kind"] in ("Role", "ClusterRole")
    }
    out = []
    for binding in objects:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if binding["kind"] == "RoleBinding" and binding["metadata"]["namespace"] != NAMESPACE:
            continue
        subjects = binding.get("subjects") or []
        if not any(s.get("kind") == "ServiceAccount" and s["name"] == sa for s in subjects):
            continue
        role = roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            if {"coordination.k8s.io", "*"} & set(rule["apiGroups"]) and {"leases", "*"} & set(
                rule["resources"]
            ):
                out.append((frozenset(rule["verbs"]), tuple(rule.get("resourceNames") or ())))
    return out


def lease_name(deployment: dict[str, Any]) -> str:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    [name] = [
        str(a).split("=", 1)[1]
        for a in container["args"]
        if a.startswith("--leader-elect-resource-name=")
    ]
    return name


def service_accounts(objects: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}


def test_only_the_signers_service_account_writes_leases_not_named(
    install: list[dict[str, Any]],
) -> None:
    for sa in service_accounts(install):
        for verbs, names in lease_rules(install, sa):
            if verbs & WRITES and not names:
                assert sa == SIGNER_SA, (sa, sorted(verbs))


def test_the_signers_leader_election_role_names_its_lease(install: list[dict[str, Any]]) -> None:
    role = find(install, "Role", "service-serving-signer-leader-election")
    lease = lease_name(find(install, "Deployment", "service-serving-signer"))
    by_verbs = {frozenset(r["verbs"]): tuple(r.get("resourceNames") or ()) for r in role["rules"]}
    # create cannot be narrowed by name (RBAC sees no name on a create)
    assert by_verbs == {
        frozenset({"create"}): (),
        frozenset({"get", "update"}): (lease, REPORT_NAME),
    }


@pytest.mark.parametrize("install_name", ["default+injector", "managed+injector"])
def test_the_injector_writes_only_its_own_two_leases_which_are_shipped(
    install_name: str, tmp_path: Path
) -> None:
    objects = render(INSTALLS[install_name](tmp_path))
    lease = lease_name(find(objects, "Deployment", "service-serving-signer-injector"))
    mine = {lease, REPORT_NAME}
    rules = lease_rules(objects, INJECTOR_SA)
    assert rules, "the injector needs its Leases"
    for verbs, names in rules:
        assert verbs <= {"get", "update"}, sorted(verbs)  # no create, patch, delete, list
        assert set(names) == mine, names
    shipped = {
        o["metadata"]["name"]
        for o in objects
        if o["kind"] == "Lease" and o["metadata"]["namespace"] == NAMESPACE
    }
    assert shipped == mine
    signer_lease = lease_name(find(objects, "Deployment", "service-serving-signer"))
    assert signer_lease not in mine


def test_no_install_grants_anyone_else_leases(install: list[dict[str, Any]]) -> None:
    assert service_accounts(install) <= {SIGNER_SA, INJECTOR_SA}
    for obj in install:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for subject in obj.get("subjects") or []:
                if subject["kind"] != "ServiceAccount":
                    # Groups (the status Role: every authenticated user may `get` the
                    # signer's leader Lease) never write one.
                    role = find(install, obj["roleRef"]["kind"], obj["roleRef"]["name"])
                    for rule in role["rules"]:
                        if "leases" in rule["resources"]:
                            assert set(rule["verbs"]) == {"get"}, rule
                            assert rule.get("resourceNames"), rule
