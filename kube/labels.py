"""kubectl's `-l` label-selector syntax → a `metav1.LabelSelector` dict (apimachinery's
`labels.Parse`, generic: any command line that takes `-l` reads it here; matching a
ClusterTrustBundle against a selector is `trust.selector`'s).

Decides how the text is read: `a=b`, `a==b` and `a!=b`, `a in (x,y)`,
`a notin (x,y)`, `a` (exists) and `!a` (does not exist), joined by commas. Equality
becomes `matchLabels`; everything else becomes `matchExpressions` (`!=` is `NotIn`
with one value, as apimachinery's selector does). The empty string is the empty
selector, which matches everything.
"""

from __future__ import annotations

import re
from typing import Any

_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


class SelectorSyntaxError(ValueError):
    """The selector text does not parse; the message names the bad requirement."""


def _split_requirements(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorSyntaxError(f"unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise SelectorSyntaxError(f"unbalanced '(' in {text!r}")
    parts.append(current)
    return parts


def parse_label_selector(text: str) -> dict[str, Any]:
    """Parse kubectl `-l` text into `{"matchLabels": ..., "matchExpressions": ...}`."""
    match_labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    if not text.strip():
        return {}
    for requirement in _split_requirements(text):
        if m := _SET.match(requirement):
            values = sorted({v.strip() for v in m.group(3).split(",") if v.strip()})
            if not values or not all(re.fullmatch(_VALUE, v) for v in values):
                raise SelectorSyntaxError(f"invalid value set in {requirement.strip()!r}")
            operator = "In" if m.group(2) == "in" else "NotIn"
            expressions.append({"key": m.group(1), "operator": operator, "values": values})
        elif m := _EQ.match(requirement):
            key, op, value = m.group(1), m.group(2), m.group(3)
            if op == "!=":
                expressions.append({"key": key, "operator": "NotIn", "values": [value]})
            elif key in match_labels and match_labels[key] != value:
                expressions.append({"key": key, "operator": "In", "values": [value]})
            else:
                match_labels[key] = value
        elif m := _EXISTS.match(requirement):
            operator = "DoesNotExist" if m.group(1) else "Exists"
            expressions.append({"key": m.group(2), "operator": operator})
        else:
            raise SelectorSyntaxError(f"invalid requirement {requirement.strip()!r}")
    selector: dict[str, Any] = {}
    if match_labels:
        selector["matchLabels"] = match_labels
    if expressions:
        selector["matchExpressions"] = expressions
    return selector
