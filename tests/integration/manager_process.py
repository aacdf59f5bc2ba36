"""Helpers for the manager's integration tests around `controlplane.process.SignerProcess`
(the one process helper, re-exported here): issue one request, read its condition, run
the signer with only a token's rights."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet, pcr_path
from controlplane.process import PRODUCT_SIGNER as PRODUCT_SIGNER
from controlplane.process import SignerProcess as SignerProcess
from controlplane.process import eventually as eventually
from controlplane.process import http_get as http_get
from kube.client import Client
from trust.ca import write_ca


def issue_one(
    kubelet: Kubelet, namespace: str, pod_name: str, *, signer_name: str = PRODUCT_SIGNER
) -> str:
    """Create a Pod selected by Service `web` (which must exist) and its PCR; return the
    request's name."""
    pod = kubelet.create_pod(pod_name, namespace, labels={"app": "web"})
    pcr, _ = kubelet.create_pcr(
        pod, annotations={"kubernetes.io/service-names": "web"}, signer_name=signer_name
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


@contextmanager
def signer_with_token(
    control_plane: ControlPlane, token: str, tmp_path: Path, ca_dir: Path | None, *args: str
) -> Iterator[SignerProcess]:
    """A signer holding only `token`'s rights (a ServiceAccount's, for the RBAC tests); on
    leaving, its log must name nothing forbidden and it must stop with status 0."""
    kubeconfig = control_plane.write_kubeconfig(tmp_path / "sa.kubeconfig", token=token)
    signer = SignerProcess(kubeconfig, ca_dir, tmp_path / "signer.log", *args)
    try:
        yield signer
        forbidden = [line for line in signer.log_lines() if "forbidden" in line.lower()]
        assert not forbidden, forbidden[:3]
    finally:
        assert signer.stop() == 0


def signer_with_a_new_ca(
    control_plane: ControlPlane, tmp_path: Path, *args: str, **kwargs: Any
) -> SignerProcess:
    """A signer started against the plane with a fresh CA in `tmp_path/ca`, logging to
    `tmp_path/signer.log`."""
    files = write_ca(tmp_path / "ca")
    return SignerProcess(
        control_plane.kubeconfig, files.key.parent, tmp_path / "signer.log", *args, **kwargs
    )
