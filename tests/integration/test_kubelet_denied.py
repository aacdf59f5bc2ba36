"""Through the real kubelet: a Pod whose projection carries a bad
annotation is Denied — final, so the Pod never runs — and the signer's own Warning Event
on the Pod says what to fix (reason = the condition's reason). Kubelet's Event for a
Denied request garbles its message (and a hollow kubelet discards its Events), so ours is
the one the user sees."""

from __future__ import annotations

from controlplane.cluster import Cluster
from kube.client import Client
from tests.integration.manager_process import SignerProcess, eventually
from tests.integration.nodes import (
    condition_of_type,
    create_service,
    pcrs_of,
    serving_pod,
    signer_events,
    signer_fixture,
    stays_not_running,
    unique_signer_name,
)

SIGNER = unique_signer_name()


signer = signer_fixture(SIGNER)


def denied(pcr: dict[str, object]) -> dict[str, str] | None:
    return condition_of_type(pcr, "Denied")


def test_denied_pod_never_runs_and_carries_the_signers_warning_event(
    cluster: Cluster, cluster_client: Client, signer: SignerProcess, node_namespace: str
) -> None:
    ns = node_namespace
    create_service(cluster_client, ns, "web", {"app": "web"})
    serving_pod(
        cluster, cluster_client, ns, "bad-0", app="web", signer_name=SIGNER, services="web,Web_Bad"
    )

    def the_denied_request() -> dict[str, object] | None:
        for pcr in pcrs_of(cluster_client, ns, "bad-0"):
            if denied(pcr):
                return pcr
        return None

    assert eventually(lambda: the_denied_request() is not None, 120)
    pcr = the_denied_request()
    assert pcr is not None
    condition = denied(pcr)
    assert condition is not None
    assert condition["reason"] == "InvalidUnverifiedUserAnnotations"
    assert "Web_Bad" in condition["message"]

    def warning() -> list[dict[str, object]]:
        return [
            e
            for e in signer_events(cluster_client, ns, "bad-0")
            if e.get("reason") == condition["reason"]
        ]

    assert eventually(lambda: bool(warning()), 60), signer_events(cluster_client, ns, "bad-0")
    [event] = warning()
    assert event["type"] == "Warning"
    assert "Web_Bad" in str(event["note"])
    # Final: the kubelet never gets a certificate, so the volume never mounts.
    assert stays_not_running(cluster_client, ns, "bad-0", 20)
    assert len(pcrs_of(cluster_client, ns, "bad-0")) == 1
