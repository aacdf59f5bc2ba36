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
  selections, Events — one code path for both), and created **filled**: `ca.crt` (and a
  requested truststore with its digest annotation) as the injector would write them
  (`trust.consumers.outputs`), so a Gateway never sees it empty and the injector finds
  it current. It carries `FROM_LABEL=<config name>` (what the copies informer selects)
  and `MARK_ANNOTATION`: an HMAC-SHA256, keyed by this installation's secret key
  (`distributor.key`: random, in a Secret, so nothing readable cluster-wide derives
  it), of the configuration name, namespace and name.
* **Ours** (`Copy.ours`) is a ConfigMap whose mark verifies under our key, that has no
  ownerReferences and holds no key but `ca.crt` and its truststore key. Only such a
  ConfigMap is updated or deleted. A label is no mark: anyone who may patch a ConfigMap
  may add `FROM_LABEL`, but the mark needs the installation key, is bound to the
  ConfigMap's own namespace and name (copying a real copy's mark elsewhere proves
  nothing), and a ConfigMap holding anyone else's keys is never deleted even then. Two
  installations have different keys: neither touches the other's copies. A ConfigMap of
  the wanted name that is not ours is never overwritten: `NotOurs` (from the cache) or
  AlreadyExists on the create; a Warning Event says so.
* **Per namespace** (`plan`): create the copies it should have and lacks, re-annotate a
  copy whose configuration changed (and re-label one whose opt-in label was removed),
  delete copies that no configuration wants here any more (the namespace stopped
  matching, the configuration was removed or renamed its ConfigMap). Two configurations
  naming the same ConfigMap for one namespace: the first by name wins, the other is
  reported (`Clash`). A terminating namespace gets nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trust import consumers
from trust.consumers import ANNOTATION
from trust.selector import SelectorError, label_selector_matcher

CONFIG_LABEL = "service-serving-signer/distribute"
"""On a configuration ConfigMap in the injector's namespace (value `true`)."""
CONFIG_SELECTOR = f"{CONFIG_LABEL}=true"
FROM_LABEL = "service-serving-signer/distributed-from"
"""On each copy: the name of the configuration that made it (what the informer selects;
not proof of ownership: see `MARK_ANNOTATION`)."""
MARK_ANNOTATION = "service-serving-signer/distribution-mark"
"""On each copy: `ownership_mark` (an HMAC under the installation's key)."""
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
REASON_QUOTA = "ConfigMapQuotaExceeded"
OUR_KEYS = (consumers.CA_KEY,)

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

    @property
    def annotations_digest(self) -> str:
        return annotations_digest(self.annotations)

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.namespace_selector:
            return True
        return label_selector_matcher(json.loads(self.namespace_selector))(labels)


@dataclass(frozen=True)
class Namespace:
    name: str
    labels: Pairs
    terminating: bool
    uid: str = ""


@dataclass(frozen=True)
class Copy:
    """A ConfigMap bearing `FROM_LABEL`: one we made."""

    namespace: str
    name: str
    uid: str
    distributed_from: str
    annotations_digest: str
    """`annotations_digest` of its copied annotations (anyone may put `FROM_LABEL` on a
    ConfigMap with up to 256 KiB of annotations: the record keeps 64 characters)."""
    labelled: bool = True
    """It still carries the opt-in label of `injector.configmaps` (without it the
    ConfigMap target releases `ca.crt`)."""
    mark: str = ""
    only_our_keys: bool = True
    """It holds no data key but `ca.crt` and no binaryData key but its truststore's."""
    owner_referenced: bool = False
    resource_version: str = field(default="", compare=False)
    """What the delete and the patch are conditional on (a key someone added after the
    cache saw the copy makes them fail, not go with it). Not compared: a new
    resourceVersion alone is nothing to act on."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def ours(self, installation: str) -> bool:
        """Made by the installation keyed `installation` (see the module docstring)."""
        wanted = ownership_mark(installation, self.distributed_from, self.namespace, self.name)
        return (
            bool(installation)
            and hmac.compare_digest(self.mark, wanted)
            and self.only_our_keys
            and not self.owner_referenced
        )


def ownership_mark(installation: str, distributed_from: str, namespace: str, name: str) -> str:
    """HMAC-SHA256 of (configuration, namespace, name) under the installation's key."""
    message = "\0".join((distributed_from, namespace, name)).encode()
    return hmac.new(installation.encode(), message, hashlib.sha256).hexdigest()


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
    return Namespace(
        str(meta.get("name", "")),
        _pairs(meta.get("labels") or {}),
        terminating,
        str(meta.get("uid", "")),
    )


