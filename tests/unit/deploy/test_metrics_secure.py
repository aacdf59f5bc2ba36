"""config/metrics-secure: the RBAC the signer needs to ask who scrapes and whether they
may, and a reader role for Prometheus — no more."""

from __future__ import annotations

from tests.unit.deploy.kustomize import CONFIG, find, render, rules_of


def test_the_signer_may_create_token_and_access_reviews_and_nothing_else() -> None:
    objects = render(CONFIG / "metrics-secure")
    role = find(objects, "ClusterRole", "service-serving-signer-metrics-auth")
    assert rules_of(role) == [
        ("authentication.k8s.io", "tokenreviews", ("create",), ()),
        ("authorization.k8s.io", "subjectaccessreviews", ("create",), ()),
    ]
    binding = find(objects, "ClusterRoleBinding", "service-serving-signer-metrics-auth")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "service-serving-signer",
            "namespace": "service-serving-signer",
        }
    ]


def test_the_reader_role_grants_get_on_metrics_only() -> None:
    reader = find(
        render(CONFIG / "metrics-secure"), "ClusterRole", "service-serving-signer-metrics-reader"
    )
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
