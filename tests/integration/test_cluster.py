"""The node-capable cluster is what it claims: each hollow node has its own
node identity, checked by the Node authorizer and NodeRestriction like a real kubelet;
its only network listener is on loopback; it leaves no /tmp/hollow-kubelet.* directory or
/tmp/kubelet_remote_*.sock behind, and its root directory goes on stop; it never writes
the host's iptables (kubemark's kubelet created KUBE-FIREWALL and canary chains)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from controlplane.cluster import Cluster
from controlplane.hollow_node import HollowNode
from controlplane.kubelet import Kubelet
from kube.client import ApiError, Client


def listening_addresses(pid: int) -> set[str]:
    """Local addresses of the process's listening TCP sockets (from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                found.add(local.split(":")[0])
    return found


LOOPBACK_HEX = {"0100007F", "00000000000000000000000001000000"}


def test_hollow_node_listens_on_loopback_only_and_cleans_up(cluster: Cluster) -> None:
    before = set(glob.glob("/tmp/hollow-kubelet.*")) | set(glob.glob("/tmp/kubelet_remote_*"))
    node = HollowNode(cluster.plane, "hollow-node-check").start()
    try:
        assert node.pid is not None
        addresses = listening_addresses(node.pid)
        assert addresses and addresses <= LOOPBACK_HEX, addresses
        assert (node.root / "runtime.sock").exists()
    finally:
        node.stop()
        cluster.plane.client().delete("/api/v1/nodes/hollow-node-check")
    after = set(glob.glob("/tmp/hollow-kubelet.*")) | set(glob.glob("/tmp/kubelet_remote_*"))
    assert after <= before
    assert not node.root.exists()


def test_hollow_node_leaves_the_hosts_iptables_alone(cluster: Cluster) -> None:
    # The kubelet sets up its iptables chains before its Node turns Ready, logging
    # "Initialized iptables rules." per IP family when it did (kubelet_network_linux.go).
    for node in cluster.nodes:
        log = node.log_path.read_text(errors="replace")
        assert "kubelet_network_linux.go" not in log
        assert "Initialized iptables rules" not in log


def node_client(cluster: Cluster, index: int, tmp_path: Path) -> Client:
    node = cluster.nodes[index]
    path = cluster.plane.write_kubeconfig(tmp_path / f"{node.name}.kubeconfig", user=node.identity)
    return Client.from_kubeconfig(str(path))


def test_each_node_is_authorized_as_itself(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    cluster_client.create(
        f"/api/v1/namespaces/{node_namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated"}},
    )
    as_node = node_client(cluster, 0, tmp_path)
    me = as_node.create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )["status"]["userInfo"]
    assert me["username"] == f"system:node:{cluster.nodes[0].name}"
    assert "system:nodes" in me["groups"]
    # Node authorizer: a Secret no Pod on this node uses is not readable.
    with pytest.raises(ApiError) as denied:
        as_node.get(f"/api/v1/namespaces/{node_namespace}/secrets/unrelated")
    assert denied.value.status == 403


def test_node_restriction_refuses_a_request_for_another_nodes_pod(
    cluster: Cluster, cluster_client: Client, node_namespace: str, tmp_path: Path
) -> None:
    other = cluster.nodes[1].name
    pod = Kubelet(cluster_client).create_pod("elsewhere", node_namespace, node_name=other)
    as_node = node_client(cluster, 0, tmp_path)
    with pytest.raises(ApiError) as refused:
        Kubelet(as_node).create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})
    assert refused.value.status == 403
