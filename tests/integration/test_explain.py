"""`service-serving-signer explain` against the real API server: for each
wait and deny reason, the decision the signer's own `decide` takes, why, what to fix, and
the exit status that says which. No signer runs, so every request stays as created
(explain is read-only: the tests also check it wrote nothing); a Lease held and renewed
by a stand-in says a signer leads, except where a test says otherwise."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, generate_key, pcr_manifest, pcr_path, stub_csr
from kube.client import Client
from tests.integration.explain_harness import LEASE, run_explain, write_lease

pytestmark = pytest.mark.usefixtures("leader")

SERVICE = {"kubernetes.io/service-names": "web"}
FQDN = {"kubernetes.io/add-pod-fqdn": "true"}


@pytest.fixture
def leader(client: Client, namespace: str) -> str:
    """A renewing leader: renewTime an hour ahead keeps the Lease valid for the whole
    test, as if its holder kept renewing."""
    write_lease(client, namespace, "signer-0_test", renewed_ago=-3600)
    return "signer-0_test"


@pytest.fixture
def explain(control_plane: ControlPlane, namespace: str) -> Any:
    return functools.partial(run_explain, control_plane.kubeconfig, namespace)


def pcr_name(created: dict[str, Any]) -> str:
    return str(created["metadata"]["name"])


def assert_untouched(client: Client, namespace: str, created: dict[str, Any]) -> None:
    stored = client.get(pcr_path(namespace, "v1", pcr_name(created)))
    assert stored["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    events = client.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    # kube-apiserver's ipallocator repair loop may report on a new Service; none is ours.
    assert [e for e in events if e.get("reportingController") == "service-serving-signer"] == []


def test_explain_waiting_on_a_missing_service_exits_2(
    explain: Any, client: Client, kubelet: Kubelet, namespace: str
) -> None:
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE)

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 2, out
    assert (
        out.splitlines()[0] == f"Pod {namespace}/web-0 (signer kubernetes.io/service-serving): wait"
    )
    assert f"PodCertificateRequest {pcr_name(created)}" in out
    assert f"Service {namespace}/web: ServiceNotFound" in out
    assert f"fix: create Service {namespace}/web with selector app=web, or name an existing" in out
    assert_untouched(client, namespace, created)


def test_explain_selector_mismatch_names_the_differing_keys(
    explain: Any, client: Client, kubelet: Kubelet, namespace: str
) -> None:
    kubelet.create_service("web", namespace, selector={"app": "web", "tier": "frontend"})
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "api", "team": "a"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE)

    code, out, _ = explain("pod", f"{namespace}/web-0")
    print(f"\n$ service-serving-signer explain pod {namespace}/web-0\n{out}(exit {code})")

    assert code == 2, out
    assert f"Service {namespace}/web: ServiceSelectorMismatch" in out
    assert "selector key app: Service wants 'web', Pod has 'api'" in out
    assert "selector key tier: Service wants 'frontend', Pod has no such label" in out
    assert "selector key team" not in out  # only the keys whose values differ
    body = json.loads(explain("pcr", f"{namespace}/{pcr_name(created)}", "-o", "json")[1])
    assert body["outcome"] == "wait"
    assert body["requests"][0]["blocking"][0]["differingKeys"] == {
        "app": {"service": "web", "pod": "api"},
        "tier": {"service": "frontend", "pod": None},
    }
    assert_untouched(client, namespace, created)


def test_explain_external_name_service_waits_as_selector_mismatch(
    explain: Any, kubelet: Kubelet, namespace: str
) -> None:
    kubelet.create_service("web", namespace, selector=None, service_type="ExternalName")
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    kubelet.create_pcr(pod, annotations=SERVICE)

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 2, out
    assert "ServiceSelectorMismatch" in out and "ExternalName" in out


def test_explain_pod_fqdn_waits_for_a_headless_service(
    explain: Any, kubelet: Kubelet, namespace: str
) -> None:
    kubelet.create_service("db", namespace, selector={"app": "db"})
    pod = kubelet.create_pod(
        "db-0", namespace, labels={"app": "db"}, hostname="db-0", subdomain="db"
    )
    kubelet.create_pcr(pod, annotations=FQDN)

    code, out, _ = explain("pod", f"{namespace}/db-0")

    assert code == 2, out
    assert f"Service {namespace}/db: ServiceNotHeadless" in out
    assert "clusterIP: None" in out


def test_explain_request_that_would_be_issued_exits_0_with_its_names(
    explain: Any, client: Client, kubelet: Kubelet, namespace: str
) -> None:
    kubelet.create_service("web", namespace, selector={"app": "web"})
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE)

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 0, out
    assert "would be issued now" in out
    assert f"names: web.{namespace}.svc.cluster.local, web.{namespace}.svc" in out
    assert_untouched(client, namespace, created)


@pytest.mark.parametrize(
    ("pod_kwargs", "pcr_kwargs", "reason"),
    [
        ({}, {"annotations": {"example.com/x": "1"}}, "InvalidUnverifiedUserAnnotations"),
        (
            {},
            {"annotations": {"kubernetes.io/service-names": "a.b"}},
            "InvalidUnverifiedUserAnnotations",
        ),
        ({}, {"annotations": FQDN}, "PodHostnameRequired"),
        ({}, {"annotations": SERVICE, "stub": "subject"}, "InvalidStubPKCS10Request"),
    ],
)
def test_explain_request_that_would_be_denied_exits_3_with_the_fix(
    explain: Any,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    pod_kwargs: dict[str, Any],
    pcr_kwargs: dict[str, Any],
    reason: str,
) -> None:
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"}, **pod_kwargs)
    if pcr_kwargs.get("stub") == "subject":
        key = generate_key("ECDSAP256")
        pcr_kwargs = {**pcr_kwargs, "key": key, "stub": stub_csr(key, subject_cn="web")}
    created, _ = kubelet.create_pcr(pod, **pcr_kwargs)

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 3, out
    assert f"would be Denied ({reason})" in out
    assert f"reason: {reason}" in out
    assert "message: " in out and "fix: " in out
    assert_untouched(client, namespace, created)


@pytest.mark.parametrize(
    ("spec", "summary"),
    [
        ({"nodeName": "node-2"}, "would be Denied (PodMismatch)"),
        ({"serviceAccountName": "intruder"}, "would be Denied (PodMismatch)"),
        ({"podUID": "random"}, "would be Failed (PodNotFound)"),
    ],
)
def test_explain_pcr_for_the_wrong_pod_exits_3(
    explain: Any,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    spec: dict[str, str],
    summary: str,
) -> None:
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    body = pcr_manifest(
        pod,
        generate_key("ECDSAP256"),
        signer_name="kubernetes.io/service-serving",
        annotations=SERVICE,
    )
    body["spec"].update({k: str(uuid.uuid4()) if v == "random" else v for k, v in spec.items()})
    created = client.create(pcr_path(namespace), body)

    code, out, _ = explain("pcr", f"{namespace}/{pcr_name(created)}")

    assert code == 3, out
    assert summary in out


def test_explain_request_of_a_terminating_pod_exits_3(
    explain: Any, client: Client, kubelet: Kubelet, namespace: str
) -> None:
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE)
    # No kubelet confirms the deletion, so the Pod stays terminating.
    client.delete(f"/api/v1/namespaces/{namespace}/pods/web-0", params={"gracePeriodSeconds": 30})

    code, out, _ = explain("pcr", f"{namespace}/{pcr_name(created)}")

    assert code == 3, out
    assert "would be Failed (PodTerminating)" in out


def test_explain_already_denied_request_reports_its_condition(
    explain: Any, client: Client, kubelet: Kubelet, namespace: str
) -> None:
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE)
    client.patch(
        pcr_path(namespace, "v1", pcr_name(created)) + "/status",
        {
            "status": {
                "conditions": [
                    {
                        "type": "Denied",
                        "status": "True",
                        "reason": "UnsupportedKeyType",
                        "message": "use ECDSAP256",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ]
            }
        },
    )

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 3, out
    assert f"PodCertificateRequest {pcr_name(created)} (created " in out
    assert re.search(
        rf"PodCertificateRequest {pcr_name(created)} \(created [^)]*\): Denied$", out, re.M
    )
    assert "reason: UnsupportedKeyType" in out
    assert (
        f"fix: set Pod {namespace}/web-0's spec.volumes.projected.sources[].podCertificate"
        ".keyType to ECDSAP256; Pod specs are immutable: delete the Pod and create it again"
    ) in out


def test_explain_pod_without_a_request_exits_4(
    explain: Any, kubelet: Kubelet, namespace: str
) -> None:
    kubelet.create_pod("web-0", namespace, labels={"app": "web"})

    code, out, _ = explain("pod", f"{namespace}/web-0")

    assert code == 4, out
    assert "projects no podCertificate volume" in out


def test_explain_missing_object_or_other_signer_is_one_error_line_exit_1(
    explain: Any, kubelet: Kubelet, namespace: str
) -> None:
    code, _, err = explain("pod", f"{namespace}/nope")
    assert (code, err) == (1, f"error: explain: Pod {namespace}/nope not found\n")
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = kubelet.create_pcr(pod, annotations=SERVICE, signer_name="example.com/other")
    code, out, _ = explain("pcr", f"{namespace}/{pcr_name(created)}")
    assert code == 5 and "is for signer example.com/other" in out
    assert "nothing will act: this signer serves kubernetes.io/service-serving" in out
    code, _, err = explain("pod")
    assert code == 1 and "name a Pod or a request" in err
    code, _, err = explain("pod", "a/b/c")
    assert code == 1 and "is not NAME or NAMESPACE/NAME" in err


def test_explain_exit_status_from_the_real_cli(
    control_plane: ControlPlane, kubelet: Kubelet, namespace: str, tmp_path: Path
) -> None:
    pod = kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    kubelet.create_pcr(pod, annotations=SERVICE)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "explain",
            "pod",
            f"{namespace}/web-0",
            f"--lease-namespace={namespace}",
            f"--lease-name={LEASE}",
        ],
        env={"KUBECONFIG": str(control_plane.kubeconfig), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "ServiceNotFound" in result.stdout
