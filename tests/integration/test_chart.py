"""The Helm chart (charts/service-serving-signer) against config/ and the real
API server: `helm lint` (with values.schema.json), `helm template` with default values
renders the same objects as `kustomize build config/default` — and with every optional
part on, the same as config/default plus the prometheus, grafana, networkpolicy and
injector components — compared object by object with labels aside; every rendered object passes
server-side dry-run; `helm install` really installs. helm and kustomize are built from Go
modules (controlplane/build-binaries.sh)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from kube.client import Client
from tests.integration.chart_harness import (
    CHART,
    CONFIG,
    NAMESPACE,
    RELEASE,
    docs,
    helm,
    kustomize,
    overlay,
    template,
)
from tests.integration.manifests import (
    RESOURCES,
    apply,
    ensure_monitoring_crds,
    ensure_namespace,
)
from trust.convergence import REPORT_NAME

ALL_OPTIONS = [
    "prometheus.serviceMonitor.enabled=true",
    "prometheus.rules.enabled=true",
    "grafanaDashboard.enabled=true",
    "networkPolicy.enabled=true",
    "bundleReaders.enabled=true",
    "injector.enabled=true",
    "injector.distribution.enabled=true",
    "injector.admissionPolicy.enabled=true",
    "flowControl.enabled=true",
    "metrics.secure=true",
    "unlinkedBundle.enabled=true",
]

# What the chart renders with every option on: each kind the tests apply (their API paths
# in manifests.RESOURCES) but a Namespace (Helm's --create-namespace) and a StatefulSet.
CHART_KINDS = set(RESOURCES) - {"Namespace", "StatefulSet"}


def without_labels(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with every `labels` map of object metadata dropped (labels aside)."""
    out: dict[str, Any] = json.loads(json.dumps(obj))
    out["metadata"].pop("labels", None)
    template_meta = (out.get("spec") or {}).get("template", {}).get("metadata")
    if isinstance(template_meta, dict):
        template_meta.pop("labels", None)
    return out


def by_identity(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    keyed = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in keyed, f"rendered twice: {key}"
        keyed[key] = without_labels(obj)
    return keyed


def assert_same_objects(chart: list[dict[str, Any]], config: list[dict[str, Any]]) -> None:
    ours, theirs = by_identity(chart), by_identity(config)
    assert sorted(ours) == sorted(theirs)
    for key in sorted(ours):
        assert ours[key] == theirs[key], key


def test_helm_lint_passes_with_the_values_schema() -> None:
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("replicaCount=0", "replicaCount"),
        ("image.digest=latest", "digest"),
        ("logFormat=xml", "logFormat"),
        ("signerName=no-slash", "signerName"),
        ("nosuchvalue=1", "nosuchvalue"),
    ],
)
def test_values_schema_rejects_bad_values(value: str, complaint: str) -> None:
    result = helm("template", RELEASE, str(CHART), "--set", value)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_helm_template_defaults_equal_kustomize_config_default() -> None:
    assert_same_objects(template(), kustomize(CONFIG / "default"))


def test_helm_template_with_every_option_equals_config_with_every_component(
    tmp_path: Path,
) -> None:
    config = kustomize(
        overlay(
            tmp_path,
            "prometheus",
            "grafana",
            "networkpolicy",
            "bundle-readers",
            "injector",
            "injector-distribution",
            "injector-admission-policy",
            "flowcontrol",
            "metrics-secure",
            "unlinked-bundle-policy",
        )
    )
    assert {o["kind"] for o in config} >= {"NetworkPolicy", "ConfigMap", "PrometheusRule"}
    assert_same_objects(template(*ALL_OPTIONS), config)


def test_helm_template_with_a_managed_ca_equals_config_managed() -> None:
    """managedCA.enabled: no Secret/ConfigMap volumes, --ca-mode=managed, the namespaced
    Role; and no Secret in the chart (the controller makes it, so uninstall keeps it)."""
    rendered = template("managedCA.enabled=true")
    assert not [o for o in rendered if o["kind"] == "Secret"]
    assert_same_objects(rendered, kustomize(CONFIG / "managed"))


