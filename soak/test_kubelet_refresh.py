"""The sample workload across a real kubelet refresh (`make soak`,
docs/reload.md): the shipped `web` sample asks for the shortest certificate the API allows
(`maxExpirationSeconds: 3600`); the signer sets `beginRefreshAt` at half of it, so the real
kubelet writes a new key and chain 30-36 minutes later (its check runs once a minute, plus
up to 5 minutes of jitter) by swapping the volume's `..data` link. The kubelet-written
sample script, serving the kubelet's own volume directory, presents the new certificate on
the next connection, without a restart. (`make test` covers the same with the swap made
by the test: tests/integration/test_kubelet_reload.py.)"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from controlplane.cluster import Cluster
from kube.client import Client
from tests.integration.manager_process import eventually
from tests.integration.nodes import signer_fixture, unique_signer_name, verify_against_bundle
from tests.integration.test_kubelet_reload import deploy_web, leaf_of, sample_server, served_leaf

SIGNER = unique_signer_name()
LIFETIME = 3600

signer = signer_fixture(SIGNER)


@pytest.mark.timeout(50 * 60)
@pytest.mark.usefixtures("signer")
def test_sample_server_serves_the_kubelets_refreshed_certificate_without_a_restart(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    ns, hostname = node_namespace, f"web.{node_namespace}.svc"
    _, tls, script = deploy_web(
        cluster, cluster_client, ns, SIGNER, max_expiration_seconds=LIFETIME
    )
    first_chain = tls.chain
    first = leaf_of(first_chain)
    assert first.not_valid_after_utc - first.not_valid_before_utc <= dt.timedelta(seconds=LIFETIME)
    anchors = tls.read("ca.crt")

    with sample_server(script, tls.directory, tmp_path / "server.log") as server:
        assert served_leaf(server.port, anchors, hostname) == first
        started = time.monotonic()
        assert eventually(lambda: tls.chain != first_chain, 45 * 60, interval=5), (
            "the kubelet did not refresh the certificate within 45 minutes"
        )
        refreshed_after = time.monotonic() - started
        second = leaf_of(tls.chain)
        verify_against_bundle(tls.chain, tls.read("ca.crt"), [hostname])

        assert served_leaf(server.port, tls.read("ca.crt"), hostname) == second != first
        assert server.proc.poll() is None
        assert server.loads() == 2, server.log.read_text()
    print(f"\nkubelet refreshed {refreshed_after / 60:.1f} min after the first connection")
