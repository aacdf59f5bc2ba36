"""The signer's own identity across a token refresh (`make soak`):
the shipped Deployment with its ServiceAccount token shortened to the minimum (600 s); the
kubelet rewrites the token at ~80% of its life; the signer keeps working after the first
token has expired — in-cluster (the official client's loader re-reads the token file) and
with a kubeconfig naming the token file (`tokenFile`)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from controlplane.cluster import Cluster
from kube.client import Client
from tests.integration.manager_process import eventually
from tests.integration.nodes import create_service
from tests.integration.shipped import (
    SA_MOUNT,
    ShippedSigner,
    deploy,
    token_file_kubeconfig,
    undeploy,
)
from tests.integration.test_kubelet_shipped import issue_through_kubelet, jwt_claims
from trust.ca import cert_pem, generate_ca, key_pem

TOKEN_SECONDS = 600


@pytest.mark.timeout(30 * 60)
def test_signer_keeps_working_after_the_kubelet_refreshed_its_token(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    ca = generate_ca("token refresh test root")
    pods = deploy(
        cluster,
        cluster_client,
        key_pem(ca.key),
        cert_pem(ca.cert),
        cert_pem(ca.cert),
        token_expiration=TOKEN_SECONDS,
    )
    in_cluster_pod, file_pod = pods[0], pods[1 % len(pods)]
    create_service(cluster_client, node_namespace, "web", {"app": "web"})
    token_path = in_cluster_pod.volume(SA_MOUNT) / "token"
    first = token_path.read_text()
    expires = jwt_claims(first)["exp"]
    assert jwt_claims(first)["exp"] - jwt_claims(first)["iat"] == TOKEN_SECONDS

    token_file_kubeconfig(cluster, file_pod.volume("/tmp") / "kubeconfig")
    in_cluster = ShippedSigner(cluster, in_cluster_pod, tmp_path / "in-cluster.log")
    # A second process with the kubeconfig: only the publisher (the in-cluster one signs),
    # its own Lease, so losing its token shows as a lost Lease.
    with_file = ShippedSigner(
        cluster,
        file_pod,
        tmp_path / "token-file.log",
        "--kubeconfig=/tmp/kubeconfig",
        "--controllers=publisher",
        "--leader-elect-resource-name=token-file-check",
    )
    log: list[str] = []
    try:
        assert eventually(in_cluster.leading, 90), in_cluster.log_lines()[-20:]
        assert eventually(with_file.leading, 90), with_file.log_lines()[-20:]
        issue_through_kubelet(cluster, cluster_client, node_namespace, "before")

        refreshed = eventually(lambda: token_path.read_text() != first, TOKEN_SECONDS, interval=5)
        log.append(
            f"token refreshed by the kubelet {expires - time.time():.0f}s before the first expired"
        )
        assert refreshed
        time.sleep(max(0.0, expires - time.time()) + 90)  # the first token is now invalid

        issue_through_kubelet(cluster, cluster_client, node_namespace, "after", node=1)
        log.append("in-cluster signer issued after the first token expired")
        assert in_cluster.alive() and in_cluster.leading()
        unauthorized = [
            line for line in in_cluster.log_lines() if re.search(r"\b401\b|Unauthorized", line)
        ]
        assert not unauthorized, unauthorized[:3]
        file_ok = with_file.alive() and with_file.leading()
        log.append(f"tokenFile kubeconfig process alive and leading: {file_ok}")
        print("\n".join(log))
        assert file_ok, with_file.log_lines()[-20:]
    finally:
        in_cluster.stop()
        with_file.stop()
        undeploy(cluster_client)
