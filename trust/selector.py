"""KEP-6283's `ClusterTrustBundleSelector`: what a valid one is, which ClusterTrustBundles
it picks, and the one trust bundle they unify to.

This is the only selector resolution in the project: `bundle resolve` and the injector
both call `resolve_selector`, and it unifies with `trust.bundle.normalize_bundle`, the
publisher's own normalisation (kubelet's `normalizeTrustAnchors` without the shuffle).

Decisions:

- The struct has exactly three fields: `name`, or `signerName` narrowed by
  `labelSelector`. `name` is exclusive with the other two; a `labelSelector` without
  `signerName` is an error (kubelet's projection has the same rule); any other field is
  an error (a typo such as `labelselector` must not silently select nothing).
- As in kubelet, a missing (nil) `labelSelector` matches nothing and an empty one (`{}`)
  matches every bundle of the signer.
- A `metav1.LabelSelector` is validated as apimachinery's `LabelSelectorAsSelector` does:
  label keys and values in Kubernetes label syntax, operators `In`/`NotIn` with at least
  one value, `Exists`/`DoesNotExist` with none. Errors name the offending part.
- `parse_selector_json` reads the selector from text (the injector's annotation, a
  tenant's to write); a malformed document, a non-object, or a wrong field type is a
  `SelectorError`, and so is anything else the text can make a parser do: it is total.
  Text over `MAX_TEXT` characters or nested deeper than `MAX_DEPTH` is refused before
  it is decoded (a selector nests 5 deep; `json.loads` recurses once per level), and any
  other exception a decode or a check raises becomes a `SelectorError` naming its type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trust.bundle import BundleError, normalize_bundle

MAX_TEXT = 64 * 1024
"""The longest selector text decoded (a selector is a few hundred bytes)."""
MAX_DEPTH = 8
"""The deepest nesting of `[` and `{` decoded (a selector's deepest value, an
expression's `values`, is at depth 5)."""

_FIELDS = ("name", "signerName", "labelSelector")
_LABEL_SELECTOR_FIELDS = ("matchLabels", "matchExpressions")
_EXPRESSION_FIELDS = ("key", "operator", "values")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


class SelectorError(BundleError):
    """The selector is malformed, or (without `allow_missing`) matched nothing."""


@dataclass(frozen=True)
class ClusterTrustBundleSelector:
    """A validated selector. `label_selector is None` is the nil selector (nothing)."""

    name: str | None = None
    signer_name: str | None = None
    label_selector: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_json(self) -> dict[str, Any]:
        if self.name is not None:
            return {"name": self.name}
        out: dict[str, Any] = {"signerName": self.signer_name}
        if self.label_selector is not None:
            out["labelSelector"] = dict(self.label_selector)
        return out

    def matches(self, bundle: Mapping[str, Any]) -> bool:
        """Whether this selector picks `bundle` (a ClusterTrustBundle as a dict)."""
        if self.name is not None:
            return _meta(bundle).get("name") == self.name
        if self.label_selector is None:
            return False
        if (bundle.get("spec") or {}).get("signerName") != self.signer_name:
            return False
        return _label_matcher(self.label_selector)(_meta(bundle).get("labels") or {})


def parse_selector_json(text: str) -> ClusterTrustBundleSelector:
    """The selector written as a JSON object (the injector's annotation value). Raises
    `SelectorError` and nothing else, whatever `text` is."""
    if not isinstance(text, str):
        raise SelectorError(f"a selector is text, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise SelectorError(f"longer than {MAX_TEXT} characters")
    depth = nesting_depth(text)
    if depth > MAX_DEPTH:
        raise SelectorError(f"nested {depth} deep (a selector nests at most {MAX_DEPTH})")
    try:
        value = json.loads(text)
    except ValueError as err:
        raise SelectorError(f"not valid JSON: {str(err)[:200]}") from None
    except Exception as err:  # total: nothing a tenant writes may escape
        raise SelectorError(f"not valid JSON ({type(err).__name__})") from None
    try:
        return parse_selector(value)
    except SelectorError:
        raise
    except Exception as err:  # total, as above
        raise SelectorError(f"not a valid selector ({type(err).__name__})") from None


def nesting_depth(text: str) -> int:
    """The deepest nesting of `[` and `{` in `text` outside JSON strings, without
    decoding it (linear, no recursion); it stops counting past `MAX_DEPTH`."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif char in "]}":
            depth -= 1
    return deepest


def parse_selector(value: Any) -> ClusterTrustBundleSelector:
    """Validate a selector given as a decoded JSON value (see the module docstring)."""
    if isinstance(value, ClusterTrustBundleSelector):
        return value
    if not isinstance(value, Mapping):
        raise SelectorError(
            f"a ClusterTrustBundleSelector is a JSON object, not {_json_type(value)}"
        )
    unknown = sorted(str(k) for k in value if k not in _FIELDS)
    if unknown:
        raise SelectorError(
            f"unknown field(s) {', '.join(repr(k) for k in unknown)} "
            f"(a ClusterTrustBundleSelector has {', '.join(_FIELDS)})"
        )
    name = _optional_string(value, "name")
    signer = _optional_string(value, "signerName")
    has_label_selector = value.get("labelSelector") is not None
    if name is not None:
        if signer is not None:
            raise SelectorError(
                "a ClusterTrustBundleSelector sets either name or signerName, not both"
            )
        if has_label_selector:
            raise SelectorError("name is exclusive with labelSelector")
        if not name:
            raise SelectorError("name must not be empty")
        return ClusterTrustBundleSelector(name=name)
    if signer is None:
        if has_label_selector:
            raise SelectorError("labelSelector requires signerName")
        raise SelectorError("a ClusterTrustBundleSelector must set name or signerName")
    if not signer:
        raise SelectorError("signerName must not be empty")
    label_selector = value.get("labelSelector")
    if label_selector is not None:
        label_selector = _validate_label_selector(label_selector)
    return ClusterTrustBundleSelector(signer_name=signer, label_selector=label_selector)


def select_bundles(
    bundles: Iterable[Mapping[str, Any]],
    selector: ClusterTrustBundleSelector | Mapping[str, Any] | None,
) -> list[Mapping[str, Any]]:
    """The objects of `bundles` that `selector` picks (`None` picks nothing)."""
    if selector is None:
        return []
    parsed = parse_selector(selector)
    return [obj for obj in bundles if parsed.matches(obj)]


def resolve_selector(
    bundles: Sequence[Mapping[str, Any]],
    selector: ClusterTrustBundleSelector | Mapping[str, Any] | None,
    *,
    allow_missing: bool = False,
) -> str:
    """The unified, normalised trust bundle that `selector` picks out of `bundles`
    (ClusterTrustBundle objects as dicts). When nothing matches, the result is `""` if
    `allow_missing`, else `SelectorError`."""
    chosen = select_bundles(bundles, selector)
    if not chosen:
        if allow_missing:
            return ""
        shown = parse_selector(selector).to_json() if selector is not None else None
        raise SelectorError(f"selector {json.dumps(shown)} matched zero ClusterTrustBundles")
    return normalize_bundle("".join(_trust_bundle_of(obj) for obj in chosen))


def label_selector_matcher(value: Any) -> Callable[[Mapping[str, str]], bool]:
    """A `metav1.LabelSelector` (a parsed JSON object) as a predicate on labels, with the
    validation and matching of a selector's `labelSelector` (`SelectorError` if
    invalid); the empty selector matches everything."""
    return _label_matcher(_validate_label_selector(value))


# validation ---------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _optional_string(value: Mapping[str, Any], key: str) -> str | None:
    item = value.get(key)
    if item is None:
        return None
    if not isinstance(item, str):
        raise SelectorError(f"{key} must be a string, not {_json_type(item)}")
    return item


def _reject_unknown_fields(value: Mapping[str, Any], where: str, known: tuple[str, ...]) -> None:
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise SelectorError(
            f"{where} has unknown field(s) {', '.join(repr(k) for k in unknown)} "
            f"({', '.join(known)})"
        )


def _validate_label_selector(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SelectorError(f"labelSelector must be an object, not {_json_type(value)}")
    _reject_unknown_fields(value, "labelSelector", _LABEL_SELECTOR_FIELDS)
    match_labels = value.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("labelSelector.matchLabels must be an object")
    for key, label_value in match_labels.items():
        _check_label_key(str(key), "matchLabels")
        if not isinstance(label_value, str):
            raise SelectorError(f"matchLabels[{key!r}] must be a string")
        _check_label_value(label_value, f"matchLabels[{key!r}]")
    expressions = value.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("labelSelector.matchExpressions must be an array")
    for index, expr in enumerate(expressions):
        _check_expression(index, expr)
    return dict(value)


def _check_expression(index: int, expr: Any) -> None:
    where = f"matchExpressions[{index}]"
    if not isinstance(expr, Mapping):
        raise SelectorError(f"{where} must be an object")
    _reject_unknown_fields(expr, where, _EXPRESSION_FIELDS)
    key = expr.get("key")
    if not key or not isinstance(key, str):
        raise SelectorError(f"a matchExpressions entry has no key ({where})")
    _check_label_key(key, where)
    operator = expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where} values must be an array of strings")
    if operator in ("In", "NotIn"):
        if not values:
            raise SelectorError(f"matchExpressions {key!r} {operator} needs values")
        for v in values:
            _check_label_value(v, f"{where} value")
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            raise SelectorError(f"matchExpressions {key!r} {operator} takes no values")
    else:
        raise SelectorError(
            f"matchExpressions {key!r} has unknown operator {operator!r} ({', '.join(_OPERATORS)})"
        )


def _check_label_key(key: str, where: str) -> None:
    prefix, slash, name = key.rpartition("/")
    bad = (
        not name
        or len(name) > 63
        or not _QUALIFIED_NAME.fullmatch(name)
        or (slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)))
    )
    if bad:
        raise SelectorError(f"{where}: {key!r} is not a valid label key")


def _check_label_value(value: str, where: str) -> None:
    if len(value) > 63 or (value and not _QUALIFIED_NAME.fullmatch(value)):
        raise SelectorError(f"{where}: {value!r} is not a valid label value")


# matching -----------------------------------------------------------------------------


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _trust_bundle_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("trustBundle") or "")


def _label_matcher(label_selector: Mapping[str, Any]) -> Callable[[Mapping[str, str]], bool]:
    """`metav1.LabelSelectorAsSelector` for a validated, non-nil selector: every
    matchLabels pair and every matchExpressions requirement must hold; an empty selector
    matches everything."""
    requirements: list[tuple[str, str, frozenset[str]]] = [
        (str(key), "In", frozenset([str(value)]))
        for key, value in (label_selector.get("matchLabels") or {}).items()
    ]
    for expr in label_selector.get("matchExpressions") or []:
        values = frozenset(str(v) for v in expr.get("values") or [])
        requirements.append((str(expr["key"]), str(expr["operator"]), values))

    def matches(labels: Mapping[str, str]) -> bool:
        return all(_requirement_holds(labels, *req) for req in requirements)

    return matches


def _requirement_holds(
    labels: Mapping[str, str], key: str, operator: str, values: frozenset[str]
) -> bool:
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    return not present
