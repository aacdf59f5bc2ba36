"""`status` (and `explain --all`) against the real API server and a real signer process:
the signer's health, then every request that waits, was denied or
failed, by namespace and reason, oldest first, with advice; issued ones counted. Checked
line by line, with times and generated names replaced by placeholders."""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from cryptography import x509

from cli.main import main
from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, generate_key, pcr_manifest, pcr_path
from kube.client import Client
from manager import buildinfo
from tests.integration.manager_process import SignerProcess, condition_of, eventually
from tests.integration.manifests import ensure_namespace
from tests.integration.signer_harness import unique_signer_name
from trust.ca import write_ca

LEASE = "status-signer"


@pytest.fixture
def cluster_state(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> Iterator[dict[str, Any]]:
    """A signer leading for a signer name of its own, and requests in three namespaces:
    issued, waiting (two reasons), denied and failed."""
    signer_name = unique_signer_name()
    shop, data = namespace, f"{namespace[:40]}-data"
    quiet = f"{namespace[:40]}-quiet"
    for ns in (data, quiet):
        ensure_namespace(client, ns)
    write_ca(tmp_path / "ca")
    signer = SignerProcess(
        control_plane.kubeconfig,
        tmp_path / "ca",
        tmp_path / "signer.log",
        f"--leader-elect-resource-namespace={shop}",
        f"--leader-elect-resource-name={LEASE}",
        signer_name=signer_name,
    )
    kubelet = Kubelet(client, signer_name)
    try:
        assert eventually(signer.leading, 60), "\n".join(signer.log_lines()[-20:])
        names: dict[str, str] = {}

        def request(ns: str, pod_name: str, annotations: dict[str, str], **pod: Any) -> None:
            created, _ = kubelet.create_pcr(
                kubelet.create_pod(pod_name, ns, **pod), annotations=annotations
            )
            names[pod_name] = created["metadata"]["name"]

        kubelet.create_service("web", shop, selector={"app": "web"})
        request(shop, "web-0", {"kubernetes.io/service-names": "web"}, labels={"app": "web"})
        request(shop, "api-0", {"kubernetes.io/service-names": "api"}, labels={"app": "api"})
        request(shop, "api-1", {"kubernetes.io/service-names": "api"}, labels={"app": "api"})
        request(shop, "bad-0", {"kubernetes.io/service-names": "Shop/Web"}, labels={"app": "web"})
        kubelet.create_service("db", data, selector={"app": "db"})
        request(data, "db-0", {"kubernetes.io/service-names": "db"}, labels={"app": "postgres"})
        gone = kubelet.create_pod("gone-0", data, labels={"app": "db"})
        body = pcr_manifest(
            gone,
            generate_key("ECDSAP256"),
            signer_name=signer_name,
            annotations={"kubernetes.io/service-names": "db"},
        )
        body["spec"]["podUID"] = str(uuid.uuid4())
        names["gone-0"] = client.create(pcr_path(data), body)["metadata"]["name"]
        kubelet.create_service("ok", quiet, selector={"app": "ok"})
        request(quiet, "ok-0", {"kubernetes.io/service-names": "ok"}, labels={"app": "ok"})

        finished = {
            (shop, "web-0"): "Issued",
            (shop, "bad-0"): "Denied",
            (data, "gone-0"): "Failed",
            (quiet, "ok-0"): "Issued",
        }

        def reached(ns: str, pod_name: str, condition: str) -> bool:
            return condition_of(client, ns, names[pod_name]) == condition

        for (ns, pod_name), condition in finished.items():
            probe = functools.partial(reached, ns, pod_name, condition)
            assert eventually(probe, 30), (
                pod_name,
                condition_of(client, ns, names[pod_name]),
            )
        ca = x509.load_pem_x509_certificate((tmp_path / "ca" / "ca.crt").read_bytes())
        yield {
            "holder": _holder(client, shop),
            "signer": signer_name,
            "shop": shop,
            "data": data,
            "quiet": quiet,
            "names": names,
            "ca": ca,
            "kubeconfig": control_plane.kubeconfig,
        }
    finally:
        assert signer.stop() == 0


TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ(, (in )?\d+[smhd](\d\dm)?( ago)?)?")


def normalise(text: str, state: dict[str, Any]) -> list[str]:
    text = text.replace(state["holder"], "<holder>")
    text = TIME.sub("<time>", text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uid>", text)
    for pod_name, pcr in state["names"].items():
        text = text.replace(pcr, f"<{pod_name}>")
    for key in ("shop", "data", "quiet"):
        text = text.replace(state[key], key.upper())
    text = re.sub(r"renewed \d+s ago", "renewed <age> ago", text)
    text = re.sub(r"(expires|deletes it) \S+ from now", r"\1 <span> from now", text)
    text = re.sub(r"\d+m from now", "<span> from now", text)
    text = re.sub(r"ClusterTrustBundle [^;]+;", "ClusterTrustBundle <bundle>;", text)
    return text.replace(state["signer"], "<signer>").splitlines()


def run(state: dict[str, Any], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main,
        [
            *args,
            f"--kubeconfig={state['kubeconfig']}",
            f"--signer-name={state['signer']}",
            f"--lease-namespace={state['shop']}",
            f"--lease-name={LEASE}",
        ],
        prog_name="service-serving-signer",
    )
    return result.exit_code, result.stdout + result.stderr


def test_status_shows_health_then_what_is_not_issued_by_namespace_and_reason(
    cluster_state: dict[str, Any],
) -> None:
    code, out = run(cluster_state, "status")
    print(f"\n$ service-serving-signer status\n{out}(exit {code})")

    assert code == 2, out
    ca: x509.Certificate = cluster_state["ca"]
    subject = ca.subject.rfc4514_string()
    cleanup = (
        "      cleanup: kube-controller-manager deletes it <span> from now (at <time>) unless "
        "it is decided first; kubelet then makes a new request"
    )
    header = [
        "Signer <signer>",
        f"  leader: <holder> (renewed <age> ago, Lease SHOP/{LEASE})",
        "    leading since <time>; 0 leader changes",
        f"  signer process: running (presence Lease SHOP/{LEASE}-presence renewed <age> ago by "
        f"<holder>, version {buildinfo.current().version})",
        "  bundle: published as ClusterTrustBundle <bundle>; CA expires <time>",
        f"    anchor: {subject}, expires <time>",
        f"  material in use: {subject}, expires <time> (from the newest issued chain)",
        "Requests in all namespaces: 7 (1 Denied, 1 Failed, 2 Issued, 3 waiting)",
    ]
    blocks = {
        cluster_state["data"]: [
            "",
            "Namespace DATA",
            "  Failed PodNotFound: 1 request(s)",
            "    Pod gone-0",
            "      PodCertificateRequest <gone-0> (created <time>; key ECDSAP256): Failed",
            "        reason: PodNotFound",
            "        message: Pod DATA/gone-0 with uid <uid> does not exist",
            "        fix: the Pod is gone or was re-created; kubelet makes a new request for the "
            "new Pod",
            "  waiting ServiceSelectorMismatch: 1 request(s)",
            "    Pod db-0",
            "      PodCertificateRequest <db-0> (created <time>; key ECDSAP256): "
            "waits on 1 Service(s)",
            "        Service DATA/db: ServiceSelectorMismatch",
            "          Service 'db' selector {app=db} does not select Pod 'db-0'; "
            "PodCertificateRequest DATA/<db-0> waits until it does",
            "          selector key app: Service wants 'db', Pod has 'postgres'",
            "          fix: add labels app=db to Pod DATA/db-0's metadata.labels, or set Service "
            "DATA/db's selector to app=postgres",
            "  " + cleanup,
        ],
        cluster_state["shop"]: [
            "",
            "Namespace SHOP",
            "  waiting ServiceNotFound: 2 request(s)",
            "    Pod api-0",
            "      PodCertificateRequest <api-0> (created <time>; key ECDSAP256): "
            "waits on 1 Service(s)",
            "        Service SHOP/api: ServiceNotFound",
            "          Service 'api' does not exist in namespace 'SHOP'; PodCertificateRequest "
            "SHOP/<api-0> waits until it does",
            "          fix: create Service SHOP/api with selector app=api, or name an existing "
            "Service in Pod SHOP/api-0's spec.volumes.projected.sources[].podCertificate"
            ".userAnnotations",
            "  " + cleanup,
            "    Pod api-1",
            "      PodCertificateRequest <api-1> (created <time>; key ECDSAP256): "
            "waits on 1 Service(s)",
            "        Service SHOP/api: ServiceNotFound",
            "          Service 'api' does not exist in namespace 'SHOP'; PodCertificateRequest "
            "SHOP/<api-1> waits until it does",
            "          fix: create Service SHOP/api with selector app=api, or name an existing "
            "Service in Pod SHOP/api-1's spec.volumes.projected.sources[].podCertificate"
            ".userAnnotations",
            "  " + cleanup,
            "  Denied InvalidUnverifiedUserAnnotations: 1 request(s)",
            "    Pod bad-0",
            "      PodCertificateRequest <bad-0> (created <time>; key ECDSAP256): Denied",
            "        reason: InvalidUnverifiedUserAnnotations",
            "        message: entry 1 of kubernetes.io/service-names 'Shop/Web' names a namespace; "
            "only Services in the Pod's own namespace can be used, so write just the Service "
            "name ('web')",
            "        fix: set Pod SHOP/bad-0's spec.volumes.projected.sources[].podCertificate"
            '.userAnnotations to {kubernetes.io/service-names: "web"}; Pod specs are '
            "immutable: delete the Pod and create it again with the change",
        ],
    }
    expected = header + [line for ns in sorted(blocks) for line in blocks[ns]]
    assert normalise(out, cluster_state) == expected


def _holder(client: Client, namespace: str) -> str:
    lease = client.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}")
    return str(lease["spec"]["holderIdentity"])


def test_status_in_one_namespace_and_explain_all_agree(cluster_state: dict[str, Any]) -> None:
    code, out = run(cluster_state, "status", "-n", cluster_state["quiet"])
    assert code == 0, out
    assert normalise(out, cluster_state)[-1] == "Requests in namespace QUIET: 1 (1 Issued)"

    code, out = run(cluster_state, "explain", "--all", "-n", cluster_state["data"], "-o", "yaml")
    body = yaml.safe_load(out)
    assert code == 2, out
    assert body["namespace"] == cluster_state["data"]
    assert body["counts"] == {"Failed": 1, "waiting": 1}
    [group_ns] = body["namespaces"]
    assert [(g["state"], g["reason"]) for g in group_ns["groups"]] == [
        ("Failed", "PodNotFound"),
        ("waiting", "ServiceSelectorMismatch"),
    ]
    assert body["signer"]["lease"]["leader"] == "renewing"


def test_status_is_bounded_and_says_what_it_left_out(cluster_state: dict[str, Any]) -> None:
    code, out = run(cluster_state, "status", "--max-requests=2")
    lines = normalise(out, cluster_state)
    assert code == 2
    [total] = [line for line in lines if line.startswith("Requests in all namespaces: ")]
    shown_counts = total.removeprefix("Requests in all namespaces: 7 (").removesuffix(")")
    counts = {state: int(n) for n, state in (c.split(" ", 1) for c in shown_counts.split(", "))}
    assert sum(counts.values()) == 7 and counts["Issued"] == 2, total
    assert len([line for line in lines if line.startswith("    Pod ")]) == 2
    assert (
        "  3 more not shown (the oldest 2 are); narrow with -n NAMESPACE or raise --max-requests"
    ) in lines


def test_explain_of_an_issued_request_shows_names_not_after_and_refresh(
    cluster_state: dict[str, Any],
) -> None:
    code, out = run(cluster_state, "explain", "pod", "web-0", "-n", cluster_state["shop"])
    print(f"\n$ explain pod web-0 -n SHOP\n{out}(exit {code})")

    assert code == 0, out
    lines = normalise(out, cluster_state)
    assert lines[0] == "Pod SHOP/web-0 (signer <signer>): issue"
    assert lines[2:] == [
        "  PodCertificateRequest <web-0> (created <time>; key ECDSAP256): Issued",
        "    names: web.SHOP.svc.cluster.local, web.SHOP.svc",
        "    notAfter: <time>",
        "    beginRefreshAt: <time>",
    ]
    request = json.loads(
        run(cluster_state, "explain", "pod", f"{cluster_state['shop']}/web-0", "-o", "json")[1]
    )["requests"][0]
    not_after = datetime.fromisoformat(request["notAfter"].replace("Z", "+00:00"))
    refresh = datetime.fromisoformat(request["beginRefreshAt"].replace("Z", "+00:00"))
    created = datetime.fromisoformat(request["creationTimestamp"].replace("Z", "+00:00"))
    assert created < refresh < not_after <= created + timedelta(hours=24, minutes=1)
    assert request["condition"] == "Issued"


def test_status_reads_in_pages_and_agrees_with_one_page(
    cluster_state: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import troubleshoot.status

    whole = normalise(run(cluster_state, "status")[1], cluster_state)
    monkeypatch.setattr(troubleshoot.status, "PAGE_SIZE", 2)  # 7 requests: four pages
    paged = normalise(run(cluster_state, "status")[1], cluster_state)
    assert paged == whole
    assert whole[7] == "Requests in all namespaces: 7 (1 Denied, 1 Failed, 2 Issued, 3 waiting)"
