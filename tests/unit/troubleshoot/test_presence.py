"""Whether a signer acts, from the leader Lease and the presence report every signer
process renews, and what `status` exits with: a running signer is never reported
absent, and with none running `status` says so and exits 5."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kube.presence import judge
from kube.times import micro_time
from signer import presence as signer_presence
from troubleshoot.access import forbidden
from troubleshoot.explain import not_acting_text
from troubleshoot.leasehealth import (
    Anchor,
    BundleState,
    Health,
    PresenceState,
    lease_state,
)
from troubleshoot.render import health_json, health_lines
from troubleshoot.status import SignerStatus

NOW = datetime(2026, 12, 6, 2, 0, 0, tzinfo=UTC)
SIGNER = "kubernetes.io/service-serving"
NS = "service-serving-signer"
LEASE = "service-serving-signer"
PUBLISHED = BundleState(("a:b",), (Anchor("CN=x", NOW + timedelta(days=9)),))


def leader(holder: str | None, renewed_ago: float = 2) -> dict[str, Any] | None:
    if holder is None:
        return None
    renew = micro_time(NOW - timedelta(seconds=renewed_ago))
    return {"spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": 15}}


def presence(
    renewed_ago: float | None, *, elect: bool = True, serves: str = SIGNER
) -> PresenceState:
    name = signer_presence.presence_name(LEASE)
    lease = None
    if renewed_ago is not None:
        lease = {
            "metadata": {
                "annotations": {
                    signer_presence.SIGNER_NAME: serves,
                    signer_presence.LEADER_ELECT: "true" if elect else "false",
                }
            },
            "spec": {
                "holderIdentity": "pod-b",
                "leaseDurationSeconds": 40,
                "renewTime": micro_time(NOW - timedelta(seconds=renewed_ago)),
            },
        }
    return PresenceState(NS, name, judge(NS, name, lease, NOW), None, SIGNER)


def health(
    lease: dict[str, Any] | None,
    found: PresenceState | None,
    bundle: BundleState = PUBLISHED,
) -> Health:
    return Health(SIGNER, lease_state(NS, LEASE, lease, NOW), bundle, presence=found)


UNREADABLE = PresenceState(
    NS,
    "service-serving-signer-presence",
    None,
    forbidden("get", "leases", "coordination.k8s.io", NS, "service-serving-signer-presence"),
    SIGNER,
)


@pytest.mark.parametrize(
    ("lease", "found", "acting"),
    [
        # leader election on: the leader Lease decides, the presence says who runs
        (leader("pod-a"), presence(3), True),
        (leader("pod-a"), presence(None), True),  # a signer older than presence
        (leader("pod-a"), UNREADABLE, True),
        (leader("pod-a", renewed_ago=60), presence(3), False),  # runs, none leads
        # leader election off: there is no leader Lease; the presence decides
        (None, presence(3, elect=False), True),
        (None, presence(39, elect=False), True),
        (None, presence(41, elect=False), False),  # killed: expired
        # nothing at all
        (None, presence(None), False),
        (leader("pod-a", renewed_ago=60), presence(120), False),
        # another signer name renews the presence there
        (None, presence(3, elect=False, serves="example.com/other"), False),
        # what we cannot read decides nothing
        (None, UNREADABLE, None),
        (leader("pod-a", renewed_ago=60), UNREADABLE, None),
    ],
)
def test_whether_a_signer_acts(
    lease: dict[str, Any] | None, found: PresenceState, acting: bool | None
) -> None:
    assert health(lease, found).acting is acting


@pytest.mark.parametrize(
    ("lease", "found", "bundle", "code"),
    [
        (leader("pod-a"), presence(3), PUBLISHED, 0),
        (None, presence(3, elect=False), PUBLISHED, 0),
        (None, presence(None), BundleState(), 5),  # nothing installed at all
        (None, presence(None), PUBLISHED, 5),
        (None, presence(41, elect=False), PUBLISHED, 5),
        (leader("pod-a"), presence(3), BundleState(), 6),
        (None, UNREADABLE, PUBLISHED, 0),  # cannot tell: not 5
        (None, UNREADABLE, BundleState(problem=UNREADABLE.problem), 0),
    ],
)
def test_status_exit_code(
    lease: dict[str, Any] | None, found: PresenceState, bundle: BundleState, code: int
) -> None:
    assert SignerStatus(health(lease, found, bundle), None).exit_status == code


def test_with_nothing_installed_status_says_no_signer_runs() -> None:
    h = health(None, presence(None), BundleState())
    text = "\n".join(health_lines(h, NOW, full=True))
    assert "signer process: no signer runs: neither Lease service-serving-signer/" in text
    assert "--signer-namespace/--lease-name if it was installed elsewhere" in text
    body = health_json(h)
    assert body["acting"] is False and body["presence"]["state"] == "missing"


def test_a_killed_signer_is_named_with_when_it_last_renewed() -> None:
    text = not_acting_text(health(None, presence(300, elect=False)))
    assert text.startswith("no signer runs: no signer process has renewed presence Lease ")
    assert "(5m0s ago)" in text or "(5m ago)" in text, text
    assert text.endswith("the last was pod-b")


def test_leader_election_off_is_not_reported_as_a_missing_leader() -> None:
    lines = health_lines(health(None, presence(3, elect=False)), NOW, full=True)
    assert lines[0] == "leader: none needed: the signer runs with leader election off"
    assert lines[1].startswith("signer process: running (presence Lease ")


def test_processes_that_run_without_a_leader_are_told_apart_from_none() -> None:
    text = not_acting_text(health(leader("pod-a", renewed_ago=60), presence(3)))
    assert text.startswith("a signer process renewed presence Lease ")
    assert "yet none leads: the holder of Lease" in text


def waiting(annotation: str) -> PresenceState:
    found = presence(3)
    assert found.presence is not None
    annotations = {**found.presence.annotations, signer_presence.API_WAITS: annotation}
    return dataclasses.replace(
        found, presence=dataclasses.replace(found.presence, annotations=annotations)
    )


def test_status_and_explain_say_when_writes_wait_on_the_signers_own_budget() -> None:
    found = waiting("writes=250 budget=2.100 server=0.150 window=10")
    for full in (True, False):
        lines = health_lines(health(leader("pod-a"), found), NOW, full=full)
        [line] = [line for line in lines if line.startswith("api writes:")]
        assert line == (
            "api writes: 250 in the last 10 s waited mostly in the signer's own budget "
            "(--kube-api-qps/--kube-api-burst; docs/performance.md): "
            "2.10 s each in the budget, 0.15 s on the server"
        )


def test_status_says_when_writes_wait_on_the_api_server_and_explain_omits_an_idle_signer() -> None:
    found = waiting("writes=12 budget=0.000 server=1.300 window=10")
    [line] = [x for x in health_lines(health(leader("pod-a"), found), NOW, full=True) if "api" in x]
    assert "waited mostly on the API server (its load, or the signer's priority level" in line
    idle = waiting("writes=0 budget=0.000 server=0.000 window=10")
    status = health_lines(health(leader("pod-a"), idle), NOW, full=True)
    assert "api writes: none in the last 10 s" in status
    explain = health_lines(health(leader("pod-a"), idle), NOW, full=False)
    assert not any(line.startswith("api writes") for line in explain)


def test_a_released_leader_lease_with_a_fresh_presence_is_not_called_running() -> None:
    """After an uninstall the stopped leader's presence lives on for its duration: status
    says the Lease was released and the replicas may be stopping, not "running"."""
    released = leader("", renewed_ago=1)
    lines = health_lines(health(released, presence(8)), NOW, full=True)
    line = next(x for x in lines if x.startswith("signer process:"))
    assert not line.startswith("signer process: running"), line
    assert "the leader Lease was released: the replicas are stopping" in line
