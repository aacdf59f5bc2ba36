"""Install, upgrade and uninstall as a platform team does, with the real helm
and kustomize against the real API server: `helm uninstall` leaves the namespace and the
CA Secret made by hand; the chart installs as a subchart of a parent that sets `global`
values and the knobs kube-prometheus-stack and real clusters need; values that cannot
work together are refused; one `kustomize edit set image` sets every Deployment."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from controlplane import ControlPlane
from controlplane.binaries import tool
from kube.client import ApiError, Client, is_not_found
from kube.types import JSON
from tests.integration.chart_harness import CHART, CONFIG, helm, kustomize, overlay
from tests.integration.manifests import ensure_monitoring_crds
from tests.unit.deploy.kustomize import render


def prepare_namespace(client: Client, namespace: str) -> None:
    """What docs/install.md says to do before installing: the namespace
    (config/namespace), then the CA Secret and the trust-bundle ConfigMap in it."""
    (ns,) = render(CONFIG / "namespace")
    ns["metadata"]["name"] = namespace
    client.create("/api/v1/namespaces", ns)
    client.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "service-serving-signer-ca"},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.key": "made by hand", "tls.crt": "made by hand"},
        },
    )
    client.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "service-serving-signer-trust-bundle"},
            "data": {"trust-bundle.pem": "made by hand"},
        },
    )


def gone(client: Client, path: str) -> bool:
    try:
        client.get(path)
    except ApiError as err:
        if is_not_found(err):
            return True
        raise
    return False


def test_helm_uninstall_keeps_the_namespace_and_the_ca_secret_it_did_not_create(
    control_plane: ControlPlane, client: Client
) -> None:
    """The issue's sequence: Secret first, `helm install --create-namespace
    --take-ownership`, `helm upgrade`, `helm uninstall` — the namespace and the hand-made
    Secret survive; the chart's own objects are gone."""
    namespace = "uninstall-keeps-ca"
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace]
    prepare_namespace(client, namespace)
    lease = ["--set", f"leaderElection.resourceName={namespace}"]
    result = helm(
        "install", "sss", str(CHART), "--create-namespace", "--take-ownership", *lease, *kubeconfig
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "never deleted by `helm uninstall`" in result.stdout, "NOTES.txt says so"
    assert (
        "get secret/service-serving-signer-ca configmap/service-serving-signer-trust-bundle"
        in result.stdout
    )
    result = helm("upgrade", "sss", str(CHART), *lease, "--set", "replicaCount=1", *kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr
    result = helm("uninstall", "sss", "--wait", *kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr

    ns = client.get(f"/api/v1/namespaces/{namespace}")
    assert not ns["metadata"].get("deletionTimestamp"), "helm uninstall deleted the namespace"
    secret = client.get(f"/api/v1/namespaces/{namespace}/secrets/service-serving-signer-ca")
    assert secret["type"] == "kubernetes.io/tls"
    assert client.get(
        f"/api/v1/namespaces/{namespace}/configmaps/service-serving-signer-trust-bundle"
    )
    assert gone(
        client, f"/apis/apps/v1/namespaces/{namespace}/deployments/sss-service-serving-signer"
    )
    assert gone(
        client, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/sss-service-serving-signer"
    )


# What the chart rendered when it shipped templates/namespace.yaml, to stand for a
# release installed from such a chart.
OLD_NAMESPACE_TEMPLATE = """apiVersion: v1
kind: Namespace
metadata:
  name: {{ .Release.Namespace }}
  labels:
    {{- include "sss.labels" . | nindent 4 }}
    pod-security.kubernetes.io/enforce: restricted
"""


def test_upgrading_a_release_that_owned_the_namespace_keeps_it_once_annotated(
    control_plane: ControlPlane, client: Client, tmp_path: Path
) -> None:
    """docs/install.md "Upgrade": Helm deletes what the new chart no longer renders, so a
    release whose chart rendered the Namespace would delete it, and the CA Secret, on
    upgrade; `helm.sh/resource-policy=keep` on the live Namespace stops that."""
    namespace = "upgrade-keeps-ca"
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace]
    prepare_namespace(client, namespace)
    old = tmp_path / "old-chart"
    shutil.copytree(CHART, old, symlinks=False)
    (old / "templates" / "namespace.yaml").write_text(OLD_NAMESPACE_TEMPLATE)
    lease = ["--set", f"leaderElection.resourceName={namespace}"]
    result = helm("install", "sss", str(old), "--take-ownership", *lease, *kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = helm("get", "manifest", "sss", *kubeconfig).stdout
    assert "kind: Namespace" in manifest, "the old release owns the namespace"

    client.patch(
        f"/api/v1/namespaces/{namespace}",
        {"metadata": {"annotations": {"helm.sh/resource-policy": "keep"}}},
    )
    result = helm("upgrade", "sss", str(CHART), *lease, *kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kind: Namespace" not in helm("get", "manifest", "sss", *kubeconfig).stdout
    ns = client.get(f"/api/v1/namespaces/{namespace}")
    assert not ns["metadata"].get("deletionTimestamp"), "the upgrade deleted the namespace"
    assert client.get(f"/api/v1/namespaces/{namespace}/secrets/service-serving-signer-ca")
    result = helm("uninstall", "sss", "--wait", *kubeconfig)
    assert result.returncode == 0, result.stderr
    assert not client.get(f"/api/v1/namespaces/{namespace}")["metadata"].get("deletionTimestamp")


def write_parent_chart(directory: Path, values: JSON) -> Path:
    """A parent chart that depends on this one (file:// repository), as an umbrella chart
    of a platform team does, with `global` values of its own."""
    directory.mkdir()
    (directory / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [
                    {
                        "name": "service-serving-signer",
                        "version": "0.1.0",
                        "repository": f"file://{CHART}",
                    }
                ],
            }
        )
    )
    (directory / "values.yaml").write_text(yaml.safe_dump(values))
    result = helm("dependency", "build", str(directory))
    assert result.returncode == 0, result.stdout + result.stderr
    return directory


SUBCHART_VALUES: JSON = {
    "global": {"imageRegistry": "registry.example", "storageClass": "fast"},
    "service-serving-signer": {
        "replicaCount": 1,
        "leaderElection": {"resourceName": "subchart-test"},
        "podLabels": {"team": "platform"},
        "podAnnotations": {"cost-center": "42"},
        "nodeSelector": {"node-role.example/system": "true"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}
                            ]
                        }
                    ]
                }
            }
        },
        "prometheus": {
            "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
            "rules": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        },
        "injector": {"enabled": True, "replicaCount": 1},
    },
}


def test_the_chart_installs_as_a_subchart_with_global_values_and_the_placement_knobs(
    control_plane: ControlPlane, client: Client, tmp_path: Path
) -> None:
    namespace = "subchart-test"
    ensure_monitoring_crds(client)
    prepare_namespace(client, namespace)
    parent = write_parent_chart(tmp_path / "platform", SUBCHART_VALUES)
    kubeconfig = ["--kubeconfig", str(control_plane.kubeconfig), "--namespace", namespace]
    result = helm("install", "platform", str(parent), *kubeconfig)
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        prefix = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        for name in ("platform-service-serving-signer", "platform-service-serving-signer-injector"):
            pod = client.get(f"{prefix}/{name}")["spec"]["template"]
            assert pod["metadata"]["labels"]["team"] == "platform", name
            assert pod["metadata"]["annotations"] == {"cost-center": "42"}, name
            assert pod["spec"]["nodeSelector"] == {"node-role.example/system": "true"}, name
            assert pod["spec"]["tolerations"][0]["key"] == "system", name
        signer = client.get(f"{prefix}/platform-service-serving-signer")["spec"]["template"]
        assert set(signer["spec"]["affinity"]) == {"nodeAffinity"}
        monitoring = f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}"
        monitors = client.get(f"{monitoring}/servicemonitors")["items"]
        assert sorted(m["metadata"]["name"] for m in monitors) == [
            "platform-service-serving-signer",
            "platform-service-serving-signer-injector",
        ]
        rules = client.get(f"{monitoring}/prometheusrules")["items"]
        for obj in [*monitors, *rules]:
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        # One replica each: a PodDisruptionBudget would block every node drain.
        pdbs = client.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")
        assert pdbs["items"] == []
        services = client.get(f"/api/v1/namespaces/{namespace}/services")["items"]
        assert {s["metadata"]["name"] for s in services} == {
            "platform-service-serving-signer-metrics",
            "platform-service-serving-signer-injector-metrics",
        }
    finally:
        result = helm("uninstall", "platform", "--wait", *kubeconfig)
        assert result.returncode == 0, result.stderr


def test_two_replicas_without_leader_election_are_refused() -> None:
    result = helm("template", "sss", str(CHART), "--set", "leaderElection.enabled=false")
    assert result.returncode != 0
    assert "leaderElection.enabled=false with replicaCount=2" in result.stderr
    result = helm(
        "template",
        "sss",
        str(CHART),
        "--set",
        "leaderElection.enabled=false",
        "--set",
        "replicaCount=1",
    )
    assert result.returncode == 0, result.stderr
    assert "--leader-elect=false" in result.stdout


def test_one_kustomize_edit_set_image_sets_every_deployment(tmp_path: Path) -> None:
    """The issue's sequence: set the image once, build default + injector; both
    Deployments run it (before, the injector kept service-serving-signer:0.1.0)."""
    config = tmp_path / "config"
    shutil.copytree(CONFIG, config)
    result = subprocess.run(
        [
            str(tool("kustomize")),
            "edit",
            "set",
            "image",
            "service-serving-signer=registry.example/sss:1.2.3",
        ],
        cwd=config / "image",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    directory = overlay(tmp_path, "injector", config=config)
    deployments = [o for o in kustomize(directory) if o["kind"] == "Deployment"]
    images = {
        d["metadata"]["name"]: [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
        for d in deployments
    }
    assert images == {
        "service-serving-signer": ["registry.example/sss:1.2.3"],
        "service-serving-signer-injector": ["registry.example/sss:1.2.3"],
    }
    # The shipped tree still pins the release's tag on both.
    shipped = [o for o in kustomize(overlay(tmp_path, "injector")) if o["kind"] == "Deployment"]
    assert {c["image"] for d in shipped for c in d["spec"]["template"]["spec"]["containers"]} == {
        "service-serving-signer:0.1.0"
    }
