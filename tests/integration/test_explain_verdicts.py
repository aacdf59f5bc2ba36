"""`explain` tells whether anything will act, names the value that would pass, and takes
kubectl's flags, against the real API server.

The signer's Lease is written as `kube.leaderelection` writes it; the cleaner's clock is
moved by giving `Explainer` a later `now`, since a real request cannot be made older."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, deployment_manifest, pod_manifest
from kube.client import Client
from tests.integration.explain_harness import LEASE, run_explain, write_lease
from troubleshoot.explain import Explainer, Outcome
from troubleshoot.leasehealth import read_health

SERVICE = {"kubernetes.io/service-names": "web"}


@pytest.fixture
def explain(control_plane: ControlPlane, namespace: str) -> Any:
    def run(*args: str, kubeconfig: Path | None = None) -> tuple[int, str, str]:
        return run_explain(kubeconfig or control_plane.kubeconfig, namespace, *args)

    return run


@pytest.fixture
def issuable_under_a_leader(client: Client, kubelet: Kubelet, namespace: str) -> None:
    """A Lease held by a renewing signer-0_x, and Pod web-0's request that would issue."""
    write_lease(client, namespace, "signer-0_x", renewed_ago=-3600)
    issuable(kubelet, namespace)


def issuable(kubelet: Kubelet, namespace: str) -> dict[str, Any]:
    kubelet.create_service("web", namespace, selector={"app": "web"})
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE)
    return created


# 1. whether anything will act ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("holder", "renewed_ago", "why"),
    [
        ("", 30, f"no signer holds Lease {{ns}}/{LEASE} (released, holderIdentity empty)"),
        ("signer-0_dead", 60, f"the holder of Lease {{ns}}/{LEASE} stopped renewing it"),
    ],
)
def test_no_leader_means_nothing_will_act_even_when_it_would_be_issued(
    explain: Any,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    holder: str | None,
    renewed_ago: float,
    why: str,
) -> None:
    if holder is not None:
        write_lease(client, namespace, holder, renewed_ago)
    issuable(kubelet, namespace)

    code, out, _ = explain("pod", "web-0", "-n", namespace)
    print(f"\n$ explain pod web-0 -n {namespace}\n{out}(exit {code})")

    assert code == 5, out
    lines = out.splitlines()
    assert lines[0] == f"Pod {namespace}/web-0 (signer kubernetes.io/service-serving): " + (
        "nothing will act"
    )
    assert lines[1].startswith("  leader: none: " + why.format(ns=namespace))
    assert "would be issued now" in out
    assert "nothing will act: " + why.format(ns=namespace) in out
    assert "would be issued now" not in lines[0]


def test_no_lease_and_no_presence_on_a_fresh_request_is_nothing_acts(
    explain: Any, kubelet: Kubelet, namespace: str
) -> None:
    """No leader Lease and no presence report: every signer process, leader election on
    or off, renews its presence, so none runs — even for a request made a second ago
    (it used to be "unknown", and exit 0)."""
    issuable(kubelet, namespace)

    code, out, _ = explain("pod", "web-0", "-n", namespace)

    assert code == 5, out
    assert out.splitlines()[0].endswith("): nothing will act")
    presence = f"presence Lease {namespace}/{LEASE}-presence"
    gone = f"no signer runs: neither Lease {namespace}/{LEASE} nor {presence} exists"
    assert f"    nothing will act: {gone}" in out
    assert "acting: unknown" not in out


def test_no_lease_and_no_trace_on_a_request_a_signer_would_have_decided_is_nothing_acts(
    client: Client, kubelet: Kubelet, namespace: str
) -> None:
    issuable(kubelet, namespace)

    late = explainer(client, namespace, datetime.now(UTC) + timedelta(minutes=6))
    report = late.explain_pod(namespace, "web-0")

    assert report.outcome is Outcome.NOTHING_ACTS
    why = report.requests[0].why_nothing_acts or ""
    assert why.startswith(f"no signer runs: neither Lease {namespace}/{LEASE} nor presence")


def test_a_decision_written_without_a_lease_is_a_signer_acting(
    client: Client, kubelet: Kubelet, namespace: str
) -> None:
    """A signer run with --leader-elect=false writes decisions with no Lease: one written
    25 s ago in the namespace is a signer acting, not "nothing will act"."""
    decided = issuable(kubelet, namespace)
    name = decided["metadata"]["name"]
    at = (datetime.now(UTC) - timedelta(seconds=25)).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": "Denied",
        "status": "True",
        "reason": "PodMismatch",
        "message": "written by a signer without a Lease",
        "lastTransitionTime": at,
    }
    client.patch(
        f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests/{name}/status",
        {"status": {"conditions": [condition]}},
        patch_type="application/merge-patch+json",
    )
    pod = kubelet.create_pod("web-1", namespace, labels={"app": "web"})
    kubelet.create_pcr(pod, annotations=SERVICE)

    report = explainer(client, namespace, datetime.now(UTC)).explain_pod(namespace, "web-1")

    assert report.outcome is Outcome.ISSUE
    [request] = report.requests
    assert request.acting is not None
    assert request.acting.startswith(
        f"signer kubernetes.io/service-serving denied PodCertificateRequest {namespace}/{name} 2"
    )
    assert f"without holding Lease {namespace}/{LEASE}" in request.acting


