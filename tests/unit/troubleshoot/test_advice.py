"""Advice names the value that would pass and the template to write it in."""

from __future__ import annotations

import pytest

from signer import policy
from troubleshoot import advice

DEPLOYMENT = advice.owner("Deployment", "web")
BARE = advice.owner("Pod", "web-0")


@pytest.mark.parametrize(
    ("entry", "passing"),
    [
        ("Shop/Web", "web"),
        ("web.shop.svc.cluster.local", "web"),
        ("Web", "web"),
        ("my_api", "my-api"),
        ("1api", "api"),
        (" db ", "db"),
        ("---", None),
        ("123", None),
    ],
)
def test_passing_service_name_is_a_lowercase_dns1035_label(entry: str, passing: str | None) -> None:
    assert advice.passing_service_name(entry) == passing


def test_advised_annotations_pass_the_signers_own_parser() -> None:
    fixed = advice.passing_annotations(
        {policy.SERVICE_NAMES: "Shop/Web, Web ,db.x", "example.com/x": "1"}
    )
    assert fixed == {policy.SERVICE_NAMES: "web,db"}
    assert not isinstance(policy.decide_names(fixed), policy.Denial)


def test_add_pod_fqdn_spelled_otherwise_becomes_true_or_is_dropped() -> None:
    assert advice.passing_annotations({policy.ADD_POD_FQDN: "True"}) == {
        policy.ADD_POD_FQDN: "true"
    }
    assert advice.passing_annotations({policy.ADD_POD_FQDN: "no"}) is None


def test_denied_annotation_advice_names_the_value_and_the_owners_template() -> None:
    ctx = advice.Context(
        namespace="shop",
        owner=DEPLOYMENT,
        volume="tls",
        annotations={policy.SERVICE_NAMES: "Shop/Web"},
    )
    fix = advice.for_denial(policy.INVALID_ANNOTATIONS, ctx)
    assert fix == (
        "set Deployment shop/web's Pod template (spec.template.spec.volumes[name=tls]"
        ".projected.sources[].podCertificate.userAnnotations) to {kubernetes.io/service-names: "
        '"web"}; the Deployment replaces its Pods with ones that carry the change'
    )
    assert "'Web'" not in fix


def test_bare_pod_advice_says_to_recreate_it() -> None:
    ctx = advice.Context(namespace="shop", owner=BARE, annotations={policy.SERVICE_NAMES: "A"})
    fix = advice.for_denial(policy.INVALID_ANNOTATIONS, ctx)
    assert "Pod shop/web-0's spec.volumes" in fix and "delete the Pod and create it" in fix


def test_selector_mismatch_advice_gives_labels_and_selector_values() -> None:
    ctx = advice.Context(
        namespace="shop",
        owner=DEPLOYMENT,
        pod_labels={"app": "api", "pod-template-hash": "5d9f"},
    )
    fix = advice.for_blocker("ServiceSelectorMismatch", "web", ctx, {"app": "web", "tier": "fe"})
    assert fix == (
        "add labels app=web,tier=fe to Deployment shop/web's Pod template "
        "(spec.template.metadata.labels), or set Service shop/web's selector to app=api"
    )


def test_missing_service_advice_proposes_a_selector_for_the_pod() -> None:
    ctx = advice.Context(namespace="shop", owner=DEPLOYMENT, pod_labels={"app": "web"})
    fix = advice.for_blocker("ServiceNotFound", "web", ctx)
    assert fix.startswith("create Service shop/web with selector app=web, or name")


def test_hostname_advice_for_a_statefulset_names_its_service_name() -> None:
    ctx = advice.Context(namespace="db", owner=advice.owner("StatefulSet", "pg"))
    assert "StatefulSet db/pg's spec.serviceName" in advice.for_denial("PodHostnameRequired", ctx)


def test_cronjob_template_path() -> None:
    assert advice.owner("CronJob", "nightly").where("ns", "spec") == (
        "CronJob ns/nightly's Pod template (spec.jobTemplate.spec.template.spec)"
    )
