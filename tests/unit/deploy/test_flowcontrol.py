"""The opt-in API Priority and Fairness component (config/flowcontrol): the signer's
ServiceAccount — the one config/rbac makes and the Deployment runs as — matched before
the `service-accounts` FlowSchema (precedence 9000, which puts every ServiceAccount
outside kube-system in workload-low), into a level with kube-apiserver's workload-high
settings, the level of kube-controller-manager."""

from __future__ import annotations

from tests.unit.deploy.kustomize import CONFIG, find, render

# kube-apiserver's bootstrap workload-high (k8s.io/apiserver pkg/apis/flowcontrol/bootstrap).
WORKLOAD_HIGH = {
    "type": "Limited",
    "limited": {
        "nominalConcurrencyShares": 40,
        "lendablePercent": 50,
        "limitResponse": {
            "type": "Queue",
            "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50},
        },
    },
}
SERVICE_ACCOUNTS_PRECEDENCE = 9000  # the bootstrap `service-accounts` FlowSchema
KUBE_CONTROLLER_MANAGER_PRECEDENCE = 800


def test_the_flow_schema_matches_the_signers_service_account_first() -> None:
    objects = render(CONFIG / "flowcontrol")
    default = render(CONFIG / "default")
    account = find(default, "ServiceAccount")
    deployment = find(default, "Deployment")
    schema = find(objects, "FlowSchema")

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
    schema = find(objects, "FlowSchema")

    assert level["spec"] == WORKLOAD_HIGH
    assert schema["spec"]["priorityLevelConfiguration"] == {"name": level["metadata"]["name"]}


def test_it_is_opt_in() -> None:
    kinds = {o["kind"] for o in render(CONFIG / "default")} | {
        o["kind"] for o in render(CONFIG / "managed")
    }
    assert not kinds & {"FlowSchema", "PriorityLevelConfiguration"}
