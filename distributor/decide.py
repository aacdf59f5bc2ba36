"""Distribution: one named trust ConfigMap in every namespace that matches a selector
(kube-controller-manager's `kube-root-ca.crt` pattern, trust-manager's Bundle target).
Pure: records, and what one namespace needs (`plan`).

What it decides:

* **The configuration** is a ConfigMap labelled `CONFIG_LABEL=true` in the injector's own
  namespace (nowhere else: whoever writes one makes the injector write ConfigMaps in
  every namespace, so only those who may already administer the injector may do it).
  `data.configMapName` names the ConfigMap to distribute; `data.namespaceSelector` is a
  `metav1.LabelSelector` as JSON (absent or `{}`: every namespace); its annotations
  `trust.consumers.ANNOTATION` (required) and the truststore annotations of
  `injector.configmaps` are what each copy carries. Delete it and every copy goes.
* **A copy** is created with the opt-in label of `injector.configmaps` and those
  annotations, so the ConfigMap target keeps its `ca.crt` (drift, rotation, empty
  selections, Events — one code path for both). It also carries `FROM_LABEL=<config
  name>`: that label is the ownership mark. Only ConfigMaps bearing it are updated or
  deleted; a ConfigMap of that name without it was not made by us and is never
  overwritten (the create fails with AlreadyExists and a Warning Event says so).
* **Per namespace** (`plan`): create the copies it should have and lacks, re-annotate a
  copy whose configuration changed (and re-label one whose opt-in label was removed),
  delete copies that no configuration wants here any more (the namespace stopped
  matching, the configuration was removed or renamed its ConfigMap). Two configurations
  naming the same ConfigMap for one namespace: the first by name wins, the other is
  reported (`Clash`). A terminating namespace gets nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trust import consumers
from trust.consumers import ANNOTATION
from trust.selector import SelectorError, label_selector_matcher

CONFIG_LABEL = "service-serving-signer/distribute"
"""On a configuration ConfigMap in the injector's namespace (value `true`)."""
CONFIG_SELECTOR = f"{CONFIG_LABEL}=true"
FROM_LABEL = "service-serving-signer/distributed-from"
"""On each copy: the name of the configuration that made it (the ownership mark)."""
NAME_KEY = "configMapName"
NAMESPACE_SELECTOR_KEY = "namespaceSelector"
COPIED_ANNOTATIONS = (
    ANNOTATION,
    consumers.TRUSTSTORE_ANNOTATION,
    consumers.TRUSTSTORE_PASSWORD_ANNOTATION,
)

