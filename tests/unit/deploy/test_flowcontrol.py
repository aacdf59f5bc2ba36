"""The opt-in API Priority and Fairness component (config/flowcontrol): the signer's
ServiceAccount — the one config/rbac makes and the Deployment runs as — matched before
the `service-accounts` FlowSchema (precedence 9000, which puts every ServiceAccount
outside kube-system in workload-low), into a small level of its own queued as
kube-apiserver's workload-high (the level of kube-controller-manager) with a borrowing
cap; its Leases into the bootstrap `leader-election` level, as kube-controller-manager's
are."""

from __future__ import annotations

import math

from tests.unit.deploy.kustomize import CONFIG, find, render

# 10 shares, a quarter lendable, borrowing at most its own size; workload-high's queuing
# (k8s.io/apiserver pkg/apis/flowcontrol/bootstrap).
SIGNER_LEVEL = {
    "type": "Limited",
    "limited": {
        "nominalConcurrencyShares": 10,
        "lendablePercent": 25,
        "borrowingLimitPercent": 100,
        "limitResponse": {
            "type": "Queue",
            "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50},
        },
    },
}
SERVICE_ACCOUNTS_PRECEDENCE = 9000  # the bootstrap `service-accounts` FlowSchema
KUBE_CONTROLLER_MANAGER_PRECEDENCE = 800
# The bootstrap Limited levels' nominal concurrency shares (apiserver v0.37.2 default.go):
# system, node-high, leader-election, workload-high, workload-low, global-default, catch-all.
BOOTSTRAP_SHARES = {
    "system": 30,
    "node-high": 40,
    "leader-election": 10,
    "workload-high": 40,
    "workload-low": 100,
    "global-default": 20,
    "catch-all": 5,
}
DEFAULT_SEATS = 600  # --max-requests-inflight 400 + --max-mutating-requests-inflight 200


def test_the_flow_schema_matches_the_signers_service_account_first() -> None:
    objects = render(CONFIG / "flowcontrol")
    default = render(CONFIG / "default")
    account = find(default, "ServiceAccount")
    deployment = find(default, "Deployment")
    schema = find(objects, "FlowSchema", "service-serving-signer")

    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"]
        == (account["metadata"]["name"])
    )
    [rule] = schema["spec"]["rules"]
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {
                "namespace": account["metadata"]["namespace"],
                "name": account["metadata"]["name"],
            },
        }
    ]
    assert schema["spec"]["matchingPrecedence"] == KUBE_CONTROLLER_MANAGER_PRECEDENCE
    assert schema["spec"]["matchingPrecedence"] < SERVICE_ACCOUNTS_PRECEDENCE
    assert rule["resourceRules"] == [
        {
            "verbs": ["*"],
            "apiGroups": ["*"],
            "resources": ["*"],
            "namespaces": ["*"],
            "clusterScope": True,
        }
    ]


def test_the_level_is_workload_highs_and_the_schema_uses_it() -> None:
    objects = render(CONFIG / "flowcontrol")
    level = find(objects, "PriorityLevelConfiguration")
    schema = find(objects, "FlowSchema", "service-serving-signer")

    assert level["spec"] == SIGNER_LEVEL
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": level["metadata"]["name"]}


def test_the_level_costs_every_other_level_at_most_four_percent_of_its_seats() -> None:
    """The seat table of docs/performance.md: at the default 600 seats the signer's level
    gets 24, and no bootstrap level loses more than 4 % of its nominal share (one seat
    of rounding aside)."""
    level = find(render(CONFIG / "flowcontrol"), "PriorityLevelConfiguration")
    ours = level["spec"]["limited"]["nominalConcurrencyShares"]
    before = sum(BOOTSTRAP_SHARES.values())
    after = before + ours
    assert math.ceil(DEFAULT_SEATS * ours / after) == 24
    assert 1 - before / after <= 0.04
    for shares in BOOTSTRAP_SHARES.values():
        lost = math.ceil(DEFAULT_SEATS * shares / before) - math.ceil(
            DEFAULT_SEATS * shares / after
        )
        assert lost <= math.ceil(0.04 * DEFAULT_SEATS * shares / before)


def test_the_signers_leases_go_to_the_bootstrap_leader_election_level_first() -> None:
    objects = render(CONFIG / "flowcontrol")
    signer = find(objects, "FlowSchema", "service-serving-signer")
    leases = find(objects, "FlowSchema", "service-serving-signer-leader-election")

    assert leases["spec"]["priorityLevelConfiguration"] == {"name": "leader-election"}
    assert leases["spec"]["matchingPrecedence"] < signer["spec"]["matchingPrecedence"]
    assert leases["spec"]["distinguisherMethod"] == {"type": "ByUser"}
    [rule] = leases["spec"]["rules"]
    assert rule["subjects"] == signer["spec"]["rules"][0]["subjects"]
    assert rule["resourceRules"] == [
        {
            "verbs": ["get", "create", "update"],
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "namespaces": ["*"],
        }
    ]
    assert "nonResourceRules" not in rule


def test_it_is_opt_in() -> None:
    kinds = {o["kind"] for o in render(CONFIG / "default")} | {
        o["kind"] for o in render(CONFIG / "managed")
    }
    assert not kinds & {"FlowSchema", "PriorityLevelConfiguration"}


def test_the_level_keeps_at_least_one_seat_of_its_own_on_any_server() -> None:
    """kube-apiserver lends round(nominal x lendablePercent / 100) of a level's seats: at
    every total concurrency from 1 to 10,000 seats the signer's level keeps one."""
    level = find(render(CONFIG / "flowcontrol"), "PriorityLevelConfiguration")
    limited = level["spec"]["limited"]
    shares, lendable = limited["nominalConcurrencyShares"], limited["lendablePercent"]
    total = sum(BOOTSTRAP_SHARES.values()) + shares
    for seats in range(1, 10_001):
        nominal = math.ceil(seats * shares / total)
        # Go's math.Round: halves away from zero (Python's round() goes to even).
        lent = math.floor(nominal * lendable / 100 + 0.5)
        assert nominal - lent >= 1, seats
