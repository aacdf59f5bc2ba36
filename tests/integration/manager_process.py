"""Helpers for the manager's integration tests around `controlplane.process.SignerProcess`
(the one process helper, re-exported here): issue one request, read its condition."""

from __future__ import annotations

from controlplane.kubelet import Kubelet, pcr_path
from controlplane.process import PRODUCT_SIGNER as PRODUCT_SIGNER
from controlplane.process import SignerProcess as SignerProcess
from controlplane.process import eventually as eventually
from controlplane.process import http_get as http_get
from kube.client import Client


def issue_one(
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    pod_name: str,
    *,
    signer_name: str = PRODUCT_SIGNER,
    service: str = "web",
) -> str:
    """Create a Pod selected by `service` (which must exist) and its PCR; return the name."""
    pod = kubelet.create_pod(pod_name, namespace, labels={"app": service})
    pcr, _ = kubelet.create_pcr(
        pod, annotations={"kubernetes.io/service-names": service}, signer_name=signer_name
    )
    return str(pcr["metadata"]["name"])


def condition_of(client: Client, namespace: str, name: str) -> str | None:
    status = client.get(pcr_path(namespace, "v1", name)).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True":
            return str(condition["type"])
    return None


def wait_issued(client: Client, namespace: str, name: str, timeout: float) -> bool:
    return eventually(lambda: condition_of(client, namespace, name) == "Issued", timeout)