def test_renewing_leader_lets_the_decision_stand_and_names_the_holder(
    explain: Any, client: Client, kubelet: Kubelet, namespace: str
) -> None:
    write_lease(client, namespace, "signer-7_abc", renewed_ago=-3600)
    issuable(kubelet, namespace)

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 0, out
    assert out.splitlines()[1].startswith("  leader: signer-7_abc (renewed ")
    assert f"Lease {namespace}/{LEASE})" in out.splitlines()[1]


def explainer(client: Client, namespace: str, now: datetime) -> Explainer:
    health = read_health(
        client,
        signer_name="kubernetes.io/service-serving",
        bundle_version="v1",
        lease_namespace=namespace,
        lease_name=LEASE,
        now=now,
    )
    return Explainer(
        client,
        signer_name="kubernetes.io/service-serving",
        domain="cluster.local",
        pcr_version="v1",
        health=health,
        now=lambda: now,
    )


def test_waiting_request_shows_when_the_cleaner_deletes_it(
    client: Client, kubelet: Kubelet, namespace: str
) -> None:
    write_lease(client, namespace, "signer-0_x", renewed_ago=-3600)
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    kubelet.create_pcr(pod, annotations=SERVICE)

    soon = explainer(client, namespace, datetime.now(UTC) + timedelta(minutes=10))
    [request] = soon.explain_pod(namespace, "web-0").requests
    assert request.outcome is Outcome.WAIT
    assert request.cleanup is not None
    assert request.cleanup.startswith("kube-controller-manager deletes it 4m from now")
    assert request.cleanup.endswith("unless it is decided first; kubelet then makes a new request")

    late = explainer(client, namespace, datetime.now(UTC) + timedelta(minutes=16))
    [request] = late.explain_pod(namespace, "web-0").requests
    assert request.outcome is Outcome.WAIT
    assert request.cleanup == (
        "older than 15m: kube-controller-manager's PodCertificateRequest cleaner deletes it "
        "at its next pass (every 5m); kubelet then makes a new request"
    )


@pytest.mark.usefixtures("issuable_under_a_leader")
def test_issuable_request_left_pending_under_a_renewing_leader_is_nothing_acts(
    client: Client, namespace: str
) -> None:
    fresh = explainer(client, namespace, datetime.now(UTC))
    assert fresh.explain_pod(namespace, "web-0").outcome is Outcome.ISSUE

    stuck = explainer(client, namespace, datetime.now(UTC) + timedelta(minutes=6))
    report = stuck.explain_pod(namespace, "web-0")
    assert report.outcome is Outcome.NOTHING_ACTS
    why = report.requests[0].why_nothing_acts or ""
    assert "pending for 6m while signer-0_x holds the Lease" in why


@pytest.mark.usefixtures("issuable_under_a_leader")
def test_missing_bundle_is_said_without_changing_the_verdict(explain: Any, namespace: str) -> None:
    code, out, _ = explain("pod", "web-0", "-n", namespace, "--signer-name=example.com/none")
    assert code == 4, out  # the Pod's request is for the other signer name
    assert "requests for other signers (not decided here): kubernetes.io/service-serving" in out
    assert (
        "  bundle: no ClusterTrustBundle published for the signer: clients that trust through "
        "a clusterTrustBundle projection cannot verify its certificates"
    ) in out.splitlines()


# 3. advice names the value and the owner's template ------------------------------------------


def owned_pod(client: Client, namespace: str, name: str, annotations: dict[str, str]) -> Any:
    """A Pod of ReplicaSet web-5d9f of Deployment web, made by hand (no controllers run in
    this plane, so nothing else touches them)."""
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    template = {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]},
    }
    deployment = client.create(
        f"{apps}/deployments", deployment_manifest("web", template, replicas=0)
    )
    replicaset = client.create(
        f"{apps}/replicasets",
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": "web-5d9f",
                "ownerReferences": [_ref("apps/v1", "Deployment", deployment)],
            },
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": template,
            },
        },
    )
    body = pod_manifest(name, namespace, labels={"app": "web", "pod-template-hash": "5d9f"})
    body["metadata"]["ownerReferences"] = [_ref("apps/v1", "ReplicaSet", replicaset)]
    pod = client.create(f"/api/v1/namespaces/{namespace}/pods", body)
    return Kubelet(client).create_pcr(pod, annotations=annotations)[0]


def _ref(api_version: str, kind: str, owner: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }


