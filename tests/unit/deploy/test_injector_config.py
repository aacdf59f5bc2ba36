"""config/injector: an optional component with its own ServiceAccount, exactly the
injector's RBAC (nothing on Secrets), and a Deployment that holds no signing material."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.deploy.kustomize import CONFIG, find, render, write_overlay

NAMESPACE = "service-serving-signer"
SA = "service-serving-signer-injector"


@pytest.fixture(scope="module")
def with_injector(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return render(write_overlay(tmp_path_factory.mktemp("overlay")))


def rules_of(role: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    return sorted(
        (group, resource, tuple(sorted(rule["verbs"])))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    )


def test_injector_cluster_role_is_exactly_least_privilege(
    with_injector: list[dict[str, Any]],
) -> None:
    role = find(with_injector, "ClusterRole", SA)
    rw = ("get", "list", "patch", "watch")
    assert rules_of(role) == sorted(
        [
            ("admissionregistration.k8s.io", "validatingwebhookconfigurations", rw),
            ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", rw),
            ("apiregistration.k8s.io", "apiservices", rw),
            ("apiextensions.k8s.io", "customresourcedefinitions", rw),
            # labelled ConfigMaps (the informer's label selector; RBAC cannot narrow it)
            ("", "configmaps", rw),
            ("certificates.k8s.io", "clustertrustbundles", ("get", "list", "watch")),
            ("events.k8s.io", "events", ("create", "patch")),
        ]
    )
    for obj in with_injector:
        for rule in obj.get("rules", []):
            assert "secrets" not in rule["resources"]
            assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"]


def test_injector_bindings_name_only_its_own_service_account(
    with_injector: list[dict[str, Any]],
) -> None:
    binding = find(with_injector, "ClusterRoleBinding", SA)
    assert binding["roleRef"]["name"] == SA
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SA, "namespace": NAMESPACE}]
    lease_binding = find(with_injector, "RoleBinding", f"{SA}-leader-election")
    assert lease_binding["metadata"]["namespace"] == NAMESPACE
    # The signer's own ServiceAccount gains nothing from the component.
    signer_binding = find(with_injector, "ClusterRoleBinding", "service-serving-signer")
    assert signer_binding["roleRef"]["name"] == "service-serving-signer"


def test_injector_deployment_runs_only_the_injector_without_signing_files(
    with_injector: list[dict[str, Any]],
) -> None:
    from cli.main import build_options, run_command

    deployment = find(with_injector, "Deployment", SA)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SA
    assert all("secret" not in v and "configMap" not in v for v in pod["volumes"])
    (container,) = pod["containers"]
    assert container["image"] == "service-serving-signer:0.1.0"
    ctx = run_command.make_context("run", list(container["args"]))
    opts = build_options(dict(ctx.params))
    assert opts.controllers == {"injector"}
    assert opts.leader_elect_resource_name == SA
    pdb = find(with_injector, "PodDisruptionBudget", SA)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_default_install_does_not_enable_the_injector() -> None:
    from cli.main import build_options, run_command

    default = render(CONFIG / "default")
    assert not [o for o in default if o["metadata"]["name"] == SA]
    (container,) = find(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    ctx = run_command.make_context("run", list(container["args"]))
    assert "injector" not in build_options(dict(ctx.params)).controllers


def test_renderer_agrees_with_kubectl_kustomize_on_the_overlay(
    with_injector: list[dict[str, Any]], tmp_path: Path
) -> None:
    import shutil
    import subprocess

    import yaml

    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with built-in kustomize) is needed to cross-check config/"
    overlay = write_overlay(tmp_path)
    out = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone", str(overlay)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    theirs = sorted(
        (d for d in yaml.safe_load_all(out) if d), key=lambda o: (o["kind"], o["metadata"]["name"])
    )
    ours = sorted(with_injector, key=lambda o: (o["kind"], o["metadata"]["name"]))
    assert ours == theirs
