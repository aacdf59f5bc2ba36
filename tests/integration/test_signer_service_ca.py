"""`--signer-name=kubernetes.io/service-ca` (the name KEP-6283's PR #6284 gives the
in-tree signer) end to end on the node cluster: the publisher publishes the bundle under
that signer, the hollow kubelet's `podCertificate` and `clusterTrustBundle` projections
of that signer write files that verify, and `explain` reports the Pod under that name.
The caveat of a reserved `kubernetes.io/` name is in docs/configuration.md."""

from __future__ import annotations

from controlplane.cluster import Cluster
from kube.client import Client
from manager.options import signer_name_problem
from tests.integration import nodes
from tests.integration.explain_harness import run_cli
from tests.integration.manager_process import SignerProcess
from trust.selector import resolve_selector

SIGNER = "kubernetes.io/service-ca"

signer = nodes.signer_fixture(SIGNER)


def test_service_ca_name_publishes_projects_issues_and_explains(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    ns, client = node_namespace, cluster_client
    assert signer_name_problem(SIGNER) is None

    published = nodes.bundles(client, SIGNER)
    assert published, "the publisher published no bundle for kubernetes.io/service-ca"
    assert all(b["metadata"]["name"].startswith("kubernetes.io:service-ca:") for b in published)

    nodes.create_service(client, ns, "web", {"app": "web"})
    nodes.serving_pod(cluster, client, ns, "web-0", app="web", signer_name=SIGNER)
    pod, files = nodes.running_files(cluster, client, ns, "web-0")

    assert pod["status"]["phase"] == "Running"
    [pcr] = nodes.pcrs_of(client, ns, "web-0")
    assert pcr["spec"]["signerName"] == SIGNER
    leaf = nodes.chain_of(files.chain)[0]
    assert nodes.key_matches(files.key, leaf)
    assert nodes.dns_sans(leaf) == nodes.service_sans("web", ns)
    nodes.verify_against_bundle(files.chain, files.bundle, nodes.service_sans("web", ns))
    selected = resolve_selector(
        nodes.bundles(client, SIGNER), {"signerName": SIGNER, "labelSelector": {}}
    )
    assert files.bundle.decode() == selected

    code, out, err = run_cli(
        "explain",
        "pod",
        "web-0",
        "-n",
        ns,
        f"--kubeconfig={cluster.plane.kubeconfig}",
        f"--signer-name={SIGNER}",
        "--lease-namespace=kube-system",
        f"--lease-name={signer.lease_name}",
    )
    print(f"\n$ explain pod web-0 -n {ns} --signer-name={SIGNER}\n{out}{err}(exit {code})")
    assert code == 0, out + err
    assert out.splitlines()[0] == f"Pod {ns}/web-0 (signer {SIGNER}): issue"
