"""The kustomize tree under config/: exact RBAC, a restricted Deployment, samples."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.kustomize import CONFIG, NAMESPACE, find, render, rules_of

SIGNER = "kubernetes.io/service-serving"


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render(CONFIG / "default")


def test_default_installs_everything_into_its_namespace(default: list[dict[str, Any]]) -> None:
    kinds = sorted(o["kind"] for o in default)
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "RoleBinding",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
        ]
    )
    for obj in default:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]
    assert not [o for o in default if o["kind"] == "Secret"], "never ship a CA key"


def test_the_namespace_is_its_own_tree_so_deleting_default_keeps_the_ca_secret(
    default: list[dict[str, Any]],
) -> None:
    """`kubectl delete -k config/default` must not delete the namespace, and with it the
    CA Secret made by hand: the Namespace lives in config/namespace, applied
    once before the Secret is created."""
    assert not [o for o in default if o["kind"] == "Namespace"]
    (namespace,) = render(CONFIG / "namespace")
    assert namespace["kind"] == "Namespace"
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_namespace_is_never_selected_by_the_documented_prune(
    default: list[dict[str, Any]],
) -> None:
    """docs/install.md upgrades with `kubectl apply -k config/default --prune -l
    app.kubernetes.io/part-of=service-serving-signer`: a Namespace applied with that label
    is pruned (Namespace is in kubectl's default prune allowlist), and the CA Secret with
    it. config/default's objects carry the label; config/namespace's must not."""
    (namespace,) = render(CONFIG / "namespace")
    assert "app.kubernetes.io/part-of" not in namespace["metadata"].get("labels", {})
    for obj in default:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == NAMESPACE, obj["kind"]


def test_cluster_role_is_exactly_the_spec(default: list[dict[str, Any]]) -> None:
    role = find(default, "ClusterRole", "service-serving-signer")
    assert rules_of(role) == sorted(
        [
            ("certificates.k8s.io", "podcertificaterequests", ("get", "list", "watch"), ()),
            ("certificates.k8s.io", "podcertificaterequests/status", ("patch", "update"), ()),
            ("certificates.k8s.io", "signers", ("attest", "sign"), (SIGNER,)),
            (
                "certificates.k8s.io",
                "clustertrustbundles",
                ("create", "delete", "get", "list", "update", "watch"),
                (),
            ),
            ("", "pods", ("get", "list", "watch"), ()),
            ("", "services", ("get", "list", "watch"), ()),
            ("events.k8s.io", "events", ("create", "patch"), ()),
        ]
    )


def test_nothing_grants_secrets_or_wildcards(default: list[dict[str, Any]]) -> None:
    for obj in default:
        for rule in obj.get("rules", []):
            assert "secrets" not in rule["resources"]
            assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"]


def test_leases_only_in_own_namespace(default: list[dict[str, Any]]) -> None:
    role = find(default, "Role", "service-serving-signer-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules_of(role) == [
        ("coordination.k8s.io", "leases", ("create",), ()),
        (
            "coordination.k8s.io",
            "leases",
            ("get", "update"),
            ("service-serving-signer", "service-serving-signer-injector-convergence"),
        ),
    ]
    binding = find(default, "RoleBinding", "service-serving-signer-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    cluster_binding = find(default, "ClusterRoleBinding")
    for b in (binding, cluster_binding):
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "service-serving-signer", "namespace": NAMESPACE}
        ]


def test_deployment_is_ha_restricted_and_probed(default: list[dict[str, Any]]) -> None:
    deployment = find(default, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "service-serving-signer"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["image"] == "service-serving-signer:0.1.0"


def test_deployment_mounts_the_ca_secret_and_bundle_configmap(
    default: list[dict[str, Any]],
) -> None:
    pod = find(default, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secret = volumes["signing-ca"]["secret"]
    assert secret["secretName"] == "service-serving-signer-ca"
    assert {i["key"] for i in secret["items"]} == {"tls.key", "tls.crt"}
    config_map = volumes["trust-bundle"]["configMap"]
    assert config_map["name"] == "service-serving-signer-trust-bundle"
    assert [i["key"] for i in config_map["items"]] == ["trust-bundle.pem"]
    args = dict(a.split("=", 1) for a in container["args"])
    assert args["--service-serving-key"] == f"{mounts['signing-ca']}/tls.key"
    assert args["--service-serving-cert"] == f"{mounts['signing-ca']}/tls.crt"
    assert args["--service-serving-trust-bundle"] == f"{mounts['trust-bundle']}/trust-bundle.pem"
    assert args["--leader-elect"] == "true"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args["--metrics-bind-address"] == f":{ports['metrics']}"
    assert args["--health-probe-bind-address"] == f":{ports['health']}"


def test_deployment_args_parse_with_the_real_cli(default: list[dict[str, Any]]) -> None:
    from cli.main import build_options, run_command

    (container,) = find(default, "Deployment")["spec"]["template"]["spec"]["containers"]
    ctx = run_command.make_context("run", list(container["args"]))
    opts = build_options(dict(ctx.params))
    assert opts.leader_elect and opts.log_format == "json"


def test_metrics_service_and_pdb_select_the_pods(default: list[dict[str, Any]]) -> None:
    labels = find(default, "Deployment")["spec"]["template"]["metadata"]["labels"]
    service = find(default, "Service")
    pdb = find(default, "PodDisruptionBudget")
    assert service["spec"]["selector"].items() <= labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def test_prometheus_component_selects_the_metrics_service() -> None:
    component = render(CONFIG / "prometheus")
    monitor = find(component, "ServiceMonitor", "service-serving-signer")
    service = find(render(CONFIG / "manager"), "Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    rules = find(component, "PrometheusRule")["spec"]["groups"][0]["rules"]
    exprs = {r["alert"]: " ".join(r["expr"].split()) for r in rules}
    assert (
        "min(service_serving_ca_controller_signer_ttl_seconds > 0) - time() < 30 * 86400"
        in exprs["ServiceServingSignerCertificateExpiringSoon"]
    )
    assert "> 600" in exprs["ServiceServingSignerRequestsPending"]
    assert (
        "absent(service_serving_ca_controller_requests_total)"
        in (exprs["ServiceServingSignerNoLeader"])
    )
    assert {"ServiceServingSignerRequestsFailing", "ServiceServingSignerSyncErrors"} <= set(exprs)
    assert "ServiceServingSignerTrustBundleExpiring" in exprs


def test_prometheus_component_selects_the_injector_metrics_service() -> None:
    monitor = find(
        render(CONFIG / "prometheus"), "ServiceMonitor", "service-serving-signer-injector"
    )
    injector = render(CONFIG / "injector")
    service = find(injector, "Service", "service-serving-signer-injector-metrics")
    pods = find(injector, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert service["spec"]["selector"].items() <= pods.items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"


def _projection(workload: dict[str, Any]) -> dict[str, Any]:
    volumes = workload["spec"]["template"]["spec"]["volumes"]
    sources = [s for v in volumes for s in v.get("projected", {}).get("sources", [])]
    (source,) = [s["podCertificate"] for s in sources if "podCertificate" in s]
    assert isinstance(source, dict)
    return source


def test_samples_request_certificates_for_their_services() -> None:
    samples = render(CONFIG / "samples")
    web = find(samples, "Deployment", "web")
    projection = _projection(web)
    assert projection["signerName"] == SIGNER
    assert projection["keyType"] == "ECDSAP256"
    assert projection["userAnnotations"] == {"kubernetes.io/service-names": "web"}
    service = find(samples, "Service", "web")
    assert service["spec"].get("type", "ClusterIP") == "ClusterIP"
    assert (
        service["spec"]["selector"].items() <= web["spec"]["template"]["metadata"]["labels"].items()
    )

    db = find(samples, "StatefulSet", "db")
    assert _projection(db)["userAnnotations"] == {"kubernetes.io/add-pod-fqdn": "true"}
    headless = find(samples, "Service", db["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert (
        headless["spec"]["selector"].items() <= db["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("directory", ["default", "namespace", "rbac", "manager", "samples"])
def test_renderer_agrees_with_kubectl_kustomize(directory: str) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with built-in kustomize) is needed to cross-check config/"
    out = subprocess.run(
        [kubectl, "kustomize", str(CONFIG / directory)], capture_output=True, text=True, check=True
    ).stdout
    theirs = sorted(
        (d for d in yaml.safe_load_all(out) if d), key=lambda o: (o["kind"], o["metadata"]["name"])
    )
    ours = sorted(render(CONFIG / directory), key=lambda o: (o["kind"], o["metadata"]["name"]))
    assert ours == theirs


def test_every_manifest_is_valid_yaml_with_kind_and_name() -> None:
    manifests = [p for p in Path(CONFIG).rglob("*.yaml") if p.parent.name != "tests"]
    assert len(manifests) > 15
    for path in sorted(manifests):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc, path
            assert doc.get("kind"), path
            if doc["kind"] not in ("Kustomization", "Component"):
                assert doc["metadata"]["name"], path
