"""The signer's Lease says whether anything will act."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from troubleshoot.leasehealth import Leader, lease_state

NOW = datetime(2026, 12, 2, 6, 0, 0, tzinfo=UTC)


def lease(holder: str, renewed_ago: float, duration: int = 15) -> dict[str, Any]:
    renew = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": duration}
    }


@pytest.mark.parametrize(
    ("obj", "leader", "acting"),
    [
        (lease("signer-a_1", 3), Leader.RENEWING, True),
        (lease("signer-a_1", 16), Leader.EXPIRED, False),
        (lease("", 1, duration=1), Leader.RELEASED, False),
        (None, Leader.MISSING, False),
        ({"spec": {"holderIdentity": "x"}}, Leader.EXPIRED, False),
    ],
)
def test_lease_state(obj: dict[str, object] | None, leader: Leader, acting: bool) -> None:
    state = lease_state("ns", "name", obj, NOW)
    assert (state.leader, state.acting) == (leader, acting)


def test_refusals_name_the_scope_and_the_can_i_check() -> None:
    from troubleshoot.access import forbidden

    pcrs = forbidden("list", "podcertificaterequests", "certificates.k8s.io", "shop")
    assert str(pcrs) == (
        "forbidden: cannot list podcertificaterequests.certificates.k8s.io in namespace shop"
    )
    assert (
        pcrs.can_i() == "kubectl auth can-i list podcertificaterequests.certificates.k8s.io -n shop"
    )
    everywhere = forbidden("list", "podcertificaterequests", "certificates.k8s.io", "")
    assert str(everywhere).endswith("in all namespaces") and everywhere.can_i().endswith(" -A")
    bundles = forbidden("list", "clustertrustbundles", "certificates.k8s.io", "", namespaced=False)
    assert str(bundles).endswith("(cluster-scoped)")
    assert bundles.can_i() == "kubectl auth can-i list clustertrustbundles.certificates.k8s.io"
    lease = forbidden("get", "leases", "coordination.k8s.io", "sss", "service-serving-signer")
    assert str(lease) == (
        "forbidden: cannot get leases.coordination.k8s.io 'service-serving-signer' in namespace sss"
    )
    assert lease.can_i() == (
        "kubectl auth can-i get leases.coordination.k8s.io/service-serving-signer -n sss"
    )


def test_a_refusal_from_any_read_names_its_permission() -> None:
    from kube.client import ApiError
    from troubleshoot.access import refusal

    err = ApiError(
        403,
        "Forbidden",
        {
            "message": 'services "web" is forbidden: User "alice" cannot get resource '
            '"services" in API group "" in the namespace "shop"',
            "details": {"name": "web", "kind": "services"},
        },
    )
    denied = refusal(err)
    assert denied is not None
    assert str(denied.missing) == "forbidden: cannot get services 'web' in namespace shop"
    assert refusal(ApiError(404, "NotFound", {"message": "x"})) is None


def test_lease_state_keeps_when_the_holder_took_it_and_how_often_it_changed() -> None:
    obj = lease("signer-a_1", 3)
    obj["spec"] = {
        **obj["spec"],
        "acquireTime": "2026-12-02T05:00:00.000000Z",
        "leaseTransitions": 4,
    }
    state = lease_state("ns", "name", obj, NOW)
    assert state.acquire_time == datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
    assert state.transitions == 4


def test_an_anchor_in_several_bundles_is_listed_once() -> None:
    """The stable bundle holds the hash-named one's anchors, and during a
    rotation two hash-named bundles share the old root: what a Pod projecting by
    signerName sees is each anchor once (kubelet de-duplicates), and so is the report."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from tests.unit import pki
    from troubleshoot.leasehealth import bundle_state

    old, new = (pki.ca(n).cert.public_bytes(Encoding.PEM).decode() for n in ("lh-old", "lh-new"))
    items = [
        {"metadata": {"name": "s:abc"}, "spec": {"trustBundle": old}},
        {"metadata": {"name": "s:def"}, "spec": {"trustBundle": old + new}},
        {"metadata": {"name": "s:trust-anchors"}, "spec": {"trustBundle": old + new}},
    ]
    state = bundle_state(items)
    assert state.names == ("s:abc", "s:def", "s:trust-anchors")
    assert sorted(a.subject for a in state.anchors) == ["CN=test lh-new", "CN=test lh-old"]


