"""Through the real kubelet: a Pod naming a Service that does not
exist yet waits — not Running, its request neither Issued nor Denied, the signer's
Warning Event on it — and runs once the Service is created; a StatefulSet's Pod with
`add-pod-fqdn` and its headless Service gets exactly its stable DNS names."""

from __future__ import annotations

from controlplane.cluster import Cluster
from controlplane.workload import cert_volume
from kube.client import Client
from tests.integration import nodes
from tests.integration.manager_process import SignerProcess, eventually

SIGNER = nodes.unique_signer_name()
# kubelet retries a failed volume mount with exponential backoff up to ~2 minutes, so a
# Pod starts up to ~2 minutes after its certificate is issued (kubelet's doing).
AFTER_ISSUE = 300


signer = nodes.signer_fixture(SIGNER)


def test_pod_waits_for_missing_service_then_runs_when_it_is_created(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    ns = node_namespace
    nodes.serving_pod(cluster, cluster_client, ns, "late-0", app="late", signer_name=SIGNER)

    def waiting_events() -> list[dict[str, object]]:
        return [
            e
            for e in nodes.signer_events(cluster_client, ns, "late-0")
            if e["reason"] == "ServiceNotFound"
        ]

    assert eventually(lambda: bool(waiting_events()), 120), nodes.signer_events(
        cluster_client, ns, "late-0"
    )
    [event] = waiting_events()
    assert event["type"] == "Warning"
    [pcr] = nodes.pcrs_of(cluster_client, ns, "late-0")
    assert "'late'" in str(event["note"]) and pcr["metadata"]["name"] in str(event["note"])
    assert not (pcr.get("status") or {}).get("conditions")
    assert nodes.stays_not_running(cluster_client, ns, "late-0", 5)

    nodes.create_service(cluster_client, ns, "late", {"app": "late"})

    _, files = nodes.running_files(cluster, cluster_client, ns, "late-0", timeout=AFTER_ISSUE)
    leaf = nodes.chain_of(files.chain)[0]
    assert nodes.dns_sans(leaf) == nodes.service_sans("late", ns)
    assert nodes.key_matches(files.key, leaf)
    nodes.verify_against_bundle(files.chain, files.bundle, nodes.service_sans("late", ns))


def test_statefulset_pod_with_add_pod_fqdn_gets_its_stable_names(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    ns = node_namespace
    nodes.create_service(cluster_client, ns, "db", {"app": "db"}, headless=True)
    volume = cert_volume(signer_name=SIGNER, annotations={"kubernetes.io/add-pod-fqdn": "true"})
    cluster_client.create(
        f"/apis/apps/v1/namespaces/{ns}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "db"},
            "spec": {
                "serviceName": "db",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "db"}},
                "template": {
                    "metadata": {"labels": {"app": "db"}},
                    "spec": {
                        "automountServiceAccountToken": False,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "db",
                                "image": "registry.k8s.io/pause:3.10",
                                "volumeMounts": [{"name": "tls", "mountPath": "/var/run/tls"}],
                            }
                        ],
                        "volumes": [volume],
                    },
                },
            },
        },
    )

    pod, files = nodes.running_files(cluster, cluster_client, ns, "db-0", timeout=AFTER_ISSUE)

    assert pod["spec"]["hostname"] == "db-0" and pod["spec"]["subdomain"] == "db"
    leaf = nodes.chain_of(files.chain)[0]
    assert nodes.dns_sans(leaf) == [f"db-0.db.{ns}.svc.cluster.local", f"db-0.db.{ns}.svc"]
    assert nodes.key_matches(files.key, leaf)
    nodes.verify_against_bundle(files.chain, files.bundle, nodes.dns_sans(leaf))
