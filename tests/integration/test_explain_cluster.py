"""`explain` through the real kubelet, kube-controller-manager and RBAC: the only signer
stopped, a new Pod hangs in ContainerCreating, and an application-team user — a client
certificate bound to nothing but `view` in the Pod's namespace, with config/rbac's
aggregated role folded into `view` by kube-controller-manager — runs `explain` and is
told that nothing will act; before the aggregated role exists it is told which
permission is missing."""

from __future__ import annotations

import functools
import json
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.cluster import Cluster
from controlplane.kubelet import deployment_manifest
from controlplane.workload import cert_pod, wait_running
from kube.client import ApiError, Client, is_not_found
from kube.types import JSON
from tests.integration.explain_harness import age_presence, run_cli
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.manifests import apply, ensure_namespace
from tests.integration.nodes import (
    condition_of_type,
    create_service,
    pcrs_of,
    serving_pod,
    signer_fixture,
    stays_not_running,
    unique_signer_name,
)
from tests.unit.deploy.kustomize import CONFIG, render
from trust.ca import write_ca

SIGNER = unique_signer_name()
RBAC = "/apis/rbac.authorization.k8s.io/v1"
VIEW_ROLE = "service-serving-signer-view"
LEASE = "service-serving-signer"  # what config/rbac's status Role lets everyone read


def rbac_object(name: str) -> list[dict[str, Any]]:
    return [o for o in render(CONFIG / "rbac") if o["metadata"]["name"] == name]


@pytest.fixture
def lease_namespace(cluster_client: Client) -> Iterator[str]:
    """Where this test's signer keeps its Lease, with config/rbac's status Role in it."""
    name = f"sss-explain-{uuid.uuid4().hex[:6]}"
    ensure_namespace(cluster_client, name)
    for obj in rbac_object("service-serving-signer-status"):
        apply(cluster_client, obj, dry_run=False, namespace=name)
    yield name
    cluster_client.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def view_role(cluster_client: Client) -> Iterator[Any]:
    """Absent at first (another test may have installed config/rbac); applied when
    called; deleted afterwards."""

    def remove() -> None:
        try:
            cluster_client.delete(f"{RBAC}/clusterroles/{VIEW_ROLE}")
        except ApiError as err:
            if not is_not_found(err):
                raise

    def install() -> None:
        for obj in rbac_object(VIEW_ROLE):
            apply(cluster_client, obj, dry_run=False)

    remove()
    yield install
    remove()


