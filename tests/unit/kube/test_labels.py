"""kubectl `-l` syntax → LabelSelector dicts (what `bundle resolve --selector` reads)."""

from __future__ import annotations

from typing import Any

import pytest

from kube.labels import SelectorSyntaxError, parse_label_selector


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("a=b", {"matchLabels": {"a": "b"}}),
        ("a==b,c=d", {"matchLabels": {"a": "b", "c": "d"}}),
        ("a!=b", {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}),
        (
            "env in (prod, dev)",
            {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "prod"]}]},
        ),
        (
            "env notin (x),tier",
            {
                "matchExpressions": [
                    {"key": "env", "operator": "NotIn", "values": ["x"]},
                    {"key": "tier", "operator": "Exists"},
                ]
            },
        ),
        ("!legacy", {"matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}]}),
        ("example.com/rotation=next", {"matchLabels": {"example.com/rotation": "next"}}),
        ("a=", {"matchLabels": {"a": ""}}),
    ],
)
def test_parses_kubectl_selector_syntax(text: str, expected: dict[str, Any]) -> None:
    assert parse_label_selector(text) == expected


@pytest.mark.parametrize("text", ["a in (b", "a)", "=b", "a=b=c", "a in ()", "a b", "a=b c"])
def test_rejects_malformed_selectors(text: str) -> None:
    with pytest.raises(SelectorSyntaxError):
        parse_label_selector(text)