REPORT = REPORT_NAME  # the contract's one name


def test_another_release_names_the_injectors_leases_it_runs_with_and_ships_them() -> None:
    """`helm install sss …`: the injector elects on `sss-service-serving-signer-injector`
    and reports under the contract's one name, where the signer reads it with no flag;
    its Role may get/update exactly these two Leases (no create), both shipped; the
    signer's Role names the signer's own Lease (and the report, for one process)."""
    result = helm(
        "template", "sss", str(CHART), "--namespace", "ops", "--set", "injector.enabled=true"
    )
    assert result.returncode == 0, result.stderr
    rendered = docs(result.stdout)
    injector = next(
        o
        for o in rendered
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("injector")
    )
    args = injector["spec"]["template"]["spec"]["containers"][0]["args"]
    [lease] = [a.split("=", 1)[1] for a in args if a.startswith("--leader-elect-resource-name=")]
    assert lease == "sss-service-serving-signer-injector"
    role = next(
        o
        for o in rendered
        if o["kind"] == "Role" and o["metadata"]["name"] == f"{lease}-leader-election"
    )
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [lease, REPORT],
            "verbs": ["get", "update"],
        }
    ]
    shipped = {o["metadata"]["name"] for o in rendered if o["kind"] == "Lease"}
    assert shipped == {lease, REPORT}
    assert all(o["metadata"]["namespace"] == "ops" for o in rendered if o["kind"] == "Lease")
    signer = next(
        o
        for o in rendered
        if o["kind"] == "Role"
        and o["metadata"]["name"] == "sss-service-serving-signer-leader-election"
    )
    named = [r["resourceNames"] for r in signer["rules"] if r["verbs"] == ["get", "update"]]
    assert named == [["service-serving-signer", REPORT]]


def test_image_digest_value_pins_the_image() -> None:
    digest = "sha256:" + "ab" * 32
    rendered = template(f"image.digest={digest}", "image.repository=registry.example/sss")
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"registry.example/sss@{digest}"


def test_every_rendered_object_passes_server_side_dry_run(client: Client) -> None:
    ensure_monitoring_crds(client)
    ensure_namespace(client, NAMESPACE)
    rendered = template(*ALL_OPTIONS)
    assert {o["kind"] for o in rendered} == CHART_KINDS
    for obj in rendered:
        assert apply(client, obj, dry_run=True)["kind"] == obj["kind"]


def test_helm_install_creates_the_objects(
    control_plane: ControlPlane, client: Client, tmp_path: Path
) -> None:
    """A real install into its own namespace (test_install.py: what is made before, and
    what uninstall keeps)."""
    namespace = "chart-install-test"
    result = helm(
        "install",
        "sss",
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--take-ownership",
        "--set",
        "leaderElection.resourceName=chart-install-test",
        "--kubeconfig",
        str(control_plane.kubeconfig),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    deployment = client.get(
        f"/apis/apps/v1/namespaces/{namespace}/deployments/sss-service-serving-signer"
    )
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == (
        "system-cluster-critical"
    )
    binding = client.get(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/sss-service-serving-signer"
    )
    assert binding["subjects"][0]["namespace"] == namespace
    result = helm(
        "uninstall", "sss", "--namespace", namespace, "--kubeconfig", str(control_plane.kubeconfig)
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("managedCA.retireMargin=1m", "managedCA.retireMargin: must be at least 5m0s"),
        ("managedCA.propagationDelay=1m", "managedCA.propagationDelay: must be at least 6m30s"),
        ("managedCA.lifetime=1y", "'1y' does not match pattern"),
        ("managedCA.lifetime=24h", "leaves 43200s after the rotation point"),
    ],
)
def test_the_chart_refuses_managed_ca_values_the_binary_refuses(value: str, complaint: str) -> None:
    """A value `run` refuses must not install (a crash loop on a real cluster);
    test_chart_values.py compares the two value by value."""
    result = helm(
        "template", RELEASE, str(CHART), "--set", "managedCA.enabled=true", "--set", value
    )
    assert result.returncode != 0
    assert complaint in result.stderr
