"""The garbage collector is real: the kubelet's request carries
an ownerReference to its Pod, so deleting a Pod whose request waits on a missing Service
makes kube-controller-manager's garbage collector delete the request — and the signer's
waiting index lets go of it (no leak per deleted Pod)."""

from __future__ import annotations

from controlplane.cluster import Cluster
from kube.client import Client, is_not_found
from tests.integration.nodes import pcrs_of, serving_pod
from tests.integration.signer_harness import RunningSigner, eventually, running_signer_fixture

signer = running_signer_fixture("cluster_client")


def test_gc_deleting_request_with_its_pod_leaves_nothing_in_signer_index(
    cluster: Cluster, cluster_client: Client, signer: RunningSigner, node_namespace: str
) -> None:
    ns = node_namespace
    serving_pod(
        cluster,
        cluster_client,
        ns,
        "gone-0",
        app="gone",
        signer_name=signer.signer_name,
        trust_bundle=False,
    )
    [pcr] = eventually(lambda: pcrs_of(cluster_client, ns, "gone-0"), timeout=120)
    key = f"{ns}/{pcr['metadata']['name']}"
    owner = pcr["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("Pod", "gone-0")
    eventually(lambda: signer.controller.index.is_waiting(key), timeout=60, what="waiting")
    assert signer.controller.index.services_of(key) == {f"{ns}/gone"}

    cluster_client.delete(f"/api/v1/namespaces/{ns}/pods/gone-0", params={"gracePeriodSeconds": 0})

    def request_gone() -> bool:
        try:
            cluster_client.get(
                f"/apis/certificates.k8s.io/v1/namespaces/{ns}/podcertificaterequests/"
                + pcr["metadata"]["name"]
            )
            return False
        except Exception as err:
            return is_not_found(err)

    eventually(request_gone, timeout=120, what="the garbage collector deleting the request")
    eventually(lambda: not signer.controller.index.is_waiting(key), timeout=30, what="forgotten")
    assert signer.controller.index.waiting_on_service(f"{ns}/gone") == set()
    assert signer.controller.index.waiting_on_pod(f"{ns}/gone-0") == set()
    assert signer.controller.index.pending() == 0
