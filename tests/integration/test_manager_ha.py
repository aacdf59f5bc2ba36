"""High availability with two real `run` processes on one API server:
exactly one leads and signs; SIGTERM to the leader hands over within 3 s (the Lease is
released); SIGKILL to the leader hands over within the lease duration; no request is
issued twice or lost."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from controlplane import ControlPlane
from controlplane.kubelet import Kubelet
from kube.client import Client
from tests.integration.manager_process import (
    SignerProcess,
    eventually,
    issue_one,
    wait_issued,
)
from trust.ca import write_ca

LEASE = (
    "--leader-elect-lease-duration=6s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=1s",
)
LEASE_DURATION = 6.0


def test_one_leader_signs_and_hands_over_on_sigterm_and_sigkill(
    control_plane: ControlPlane,
    client: Client,
    kubelet: Kubelet,
    namespace: str,
    tmp_path: Path,
) -> None:
    signer_name = f"t{uuid.uuid4().hex[:10]}.kubernetes.io/service-serving"
    files = write_ca(tmp_path / "ca")
    lease = f"--leader-elect-resource-name=ha-{uuid.uuid4().hex[:8]}"
    args = (f"--leader-elect-resource-namespace={namespace}", lease, *LEASE)
    kubelet.create_service("web", namespace, selector={"app": "web"})

    def start(name: str) -> SignerProcess:
        return SignerProcess(
            control_plane.kubeconfig,
            files.key.parent,
            tmp_path / f"{name}.log",
            *args,
            signer_name=signer_name,
        )

    a, b = start("a"), start("b")
    processes = [a, b]
    issued: list[str] = []
    try:
        assert eventually(lambda: a.ready() and b.ready(), 30), "both replicas become ready"
        assert eventually(lambda: a.leading() or b.leading(), 15)
        time.sleep(1.5)
        assert [a.leading(), b.leading()].count(True) == 1, "exactly one leader"
        leader, standby = (a, b) if a.leading() else (b, a)

        for i in range(3):
            issued.append(issue_one(kubelet, namespace, f"p{i}", signer_name=signer_name))
        for name in issued:
            assert wait_issued(client, namespace, name, 15), name
        # A replica counts an issue after its status write returns.
        assert eventually(lambda: leader.issued() == 3, 5), "the leader counts all three"
        assert standby.issued() == 0, "only the leader signs"

        # SIGTERM: workers stop, the Lease is released, the standby takes over at once.
        counts = {"before": leader.issued()}
        stopped_at = time.monotonic()
        leader.terminate()
        assert leader.wait(15) == 0
        assert eventually(standby.leading, 3.0), "standby leads within 3 s of SIGTERM"
        issued.append(issue_one(kubelet, namespace, "p-after-term", signer_name=signer_name))
        assert wait_issued(
            client, namespace, issued[-1], 3.0 - (time.monotonic() - stopped_at) + 1.0
        )
        handover = time.monotonic() - stopped_at
        assert handover < 4.0, f"handover + first signature took {handover:.1f}s"

        # A fresh standby; then SIGKILL the leader: no release, the lease must expire.
        c = start("c")
        processes.append(c)
        assert eventually(c.ready, 30)
        leader, standby = standby, c
        counts["second_leader"] = leader.issued()
        killed_at = time.monotonic()
        leader.kill()
        leader.wait(10)
        assert eventually(standby.leading, LEASE_DURATION + 4.0)
        took = time.monotonic() - killed_at
        assert took <= LEASE_DURATION + 2.2 + 0.5, f"takeover after SIGKILL took {took:.1f}s"
        issued.append(issue_one(kubelet, namespace, "p-after-kill", signer_name=signer_name))
        assert wait_issued(client, namespace, issued[-1], 10)

        # Every request issued exactly once, none lost.
        def total() -> float:
            return counts["before"] + counts["second_leader"] + standby.issued()

        assert eventually(lambda: total() == len(issued) == 5, 5), total()
    finally:
        for process in processes:
            process.stop()