REASON_INVALID = "InvalidDistribution"
REASON_NOT_OURS = "ConfigMapNotOurs"
REASON_CLASH = "DistributionClash"

Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Distribution:
    """A configuration ConfigMap, as read."""

    name: str
    uid: str
    config_map_name: str
    annotations: Pairs
    """What every copy carries (the copied annotations present on the configuration)."""
    namespace_selector: str
    """The `metav1.LabelSelector` JSON (canonical form), "" for every namespace."""
    problem: str | None = None
    """Why the configuration cannot be acted on (nothing is created; copies are kept)."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.namespace_selector:
            return True
        return label_selector_matcher(json.loads(self.namespace_selector))(labels)


@dataclass(frozen=True)
class Namespace:
    name: str
    labels: Pairs
    terminating: bool


@dataclass(frozen=True)
class Copy:
    """A ConfigMap bearing `FROM_LABEL`: one we made."""

    namespace: str
    name: str
    uid: str
    distributed_from: str
    annotations: Pairs
    labelled: bool = True
    """It still carries the opt-in label of `injector.configmaps` (without it the
    ConfigMap target releases `ca.crt`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def to_distribution(raw: Mapping[str, Any]) -> Distribution:
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    data = raw.get("data") or {}
    name = str(data.get(NAME_KEY) or "")
    problem: str | None = None
    selector_text = str(data.get(NAMESPACE_SELECTOR_KEY) or "").strip()
    canonical = ""
    if selector_text:
        try:
            parsed = json.loads(selector_text)
            label_selector_matcher(parsed)
            canonical = json.dumps(parsed, sort_keys=True, separators=(",", ":"))
            if canonical == "{}":
                canonical = ""
        except (ValueError, SelectorError) as err:
            problem = f"data.{NAMESPACE_SELECTOR_KEY}: {err}"
    if not _is_dns_subdomain(name):
        problem = f"data.{NAME_KEY} must name a ConfigMap (a DNS subdomain), not {name!r}"
    if ANNOTATION not in annotations:
        problem = f"annotation {ANNOTATION} is required: it is what every copy selects"
    return Distribution(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        config_map_name=name,
        annotations=_pairs({k: annotations[k] for k in COPIED_ANNOTATIONS if k in annotations}),
        namespace_selector=canonical,
        problem=problem,
    )


def to_namespace(raw: Mapping[str, Any]) -> Namespace:
    meta = raw.get("metadata") or {}
    terminating = bool(meta.get("deletionTimestamp")) or (
        (raw.get("status") or {}).get("phase") == "Terminating"
    )
    return Namespace(str(meta.get("name", "")), _pairs(meta.get("labels") or {}), terminating)


def to_copy(raw: Mapping[str, Any]) -> Copy:
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    return Copy(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        distributed_from=str((meta.get("labels") or {}).get(FROM_LABEL, "")),
        annotations=_pairs({k: annotations[k] for k in COPIED_ANNOTATIONS if k in annotations}),
        labelled=consumers.is_selected(raw),
    )


# Intentional repeat: one small frozen record per outcome, matched by type (a sum type);
# the same shape recurs in every decide module, with no shared base.
@dataclass(frozen=True)
class Create:
    distribution: Distribution


@dataclass(frozen=True)
class Update:
    distribution: Distribution
    copy: Copy


@dataclass(frozen=True)
class Delete:
    copy: Copy


@dataclass(frozen=True)
class Clash:
    distribution: Distribution
    winner: Distribution


Action = Create | Update | Delete | Clash


def plan(
    namespace: Namespace | None,
    distributions: Iterable[Distribution],
    copies: Iterable[Copy],
) -> list[Action]:
    """What one namespace needs (see the module docstring)."""
    if namespace is None or namespace.terminating:
        return []
    labels = dict(namespace.labels)
    usable = sorted((d for d in distributions if d.problem is None), key=lambda d: d.name)
    wanted: dict[str, Distribution] = {}
    actions: list[Action] = []
    for distribution in usable:
        if not distribution.matches(labels):
            continue
        winner = wanted.setdefault(distribution.config_map_name, distribution)
        if winner is not distribution:
            actions.append(Clash(distribution, winner))
    kept_problems = {d.name for d in distributions if d.problem is not None}
    have: set[str] = set()
    for copy in copies:
        want = wanted.get(copy.name)
        if copy.distributed_from in kept_problems:
            have.add(copy.name)  # a broken configuration changes nothing until fixed
        elif want is None or copy.distributed_from != want.name:
            actions.append(Delete(copy))
        else:
            have.add(copy.name)
            if copy.annotations != want.annotations or not copy.labelled:
                actions.append(Update(want, copy))
    actions.extend(Create(d) for name, d in wanted.items() if name not in have)
    return actions


def copy_body(distribution: Distribution, namespace: str) -> dict[str, Any]:
    """The ConfigMap a `Create` posts (no data: the ConfigMap target fills `ca.crt`)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": distribution.config_map_name,
            "namespace": namespace,
            "labels": {consumers.LABEL: "true", FROM_LABEL: distribution.name},
            "annotations": dict(distribution.annotations),
        },
    }


def annotations_patch(distribution: Distribution, copy: Copy) -> dict[str, Any]:
    """The merge patch an `Update` sends: the copied annotations as the configuration has
    them (absent ones removed) and the opt-in label, guarded by the copy's uid."""
    wanted = dict(distribution.annotations)
    return {
        "metadata": {
            "uid": copy.uid,
            "labels": {consumers.LABEL: "true"},
            "annotations": {key: wanted.get(key) for key in COPIED_ANNOTATIONS},
        }
    }


def _pairs(mapping: Mapping[str, Any]) -> Pairs:
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


def _is_dns_subdomain(name: str) -> bool:
    if not name or len(name) > 253:
        return False
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-.")
    return set(name) <= allowed and name[0].isalnum() and name[-1].isalnum()
