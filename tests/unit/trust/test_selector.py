"""KEP-6283 ClusterTrustBundleSelector: validation, selection and unification."""

from __future__ import annotations

from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from tests.unit import pki
from trust.bundle import normalize_bundle, parse_anchors
from trust.selector import (
    MAX_DEPTH,
    MAX_TEXT,
    SelectorError,
    nesting_depth,
    parse_selector_json,
    resolve_selector,
)


def pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(Encoding.PEM).decode()


SIGNER = "kubernetes.io/service-serving"


def ctb(name: str, signer: str, certs: list[str], labels: dict[str, str] | None = None) -> Any:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"signerName": signer, "trustBundle": "".join(pem(pki.ca(c).cert) for c in certs)},
    }


BUNDLES = [
    ctb("kubernetes.io:service-serving:1", SIGNER, ["a", "b"], {"env": "prod", "tier": "x"}),
    ctb("kubernetes.io:service-serving:2", SIGNER, ["b", "c"], {"env": "dev"}),
    ctb("kubernetes.io:service-serving:3", SIGNER, ["c"], {}),
    ctb("example.com:other:1", "example.com/other", ["d"], {"env": "prod"}),
]


def anchors_of(text: str) -> set[str]:
    return {c.subject.rfc4514_string().removeprefix("CN=test ") for c in parse_anchors(text)}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({"name": "kubernetes.io:service-serving:2"}, {"b", "c"}),
        ({"name": "example.com:other:1"}, {"d"}),
        ({"signerName": SIGNER, "labelSelector": {}}, {"a", "b", "c"}),
        ({"signerName": SIGNER, "labelSelector": {"matchLabels": {"env": "prod"}}}, {"a", "b"}),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "env", "operator": "Exists"}]},
            },
            {"a", "b", "c"},
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]},
            },
            {"c"},
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {
                    "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]
                },
            },
            {"b", "c"},
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {
                    "matchLabels": {"tier": "x"},
                    "matchExpressions": [
                        {"key": "env", "operator": "In", "values": ["prod", "dev"]}
                    ],
                },
            },
            {"a", "b"},
        ),
        ({"signerName": "example.com/other", "labelSelector": {}}, {"d"}),
    ],
    ids=[
        "by-name",
        "by-name-other-signer",
        "empty-selector-matches-all-of-signer",
        "match-labels",
        "exists",
        "does-not-exist",
        "not-in-includes-unlabelled",
        "labels-and-expressions",
        "other-signer",
    ],
)
def test_resolve_selector_unifies_matching_bundles(
    selector: dict[str, Any], expected: set[str]
) -> None:
    assert anchors_of(resolve_selector(BUNDLES, selector)) == expected


def test_resolve_selector_output_is_normalised() -> None:
    out = resolve_selector(BUNDLES, {"signerName": SIGNER, "labelSelector": {}})
    assert out == normalize_bundle(out)