def to_copy(raw: Mapping[str, Any]) -> Copy:
    """The informer transform of ConfigMaps bearing `FROM_LABEL` (anyone may add it, so
    the record is small whatever the ConfigMap holds)."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    store = annotations.get(consumers.TRUSTSTORE_ANNOTATION)
    mark = annotations.get(MARK_ANNOTATION)
    only_ours = set(raw.get("data") or {}) <= set(OUR_KEYS) and set(
        raw.get("binaryData") or {}
    ) <= ({store} if isinstance(store, str) else set())
    return Copy(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        distributed_from=str((meta.get("labels") or {}).get(FROM_LABEL, ""))[:253],
        annotations_digest=annotations_digest(
            _pairs({k: annotations[k] for k in COPIED_ANNOTATIONS if k in annotations})
        ),
        labelled=consumers.is_selected(raw),
        mark=mark[:64] if isinstance(mark, str) else "",
        only_our_keys=only_ours,
        owner_referenced=bool(meta.get("ownerReferences")),
        resource_version=str(meta.get("resourceVersion", ""))[:64],
    )


# What `plan` returns: one small frozen record per outcome; the caller matches on the
# type, and mypy sees every field.
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


@dataclass(frozen=True)
class NotOurs:
    """A ConfigMap of the wanted name exists and is not ours: nothing is posted."""

    distribution: Distribution
    existing: Copy


Action = Create | Update | Delete | Clash | NotOurs


def plan(
    namespace: Namespace | None,
    distributions: Iterable[Distribution],
    copies: Iterable[Copy],
    *,
    key: str,
) -> list[Action]:
    """What one namespace needs, for the installation keyed `key` (see the module
    docstring). ConfigMaps that are not ours are never acted on."""
    if namespace is None or namespace.terminating or not key:
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
        if not copy.ours(key):
            if want is not None and copy.name not in have:
                have.add(copy.name)
                actions.append(NotOurs(want, copy))
            continue
        if copy.distributed_from in kept_problems:
            have.add(copy.name)  # a broken configuration changes nothing until fixed
        elif want is None or copy.distributed_from != want.name:
            actions.append(Delete(copy))
        else:
            have.add(copy.name)
            if copy.annotations_digest != want.annotations_digest or not copy.labelled:
                actions.append(Update(want, copy))
    actions.extend(Create(d) for name, d in wanted.items() if name not in have)
    return actions


def copy_body(
    distribution: Distribution, namespace: str, key: str, bundle: str | None
) -> dict[str, Any]:
    """The ConfigMap a `Create` posts: labelled, annotated, marked, and filled with
    `bundle` when the selection resolves (else empty: the injector warns and fills it
    when a bundle appears)."""
    annotations = dict(distribution.annotations)
    name = distribution.config_map_name
    annotations[MARK_ANNOTATION] = ownership_mark(key, distribution.name, namespace, name)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {consumers.LABEL: "true", FROM_LABEL: distribution.name},
            "annotations": annotations,
        },
    }
    if bundle:
        store_key = annotations.get(consumers.TRUSTSTORE_ANNOTATION)
        password = annotations.get(consumers.TRUSTSTORE_PASSWORD_ANNOTATION, "")
        out = consumers.outputs(bundle, (store_key, password) if store_key else None)
        body["data"] = out["data"]
        if "binaryData" in out:
            body["binaryData"] = out["binaryData"]
            annotations.update(out["annotations"])
    return body


def annotations_patch(distribution: Distribution, copy: Copy) -> dict[str, Any]:
    """The merge patch an `Update` sends: the copied annotations as the configuration has
    them (absent ones removed) and the opt-in label, guarded by the copy's uid and
    resourceVersion."""
    wanted = dict(distribution.annotations)
    return {
        "metadata": {
            "uid": copy.uid,
            **({"resourceVersion": copy.resource_version} if copy.resource_version else {}),
            "labels": {consumers.LABEL: "true"},
            "annotations": {key: wanted.get(key) for key in COPIED_ANNOTATIONS},
        }
    }


def annotations_digest(pairs: Pairs) -> str:
    """SHA-256 of the copied annotations (what a copy's record keeps and `plan` compares)."""
    return hashlib.sha256(json.dumps(pairs, separators=(",", ":")).encode()).hexdigest()


def _pairs(mapping: Mapping[str, Any]) -> Pairs:
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items()))


def _is_dns_subdomain(name: str) -> bool:
    if not name or len(name) > 253:
        return False
    allowed = set("abcdefghijklmnopqrstuvwxyz0123456789-.")
    return set(name) <= allowed and name[0].isalnum() and name[-1].isalnum()