def _report(replica: str, renewed: str, decision: dict[str, Any] | None) -> dict[str, Any]:
    import json

    from managedca.report import DECISION

    annotations = {DECISION: json.dumps(decision)} if decision else {}
    return {
        "metadata": {"name": f"r-{replica}", "annotations": annotations},
        "spec": {
            "holderIdentity": replica,
            "renewTime": renewed,
            "leaseDurationSeconds": 30,
        },
    }


WAITING = {
    "phase": "Staged",
    "step": "Wait",
    "reason": "replica-not-ready",
    "since": "2026-12-04T10:00:00Z",
}


def test_status_shows_what_the_leaders_managed_ca_decision_waits_for() -> None:
    from troubleshoot.leasehealth import managed_ca_state
    from troubleshoot.render import managed_ca_line

    leases = [
        _report("a", "2026-12-04T10:05:00.000000Z", WAITING),
        _report("b", "2026-12-04T10:06:00.000000Z", {"phase": "Stable", "step": "Stage"}),
    ]
    state = managed_ca_state(leases, holder="a")
    assert state is not None and state.by_leader and state.decided_by == "a"
    now = datetime(2026, 12, 4, 10, 4, tzinfo=UTC)
    assert managed_ca_line(state, now) == (
        "managed CA: phase Staged, waiting for replica-not-ready "
        "(since 2026-12-04T10:00:00Z, 4m ago) (details: ca status)"
    )


def test_with_no_leader_the_newest_decision_is_shown_and_said_not_to_be_the_leaders() -> None:
    from troubleshoot.leasehealth import managed_ca_state
    from troubleshoot.render import managed_ca_line

    leases = [
        _report("a", "2026-12-04T10:05:00.000000Z", WAITING),
        _report("b", "2026-12-04T10:06:00.000000Z", {"phase": "Stable", "step": "Stage"}),
    ]
    state = managed_ca_state(leases, holder="")
    assert state is not None and state.decided_by == "b" and not state.by_leader
    line = managed_ca_line(state, datetime(2026, 12, 4, 10, 7, tzinfo=UTC))
    assert line == (
        "managed CA: phase Stable, next step Stage; decided by b, not the current leader "
        "(details: ca status)"
    )


def test_no_managed_ca_reports_means_no_managed_ca_line() -> None:
    from troubleshoot.leasehealth import managed_ca_state

    assert managed_ca_state([], holder="a") is None
    assert managed_ca_state([_report("a", "2026-12-04T10:05:00.000000Z", None)], "a") is None


def test_status_names_the_unlinked_bundle_and_says_which_anchors_it_lacks() -> None:
    """With `--publish-unlinked-bundle` the signer-less bundle is what Pods on a ≤ 1.37
    kubelet should project by name: `status` names it beside the signer's bundles, and an
    anchor the signer's bundles hold but it does not yet is said in `status` and in
    `explain` (a managed-CA swap waits for it)."""
    from cryptography.hazmat.primitives.serialization import Encoding

    from tests.unit import pki
    from troubleshoot.leasehealth import Health, bundle_state
    from troubleshoot.render import health_json, health_lines

    old, new = (pki.ca(n).cert.public_bytes(Encoding.PEM).decode() for n in ("ul-old", "ul-new"))
    items = [{"metadata": {"name": "s:trust-anchors"}, "spec": {"trustBundle": old + new}}]
    unlinked = {"metadata": {"name": "s.trust-anchors"}, "spec": {"trustBundle": old}}
    state = bundle_state(items, unlinked=unlinked)
    assert state.unlinked == "s.trust-anchors"
    assert [a.subject for a in state.unlinked_lacks] == ["CN=test ul-new"]
    health = Health("s", lease_state("ns", "name", None, NOW), state)
    status = health_lines(health, NOW, full=True)
    [named] = [line for line in status if "s.trust-anchors" in line and "lacks" not in line]
    assert "no signerName" in named and "--publish-unlinked-bundle" in named
    [lacks] = [line for line in status if "lacks" in line]
    assert "CN=test ul-new" in lacks
    assert lacks in health_lines(health, NOW, full=False), "explain says it too"
    assert health_json(health)["bundle"]["unlinked"] == {
        "name": "s.trust-anchors",
        "lacks": ["CN=test ul-new"],
    }
    whole = bundle_state(items, unlinked={**unlinked, "spec": {"trustBundle": new + old}})
    assert whole.unlinked_lacks == ()
    quiet = health_lines(Health("s", health.lease, whole), NOW, full=False)
    assert not any("s.trust-anchors" in line for line in quiet)
    assert bundle_state(items).unlinked is None