def test_denied_namespaced_name_advises_the_passing_value_in_the_deployment_template(
    explain: Any, client: Client, namespace: str
) -> None:
    write_lease(client, namespace, "signer-0_x", renewed_ago=-3600)
    owned_pod(client, namespace, "web-5d9f-abcde", {"kubernetes.io/service-names": "Shop/Web"})

    code, out, _ = explain("pod", "web-5d9f-abcde", "-n", namespace)
    print(f"\n$ explain pod web-5d9f-abcde -n {namespace}\n{out}(exit {code})")

    assert code == 3, out
    assert f"  owner: Deployment {namespace}/web" in out.splitlines()
    fix = next(line.strip() for line in out.splitlines() if line.strip().startswith("fix: "))
    assert fix == (
        f"fix: set Deployment {namespace}/web's Pod template (spec.template.spec.volumes"
        ".projected.sources[].podCertificate.userAnnotations) to "
        '{kubernetes.io/service-names: "web"}; the Deployment replaces its Pods with ones '
        "that carry the change"
    )
    assert "'Web'" not in fix


def test_following_the_advice_is_accepted(explain: Any, client: Client, namespace: str) -> None:
    write_lease(client, namespace, "signer-0_x", renewed_ago=-3600)
    Kubelet(client).create_service("web", namespace, selector={"app": "web"})
    owned_pod(client, namespace, "web-5d9f-fixed", {"kubernetes.io/service-names": "web"})

    code, out, _ = explain("pod", "web-5d9f-fixed", "-n", namespace)

    assert code == 0, out
    assert f"names: web.{namespace}.svc.cluster.local, web.{namespace}.svc" in out


def test_selector_mismatch_advice_names_labels_for_the_template_or_a_selector(
    explain: Any, client: Client, namespace: str
) -> None:
    write_lease(client, namespace, "signer-0_x", renewed_ago=-3600)
    Kubelet(client).create_service("web", namespace, selector={"app": "web", "tier": "fe"})
    owned_pod(client, namespace, "web-5d9f-abcde", SERVICE)

    code, out, _ = explain("pod", "web-5d9f-abcde", "-n", namespace)

    assert code == 2, out
    assert (
        f"fix: add labels tier=fe to Deployment {namespace}/web's Pod template "
        f"(spec.template.metadata.labels), or set Service {namespace}/web's selector to app=web"
    ) in out


# 4. kubectl habits ----------------------------------------------------------------------------


@pytest.mark.usefixtures("issuable_under_a_leader")
def test_names_as_kubectl_takes_them(explain: Any, namespace: str) -> None:
    first_lines = {
        explain(*args)[1].splitlines()[0]
        for args in (
            ("pod", "web-0", "-n", namespace),
            ("pod", "web-0", "--namespace", namespace),
            ("pod", f"{namespace}/web-0"),
            ("pod/web-0", "-n", namespace),
            ("pods", "web-0", f"--namespace={namespace}"),
        )
    }
    assert first_lines == {f"Pod {namespace}/web-0 (signer kubernetes.io/service-serving): issue"}


@pytest.mark.usefixtures("issuable_under_a_leader")
def test_context_and_its_namespace_come_from_the_kubeconfig(
    explain: Any, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    config = control_plane.kubeconfig_for()
    good = config["contexts"][0]
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"] = [
        {"name": "broken", "context": {"cluster": "nowhere", "user": "envtest"}},
        {"name": "team", "context": {**good["context"], "namespace": namespace}},
    ]
    config["current-context"] = "broken"
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))

    code, out, _ = explain("pod", "web-0", "--context", "team", kubeconfig=path)
    assert code == 0, out
    assert out.startswith(f"Pod {namespace}/web-0 ")
    code, _, err = explain("pod", "web-0", kubeconfig=path)
    assert code == 1 and err.startswith("error: explain: ")


@pytest.mark.usefixtures("issuable_under_a_leader")
def test_yaml_and_json_use_camel_case_keys(explain: Any, namespace: str) -> None:
    code, out, _ = explain("pod", "web-0", "-n", namespace, "-o", "yaml")
    body = yaml.safe_load(out)
    assert code == 0
    assert body["signerName"] == "kubernetes.io/service-serving"
    assert body["signer"]["lease"]["holderIdentity"] == "signer-0_x"
    [request] = body["requests"]
    assert request["dnsNames"] == [f"web.{namespace}.svc.cluster.local", f"web.{namespace}.svc"]
    assert request["outcome"] == "issue" and "creationTimestamp" in request
    as_json = json.loads(explain("pod", "web-0", "-n", namespace, "-o", "json")[1])
    assert as_json["requests"][0]["dnsNames"] == request["dnsNames"]
    assert as_json.keys() == body.keys()

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        if isinstance(value, list):
            return {k for v in value for k in keys(v)}
        return set()

    assert not [k for k in keys(body) if "_" in k]
