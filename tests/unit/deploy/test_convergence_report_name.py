"""The injector writes its convergence report where the managed CA reads it, in every
documented install, through the shipped arguments alone (trust.convergence.report_lease:
the process's leader-election namespace and `--managed-ca-injector-report`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from cli.main import build_options, run_command
from kube.leases import LeaseRef
from manager.controllers import convergence_report, managed_ca_settings
from manager.options import Options
from tests.unit.deploy.kustomize import CONFIG, find, render
from trust.convergence import report_lease

CHART = CONFIG.parent / "charts" / "service-serving-signer" / "templates"


def options(args: list[str], namespace: str) -> Options:
    """`run`'s options from a container's args, in a Pod of `namespace` (where the
    leader-election namespace defaults to)."""
    ctx = run_command.make_context("run", list(args))
    values = dict(ctx.params)
    values["leader_elect_resource_namespace"] = (
        values["leader_elect_resource_namespace"] or namespace
    )
    return build_options(values)


def written(opts: Options) -> LeaseRef:
    """Where the process's injector writes the report (its wiring)."""
    return convergence_report(opts)


def read(opts: Options) -> LeaseRef:
    """Where the process's managed CA reads it (its settings, through the rule)."""
    settings = managed_ca_settings(opts)
    return report_lease(settings.namespace, settings.injector_report or "")


def deployment_args(objects: list[dict[str, Any]], name: str) -> tuple[list[str], str]:
    deployment = find(objects, "Deployment", name)
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return list(container["args"]), deployment["metadata"]["namespace"]


def overlay(directory: Path, base: str) -> Path:
    resources = os.path.relpath(CONFIG / base, directory)
    injector = os.path.relpath(CONFIG / "injector", directory)
    (directory / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{resources}]\ncomponents: [{injector}]\n"
    )
    return directory


def test_one_process_writes_where_it_reads() -> None:
    for extra in ([], ["--leader-elect-resource-name=service-serving-signer"]):
        opts = options(["--controllers=*,injector", "--ca-mode=managed", *extra], "sss")
        assert written(opts) == read(opts)
        assert read(opts) == LeaseRef("sss", "service-serving-signer-injector-convergence")


def test_the_injector_deployment_beside_config_default_or_config_managed_agrees(
    tmp_path: Path,
) -> None:
    # config/managed replaces the signer's args with its patch's (a list: replaced whole,
    # which the test renderer does not do, so they are read from the patch).
    patch = yaml.safe_load((CONFIG / "managed-ca" / "deployment_patch.yaml").read_text())
    [managed] = patch["spec"]["template"]["spec"]["containers"]
    for base in ("default", "managed"):
        (tmp_path / base).mkdir()
        objects = render(overlay(tmp_path / base, base))
        args, namespace = deployment_args(objects, "service-serving-signer")
        signer = options(managed["args"] if base == "managed" else args, namespace)
        injector = options(*deployment_args(objects, "service-serving-signer-injector"))
        assert "injector" in injector.controllers and "injector" not in signer.controllers
        assert signer.managed_ca == (base == "managed")
        assert written(injector) == read(signer), base


def test_the_chart_passes_nothing_that_could_part_the_two_under_any_release_name() -> None:
    """Both Deployments run in the release's namespace; the rule reads no Lease or
    release name, so the chart passes neither the report's name nor a namespace."""
    for template in CHART.iterdir():
        text = template.read_text()
        assert "--managed-ca-injector-report" not in text, template.name
        assert "--leader-elect-resource-namespace" not in text, template.name
    injector = (CHART / "injector.yaml").read_text()
    assert re.search(r"namespace: \{\{ \.Release\.Namespace \}\}", injector)
