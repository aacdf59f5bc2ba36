"""`status` knows whether a signer process runs, leader election on or off, from the
presence Lease every signer process renews — against the real API server and real
signer processes: no signer is exit 5 and says so; a signer with `--leader-elect=false`
is running; a killed one is absent once its presence has expired (driven through the
Lease's own renewTime, not by waiting 40 s)."""

from __future__ import annotations

import json
from pathlib import Path

from controlplane import ControlPlane
from controlplane.process import SignerProcess, eventually
from kube.client import Client
from kube.presence import read
from tests.integration.explain_harness import age_presence, run_cli
from tests.integration.manager_process import signer_with_a_new_ca
from tests.integration.signer_harness import unique_signer_name

LEASE = "service-serving-signer"
PRESENCE = f"{LEASE}-presence"


def status(
    control_plane: ControlPlane, namespace: str, signer: str, *args: str
) -> tuple[int, str, str]:
    return run_cli(
        "status",
        *args,
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--signer-name={signer}",
        f"--signer-namespace={namespace}",
    )


def test_with_no_signer_status_says_none_runs_and_exits_5(
    control_plane: ControlPlane, namespace: str
) -> None:
    code, out, _ = status(control_plane, namespace, unique_signer_name(), "--wait=1s")
    print(f"\n$ status   # nothing installed\n{out}(exit {code})")
    assert code == 5, out
    assert (
        f"  signer process: no signer runs: neither Lease {namespace}/{LEASE} nor presence "
        f"Lease {namespace}/{PRESENCE} exists (--signer-namespace/--lease-name if it was "
        "installed elsewhere)"
    ) in out.splitlines()
    assert "  bundle: no ClusterTrustBundle published for the signer" in out


def test_a_signer_without_leader_election_is_running_and_a_killed_one_is_not(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    name = unique_signer_name()
    signer = signer_with_a_new_ca(
        control_plane,
        tmp_path,
        "--leader-elect=false",
        f"--leader-elect-resource-namespace={namespace}",
        signer_name=name,
    )
    try:
        signer.wait_ready(60)
        # --wait waits for the facts: the presence renewed and the bundle published.
        code, out, _ = status(control_plane, namespace, name, "--wait=60s")
        print(f"\n$ status   # --leader-elect=false\n{out}(exit {code})")
        assert code == 0, out
        lines = out.splitlines()
        assert lines[1] == "  leader: none needed: the signer runs with leader election off"
        assert lines[2].startswith(f"  signer process: running (presence Lease {namespace}/")
        code, out, _ = status(control_plane, namespace, name, "-o", "json")
        report = json.loads(out)["signer"]
        assert report["acting"] is True and report["presence"]["alive"] is True
        assert report["presence"]["annotations"]["service-serving-signer/leader-elect"] == ("false")
    finally:
        signer.kill()
        signer.wait()

    # Killed: nothing renews the presence; until it expires the signer may still run.
    code, out, _ = status(control_plane, namespace, name)
    assert code == 0, "never reported absent before its presence expires"
    age_presence(client, namespace, PRESENCE, seconds=41)
    code, out, _ = status(control_plane, namespace, name)
    print(f"\n$ status   # killed, presence expired\n{out}(exit {code})")
    assert code == 5, out
    gone = "  signer process: no signer runs: no signer process has renewed presence Lease "
    assert any(
        line.startswith(gone + f"{namespace}/{PRESENCE} since ") for line in out.splitlines()
    )


def test_every_replica_renews_the_presence_with_leader_election_on(
    control_plane: ControlPlane, client: Client, namespace: str, tmp_path: Path
) -> None:
    """The standby renews it too: with the leader killed, the presence stays fresh."""
    name = unique_signer_name()
    args = (f"--leader-elect-resource-namespace={namespace}",)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = signer_with_a_new_ca(control_plane, tmp_path / "a", *args, signer_name=name)
    second = SignerProcess(
        control_plane.kubeconfig,
        tmp_path / "a" / "ca",
        tmp_path / "b" / "signer.log",
        *args,
        signer_name=name,
    )
    try:
        assert eventually(lambda: first.leading() or second.leading(), 60)
        leader, standby = (first, second) if first.leading() else (second, first)
        assert eventually(standby.ready, 60)
        leader.kill()
        leader.wait()
        age_presence(client, namespace, PRESENCE, seconds=41)
        # The standby renews it within its period, leading or not.
        assert eventually(lambda: read(client, namespace, PRESENCE).alive, 30)
        assert standby.alive()
        # --wait: until the standby has taken the leader Lease.
        code, out, _ = status(control_plane, namespace, name, "--wait=60s")
        assert code == 0, out
        assert "  signer process: running (" in out, out
    finally:
        for process in (first, second):
            process.kill()
            process.wait()