def app_team_kubeconfig(cluster: Cluster, client: Client, namespace: str, path: Path) -> Path:
    """A client-certificate user bound to the built-in `view` ClusterRole in `namespace`."""
    user = f"alice-{uuid.uuid4().hex[:6]}"
    client.create(
        f"{RBAC}/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "team-view"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "view",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    return cluster.plane.write_kubeconfig(path, user=cluster.plane.pki.client_cert(user))


def test_app_team_is_told_nothing_will_act_when_the_only_signer_stopped(
    cluster: Cluster,
    cluster_client: Client,
    node_namespace: str,
    lease_namespace: str,
    view_role: Any,
    tmp_path: Path,
) -> None:
    ns = node_namespace
    with tempfile.TemporaryDirectory(prefix="explain-signer-") as tmp:
        write_ca(Path(tmp) / "ca")
        signer = SignerProcess(
            cluster.plane.kubeconfig,
            Path(tmp) / "ca",
            Path(tmp) / "signer.log",
            f"--leader-elect-resource-namespace={lease_namespace}",
            f"--leader-elect-resource-name={LEASE}",
            signer_name=SIGNER,
        )
        try:
            assert eventually(signer.leading, 60), "\n".join(signer.log_lines()[-20:])
        finally:
            assert signer.stop() == 0  # releases the Lease: holderIdentity ""
    # Its presence report would expire 40 s after its last renewal; say it did.
    age_presence(cluster_client, lease_namespace, f"{LEASE}-presence")
    create_service(cluster_client, ns, "web", {"app": "web"})
    serving_pod(cluster, cluster_client, ns, "nosigner-0", app="web", signer_name=SIGNER)
    assert eventually(lambda: bool(pcrs_of(cluster_client, ns, "nosigner-0")), 120)
    [pcr] = pcrs_of(cluster_client, ns, "nosigner-0")
    assert stays_not_running(cluster_client, ns, "nosigner-0", 3)
    kubeconfig = app_team_kubeconfig(cluster, cluster_client, ns, tmp_path / "alice")

    def explain() -> tuple[int, str, str]:
        return run_cli(
            "explain",
            "pod",
            "nosigner-0",
            "-n",
            ns,
            f"--kubeconfig={kubeconfig}",
            f"--signer-name={SIGNER}",
            f"--lease-namespace={lease_namespace}",
        )

    # `view` may still carry the rules of a role deleted a moment ago (KCM re-aggregates).
    assert eventually(lambda: explain()[0] == 1, 60, interval=1), explain()[1]
    code, _, err = explain()
    assert code == 1
    assert err == (
        f"error: explain: forbidden: cannot list podcertificaterequests.certificates.k8s.io in "
        f"namespace {ns} (check: kubectl auth can-i list "
        f"podcertificaterequests.certificates.k8s.io -n {ns}); namespace view with the "
        f"aggregated ClusterRole {VIEW_ROLE} grants what it reads\n"
    )

    view_role()  # kube-controller-manager folds it into `view`
    assert eventually(lambda: explain()[0] != 1, 60, interval=1), explain()[2]
    code, out, _ = explain()
    print(
        f"\n$ explain pod nosigner-0 -n {ns}   # as a user with namespace view\n{out}(exit {code})"
    )

    assert code == 5, out
    lines = out.splitlines()
    released = (
        f"no signer holds Lease {lease_namespace}/{LEASE} (released, holderIdentity empty): "
        "no replica of the signer is running"
    )
    gone = (
        f"no signer runs: no signer process has renewed presence Lease "
        f"{lease_namespace}/{LEASE}-presence since "
    )
    assert lines[0] == f"Pod {ns}/nosigner-0 (signer {SIGNER}): nothing will act"
    assert lines[1].startswith(f"  leader: none: {released}; released ")
    assert lines[2].startswith(f"  signer process: {gone}")
    assert lines[3] == (
        "  bundle: unknown: forbidden: cannot list clustertrustbundles.certificates.k8s.io "
        "(cluster-scoped) (check: kubectl auth can-i list "
        "clustertrustbundles.certificates.k8s.io)"
    )
    assert lines[4].startswith(f"  PodCertificateRequest {pcr['metadata']['name']} (created ")
    assert lines[4].endswith("): would be issued now")
    assert lines[5].startswith(f"    nothing will act: {gone}")
    assert lines[6] == f"    names: web.{ns}.svc.cluster.local, web.{ns}.svc"
    assert lines[7].startswith("    cleanup: kube-controller-manager deletes it ")
    assert len(lines) == 8
    assert stays_not_running(cluster_client, ns, "nosigner-0", 1)

    def status(*args: str) -> tuple[int, str, str]:
        return run_cli(
            "status",
            *args,
            f"--kubeconfig={kubeconfig}",
            f"--signer-name={SIGNER}",
            f"--lease-namespace={lease_namespace}",
        )

    code, out, _ = status("-n", ns)
    assert code == 5, out
    assert f"Requests in namespace {ns}: 1 (1 nothing will act)" in out.splitlines()
    assert "    Pod nosigner-0" in out.splitlines()
    code, _, err = status()
    assert code == 1
    assert err.startswith(
        "error: status: forbidden: cannot list podcertificaterequests.certificates.k8s.io in "
        "all namespaces (check: kubectl auth can-i list "
        "podcertificaterequests.certificates.k8s.io -A); with -n NAMESPACE it reads one "
        "namespace"
    )


def test_chart_renders_the_aggregated_view_role_and_the_lease_reader() -> None:
    from tests.integration.chart_harness import template

    objects = {(o["kind"], o["metadata"]["name"]): o for o in template()}
    view = objects[("ClusterRole", VIEW_ROLE)]
    for role in ("view", "edit", "admin"):
        assert (
            view["metadata"]["labels"][f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
        )
    status_role = objects[("Role", "service-serving-signer-status")]
    assert status_role["rules"][0]["resourceNames"] == [LEASE, f"{LEASE}-presence"]
    binding = objects[("RoleBinding", "service-serving-signer-status")]
    assert binding["subjects"][0]["name"] == "system:authenticated"


DEPLOY_SIGNER = unique_signer_name()
signer = signer_fixture(DEPLOY_SIGNER)


def web_pods(client: Client, namespace: str) -> list[dict[str, Any]]:
    listed = client.get(f"/api/v1/namespaces/{namespace}/pods", {"labelSelector": "app=web"})
    return [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]


def test_advice_for_a_deployments_pod_is_followed_to_an_issued_certificate(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    """kube-controller-manager makes the ReplicaSet and the Pod; the signer denies
    `Shop/Web`; explain names the Deployment's template and the value; applying exactly
    that gets a certificate."""
    ns, client = node_namespace, cluster_client

    def pod_spec(service_names: str) -> JSON:
        pod = cert_pod(
            "x",
            ns,
            node=None,
            signer_name=DEPLOY_SIGNER,
            annotations={"kubernetes.io/service-names": service_names},
        )
        spec: JSON = pod["spec"]
        return spec

    template = {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec("Shop/Web")}
    client.create(
        f"/apis/apps/v1/namespaces/{ns}/deployments", deployment_manifest("web", template)
    )

    def denied_pod() -> str | None:
        for pod in web_pods(client, ns):
            for pcr in pcrs_of(client, ns, pod["metadata"]["name"]):
                if condition_of_type(pcr, "Denied"):
                    return str(pod["metadata"]["name"])
        return None

    assert eventually(lambda: denied_pod() is not None, 120, interval=0.5)
    pod_name = denied_pod()
    assert pod_name is not None
    lease = ["--lease-namespace=kube-system", f"--lease-name={signer.lease_name}"]

    def explain(name: str) -> tuple[int, str]:
        code, out, err = run_cli(
            "explain",
            "pod",
            name,
            "-n",
            ns,
            f"--kubeconfig={cluster.plane.kubeconfig}",
            f"--signer-name={DEPLOY_SIGNER}",
            *lease,
        )
        return code, out + err

    code, out = explain(pod_name)
    print(f"\n$ explain pod {pod_name} -n {ns}\n{out}(exit {code})")
    assert code == 3, out
    assert f"  owner: Deployment {ns}/web" in out.splitlines()
    fix = (
        f"    fix: set Deployment {ns}/web's Pod template (spec.template.spec.volumes[name=tls]"
        ".projected.sources[].podCertificate.userAnnotations) to "
        '{kubernetes.io/service-names: "web"}; the Deployment replaces its Pods with ones that '
        "carry the change"
    )
    assert fix in out.splitlines()

    create_service(client, ns, "web", {"app": "web"})
    fixed = pod_spec("web")["volumes"]
    client.patch(
        f"/apis/apps/v1/namespaces/{ns}/deployments/web",
        {"spec": {"template": {"spec": {"volumes": fixed}}}},
    )

    def issued_pod() -> str | None:
        for pod in web_pods(client, ns):
            for pcr in pcrs_of(client, ns, pod["metadata"]["name"]):
                if (pcr.get("status") or {}).get("certificateChain"):
                    return str(pod["metadata"]["name"])
        return None

    assert eventually(lambda: issued_pod() is not None, 180, interval=0.5)
    new_pod = issued_pod()
    assert new_pod is not None and new_pod != pod_name
    wait_running(client, ns, new_pod, 300)
    code, out = explain(new_pod)
    print(f"\n$ explain pod {new_pod} -n {ns}\n{out}(exit {code})")
    assert code == 0, out
    assert f"    names: web.{ns}.svc.cluster.local, web.{ns}.svc" in out.splitlines()


def namespace_admin_kubeconfig(
    cluster: Cluster, client: Client, namespace: str, path: Path
) -> Path:
    """A client-certificate user bound to the built-in `admin` ClusterRole in `namespace`
    (an application team's usual grant)."""
    user = f"team-admin-{uuid.uuid4().hex[:6]}"
    client.create(
        f"{RBAC}/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "team-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "admin",
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    )
    return cluster.plane.write_kubeconfig(path, user=cluster.plane.pki.client_cert(user))


ACTING_SIGNER = unique_signer_name()
BUNDLE_READERS = CONFIG / "bundle-readers"


def test_a_namespace_admin_is_told_the_truth_with_and_without_leader_election(
    cluster: Cluster,
    cluster_client: Client,
    node_namespace: str,
    lease_namespace: str,
    view_role: Any,
    tmp_path: Path,
) -> None:
    """With `--leader-elect=false` the signer acts without a Lease, and explain said
    "nothing will act"; a namespace admin got "bundle: unknown: forbidden". Now the
    verdict follows the presence report every signer process renews, and
    config/bundle-readers gives the bundle answer."""
    ns = node_namespace
    view_role()
    kubeconfig = namespace_admin_kubeconfig(cluster, cluster_client, ns, tmp_path / "admin")
    create_service(cluster_client, ns, "web", {"app": "web"})

    def explain(pod: str, *extra: str) -> tuple[int, str, str]:
        return run_cli(
            "explain",
            "pod",
            pod,
            "-n",
            ns,
            *extra,
            f"--kubeconfig={kubeconfig}",
            f"--signer-name={ACTING_SIGNER}",
            f"--lease-namespace={lease_namespace}",
        )

    def issued(pod: str) -> bool:
        return any(condition_of_type(p, "Issued") for p in pcrs_of(cluster_client, ns, pod))

    def waits(pod: str) -> bool:
        return explain(pod)[0] == 2

    outputs: dict[str, str] = {}
    for index, leader_elect in enumerate(("false", "true")):
        with tempfile.TemporaryDirectory(prefix="explain-acting-") as tmp:
            write_ca(Path(tmp) / "ca")
            signer = SignerProcess(
                cluster.plane.kubeconfig,
                Path(tmp) / "ca",
                Path(tmp) / "signer.log",
                f"--leader-elect={leader_elect}",
                f"--leader-elect-resource-namespace={lease_namespace}",
                f"--leader-elect-resource-name={LEASE}",
                signer_name=ACTING_SIGNER,
            )
            try:
                assert eventually(signer.ready, 60), "\n".join(signer.log_lines()[-20:])
                # One request the signer issues, and one that waits on a missing Service.
                serving_pod(
                    cluster,
                    cluster_client,
                    ns,
                    f"web-{index}",
                    app="web",
                    signer_name=ACTING_SIGNER,
                )
                serving_pod(
                    cluster,
                    cluster_client,
                    ns,
                    f"waits-{index}",
                    app="web",
                    services=f"missing-{index}",
                    signer_name=ACTING_SIGNER,
                )
                assert eventually(functools.partial(issued, f"web-{index}"), 120)
                assert eventually(functools.partial(waits, f"waits-{index}"), 60, interval=1)
                status_code, status_out, _ = run_cli(
                    "status",
                    "-n",
                    ns,
                    f"--kubeconfig={kubeconfig}",
                    f"--signer-name={ACTING_SIGNER}",
                    f"--lease-namespace={lease_namespace}",
                )
                assert status_code == 2, status_out
                assert "nothing will act" not in status_out
                code, out, _ = explain(f"waits-{index}")
                outputs[leader_elect] = out
                print(
                    f"\n$ explain pod waits-{index} -n {ns}   # namespace admin, "
                    f"--leader-elect={leader_elect}\n{out}(exit {code})"
                )
            finally:
                assert signer.stop() == 0
        assert code == 2, out
        assert "nothing will act" not in out
        assert "bundle: unknown: forbidden: cannot list clustertrustbundles" in out

    lines = outputs["false"].splitlines()
    assert lines[1] == "  leader: none needed: the signer runs with leader election off"
    assert lines[2].startswith(
        f"  signer process: running (presence Lease {lease_namespace}/{LEASE}-presence renewed "
    )
    assert outputs["true"].splitlines()[1].startswith("  leader: ")
    assert "acting: " not in outputs["true"] and "acting: " not in outputs["false"]

    # The opt-in read access to ClusterTrustBundles: the bundle is answered.
    for obj in render(BUNDLE_READERS):
        apply(cluster_client, obj, dry_run=False)
    try:
        assert eventually(lambda: "bundle: unknown" not in explain("waits-1")[1], 30, interval=1)
        code, out, _ = explain("waits-1", "-o", "json")
        bundle = json.loads(out)["signer"]["bundle"]
        assert bundle["forbidden"] is None
        assert bundle["published"] is True, out
    finally:
        for obj in render(BUNDLE_READERS):
            kind = "clusterroles" if obj["kind"] == "ClusterRole" else "clusterrolebindings"
            cluster_client.delete(f"{RBAC}/{kind}/{obj['metadata']['name']}")
