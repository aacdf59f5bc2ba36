"""What config/rbac grants application teams for `explain` and `status`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.deploy.kustomize import CONFIG, NAMESPACE, find, render, rules_of

AGGREGATE = [f"rbac.authorization.k8s.io/aggregate-to-{r}" for r in ("view", "edit", "admin")]


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return render(CONFIG / "default")


def test_view_role_aggregates_read_only_request_access_into_view_edit_admin(
    default: list[dict[str, Any]],
) -> None:
    role = find(default, "ClusterRole", "service-serving-signer-view")
    assert {k: role["metadata"]["labels"].get(k) for k in AGGREGATE} == dict.fromkeys(
        AGGREGATE, "true"
    )
    assert rules_of(role) == [
        ("certificates.k8s.io", "podcertificaterequests", ("get", "list", "watch"), ())
    ]
    bindings = [o for o in default if o["kind"].endswith("Binding")]
    assert not [b for b in bindings if b["roleRef"]["name"] == "service-serving-signer-view"]


def test_authenticated_users_may_get_only_the_leader_and_presence_leases(
    default: list[dict[str, Any]],
) -> None:
    role = find(default, "Role", "service-serving-signer-status")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules_of(role) == [
        (
            "coordination.k8s.io",
            "leases",
            ("get",),
            ("service-serving-signer", "service-serving-signer-presence"),
        )
    ]
    binding = find(default, "RoleBinding", "service-serving-signer-status")
    assert binding["roleRef"]["name"] == "service-serving-signer-status"
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
    ]


def test_the_signer_may_renew_only_its_presence_lease(default: list[dict[str, Any]]) -> None:
    role = find(default, "Role", "service-serving-signer-presence")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert rules_of(role) == [
        ("coordination.k8s.io", "leases", ("create",), ()),
        ("coordination.k8s.io", "leases", ("get", "update"), ("service-serving-signer-presence",)),
    ]
    binding = find(default, "RoleBinding", "service-serving-signer-presence")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "service-serving-signer", "namespace": NAMESPACE}
    ]
