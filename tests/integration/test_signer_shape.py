"""KEP-6283's certificate shape as opt-ins, read back with `openssl x509 -text` from what
the real kube-apiserver stored (docs/configuration.md, "Certificate shape"):
`--pod-identity-subject` gives subject O = namespace, CN = Pod name, UID = Pod UID;
`--cluster-ip-sans` adds a ClusterIP Service's IP, and a headless Service adds none;
without either, no subject and no IP."""

from __future__ import annotations

import re
import subprocess

from kube.client import Client
from kube.types import JSON
from tests.integration.signer_harness import RunningSigner, condition, wait_terminal


def openssl_text(chain_pem: str) -> str:
    """`openssl x509 -text` of the leaf (the first certificate of the chain)."""
    return subprocess.run(
        ["openssl", "x509", "-noout", "-text"],
        input=chain_pem,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def subject_line(text: str) -> str:
    match = re.search(r"^\s*Subject:(.*)$", text, re.MULTILINE)
    assert match is not None, text
    return match.group(1).strip()


def san_line(text: str) -> str:
    match = re.search(r"X509v3 Subject Alternative Name:( critical)?[ ]*\n\s*(.*)", text)
    assert match is not None, text
    return (match.group(1) or "") + "|" + match.group(2).strip()


def issue_for_web_and_peers(
    signer: RunningSigner, client: Client, namespace: str
) -> tuple[str, JSON, str]:
    """Pod web-0 (hostname web-0, subdomain peers) selected by the ClusterIP Service `web`
    and the headless Service `peers`; its request names `web` and asks for its FQDN.
    Returns (openssl text of the leaf, the Pod, web's ClusterIP)."""
    kubelet = signer.kubelet
    pod = kubelet.create_pod(
        "web-0", namespace, labels={"app": "web"}, hostname="web-0", subdomain="peers"
    )
    web = kubelet.create_service("web", namespace, selector={"app": "web"})
    kubelet.create_service("peers", namespace, selector={"app": "web"}, headless=True)
    created, _ = kubelet.create_pcr(
        pod,
        annotations={"kubernetes.io/service-names": "web", "kubernetes.io/add-pod-fqdn": "true"},
    )
    stored = wait_terminal(client, created)
    assert condition(stored)["type"] == "Issued", stored["status"]
    return openssl_text(stored["status"]["certificateChain"]), pod, web["spec"]["clusterIP"]


def test_with_both_opt_ins_the_subject_names_the_pod_and_only_the_cluster_ip_is_an_ip_san(
    client: Client, namespace: str
) -> None:
    with RunningSigner(client, pod_identity_subject=True, cluster_ip_sans=True) as signer:
        text, pod, cluster_ip = issue_for_web_and_peers(signer, client, namespace)

    uid = pod["metadata"]["uid"]
    assert subject_line(text) == f"O = {namespace}, CN = web-0, UID = {uid}"
    assert san_line(text) == (
        f"|DNS:web.{namespace}.svc.cluster.local, DNS:web.{namespace}.svc, "
        f"DNS:web-0.peers.{namespace}.svc.cluster.local, DNS:web-0.peers.{namespace}.svc, "
        f"IP Address:{cluster_ip}"
    )


def test_a_headless_service_named_in_service_names_adds_no_ip(
    client: Client, namespace: str
) -> None:
    with RunningSigner(client, pod_identity_subject=True, cluster_ip_sans=True) as signer:
        kubelet = signer.kubelet
        pod = kubelet.create_pod("db-0", namespace, labels={"app": "db"})
        kubelet.create_service("db", namespace, selector={"app": "db"}, headless=True)
        created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "db"})
        stored = wait_terminal(client, created)

    text = openssl_text(stored["status"]["certificateChain"])
    assert subject_line(text) == f"O = {namespace}, CN = db-0, UID = {pod['metadata']['uid']}"
    assert san_line(text) == f"|DNS:db.{namespace}.svc.cluster.local, DNS:db.{namespace}.svc"


def test_without_the_opt_ins_there_is_no_subject_and_no_ip(client: Client, namespace: str) -> None:
    with RunningSigner(client) as signer:
        text, _, _ = issue_for_web_and_peers(signer, client, namespace)

    assert subject_line(text) == ""
    assert san_line(text) == (
        f" critical|DNS:web.{namespace}.svc.cluster.local, DNS:web.{namespace}.svc, "
        f"DNS:web-0.peers.{namespace}.svc.cluster.local, DNS:web-0.peers.{namespace}.svc"
    )