@pytest.mark.parametrize(
    "selector",
    [
        None,
        {"signerName": SIGNER},
        {"signerName": SIGNER, "labelSelector": None},
        {"signerName": SIGNER, "labelSelector": {"matchLabels": {"env": "none"}}},
        {"name": "missing"},
        {"signerName": "example.com/nobody", "labelSelector": {}},
    ],
    ids=[
        "nil-selector",
        "nil-label-selector",
        "null-label-selector",
        "no-match",
        "no-name",
        "no-signer",
    ],
)
def test_resolve_selector_matching_nothing(selector: dict[str, Any] | None) -> None:
    assert resolve_selector(BUNDLES, selector, allow_missing=True) == ""
    with pytest.raises(SelectorError, match="matched zero"):
        resolve_selector(BUNDLES, selector)


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        ({"name": "x", "signerName": SIGNER}, "not both"),
        ({}, "must set name or signerName"),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
            },
            "unknown operator",
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
            },
            "needs values",
        ),
        (
            {
                "signerName": SIGNER,
                "labelSelector": {
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
                },
            },
            "takes no values",
        ),
    ],
    ids=["name-and-signer", "empty", "bad-operator", "in-without-values", "exists-with-values"],
)
def test_resolve_selector_rejects_malformed_selectors(
    selector: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(SelectorError, match=fragment):
        resolve_selector(BUNDLES, selector)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ('"kubernetes.io/service-serving"', "is a JSON object, not a string"),
        ('{"name": "x", "signerName": "a.io/b"}', "not both"),
        ('{"name": "x", "labelSelector": {}}', "name is exclusive with labelSelector"),
        ('{"labelSelector": {}}', "labelSelector requires signerName"),
        ('{"signerName": "a.io/b", "labelselector": {}}', "unknown field(s) 'labelselector'"),
        ('{"signerName": "a.io/b", "labelSelector": {"matchLabel": {}}}', "'matchLabel'"),
        ('{"signerName": "a.io/b", "labelSelector": {"matchLabels": {"-x": "y"}}}', "label key"),
        (
            '{"signerName": "a.io/b", "labelSelector": {"matchLabels": {"x": "a b"}}}',
            "label value",
        ),
        ('{"signerName": "a.io/b", "labelSelector": []}', "must be an object"),
        ('{"signerName": 7}', "signerName must be a string"),
        ('{"name": ""}', "name must not be empty"),
        (
            '{"signerName": "a.io/b", "labelSelector": {"matchExpressions": [{"key": "a/b/c",'
            ' "operator": "Exists"}]}}',
            "label key",
        ),
    ],
    ids=[
        "malformed-json",
        "not-an-object",
        "name-and-signer",
        "name-and-label-selector",
        "label-selector-without-signer",
        "unknown-field",
        "unknown-label-selector-field",
        "bad-label-key",
        "bad-label-value",
        "label-selector-not-object",
        "signer-not-string",
        "empty-name",
        "bad-expression-key",
    ],
)
def test_parse_selector_json_names_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as err:
        parse_selector_json(text)
    assert fragment in str(err.value)


def test_parse_selector_json_round_trips_valid_selectors() -> None:
    by_name = parse_selector_json('{"name": "kubernetes.io:service-serving:1"}')
    assert by_name.to_json() == {"name": "kubernetes.io:service-serving:1"}
    nil = parse_selector_json('{"signerName": "a.io/b"}')
    assert nil.label_selector is None
    assert nil.to_json() == {"signerName": "a.io/b"}
    everything = parse_selector_json('{"signerName": "a.io/b", "labelSelector": {}}')
    assert everything.to_json() == {"signerName": "a.io/b", "labelSelector": {}}
    assert resolve_selector(
        BUNDLES,
        parse_selector_json('{"signerName": "kubernetes.io/service-serving", "labelSelector": {}}'),
    ) == resolve_selector(BUNDLES, {"signerName": SIGNER, "labelSelector": {}})


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 4000, id="4000-brackets"),
        pytest.param("{" * 100_000, id="100000-braces"),
        pytest.param('{"a":' * 900 + "1" + "}" * 900, id="deep-but-closed"),
        pytest.param('{"signerName": "a.io/b", "labelSelector": ' + "[" * 50 + "]" * 50 + "}"),
        pytest.param(" " * (MAX_TEXT + 1), id="over-the-length-bound"),
        pytest.param('"\\ud800"', id="lone-surrogate"),
        pytest.param('{"name": "\\udfff"}' + "\x00", id="surrogate-and-nul"),
        pytest.param("1" * 5000, id="a-huge-integer"),
        pytest.param('{"signerName": "a.io/b", "labelSelector": {"matchLabels": {"k": 1e999}}}'),
        pytest.param(cast(Any, b"{}"), id="bytes"),
        pytest.param(cast(Any, None), id="none"),
    ],
)
def test_parse_selector_json_is_total_on_hostile_text(text: str) -> None:
    """Whatever a tenant writes (deep nesting, huge text, bad encodings, numbers no
    integer conversion takes), parsing raises `SelectorError` and nothing else."""
    with pytest.raises(SelectorError):
        parse_selector_json(text)


def test_nesting_depth_counts_brackets_outside_strings_only() -> None:
    assert nesting_depth('{"a": ["[[[[[[[[[[", {"b": "{{{{"}]}') == 3
    assert nesting_depth('["\\"[[[[[[[[[[["]') == 1
    assert nesting_depth("[" * 10_000) == MAX_DEPTH + 1
