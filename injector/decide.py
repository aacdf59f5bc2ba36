"""What one sync of one annotated object decides, from its record and the cached
ClusterTrustBundles (pure: no client, no clock).

Outcomes, in the order they are checked:

1. `Ignore` — no annotation and no field of ours: the object is not ours to touch.
   `Release` — no annotation, but our field manager still owns fields (we injected
   before the owner removed the annotation): give them up by removing our managedFields
   entries, values kept, so the owner can change or remove them (`targets.release_ops`).
2. `Invalid` — the annotation is not a valid `ClusterTrustBundleSelector`, or the object
   cannot carry a caBundle (`targets.Target.not_applicable`). Nothing is written; a
   Warning Event says why. Re-decided when the object changes.
3. `Empty` — the selector is valid but picks no ClusterTrustBundle. The current caBundle
   is kept: an empty caBundle makes kube-apiserver fall back to the system roots, and
   dropping a working one because a bundle is being re-created would break every call.
   A Warning Event says so. Re-decided when a matching bundle appears.
4. `UpToDate` — every caBundle slot already holds the resolved bundle.
   `Conflict` — it does not, and another server-side apply manager owns a field we would
   write (its configuration sets caBundle or `ca.crt` too). Nothing is written (writing
   would take the field from it, and its next apply would take it back, for ever); a
   Warning Event names the manager. Re-decided when the object changes.
5. `Inject` — write `ca_bundle` to every slot: base64 of the normalised PEM for a
   caBundle field, the PEM itself for a ConfigMap's `ca.crt` (`injector.configmaps`).

A resolved bundle is the exact text `trust.selector.resolve_selector` returns
(header-less PEM, sorted, de-duplicated), so the comparison in 4 is a compare of
SHA-256 digests (the records keep digests, never content) and an object someone edited
by hand is rewritten. A ConfigMap's truststore is current by the digest annotation we
write beside it (`injector.configmaps`): tenant bytes are never parsed here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from injector import configmaps
from injector.targets import ANNOTATION, CONFIG_MAP, MAX_ANNOTATION, Target, is_current
from trust.bundle import BundleError, hash_named_stable_name
from trust.selector import (
    ClusterTrustBundleSelector,
    SelectorError,
    parse_selector_json,
    resolve_selector,
)

REASON_INVALID_SELECTOR = "InvalidCABundleSelector"
REASON_NOT_APPLICABLE = "CABundleNotApplicable"
REASON_EMPTY = "NoClusterTrustBundles"
REASON_HASH_NAMED = "HashNamedClusterTrustBundle"
REASON_CONFLICT = "CABundleOwnedByAnotherManager"
REASON_REFUSED = "CABundleWriteRefused"


# What `decide` returns: one small frozen record per outcome; the caller matches on the
# type, and mypy sees every field.
@dataclass(frozen=True)
class Ignore:
    pass


@dataclass(frozen=True)
class Release:
    """Our field manager owns fields of an object we no longer manage."""


@dataclass(frozen=True)
class Invalid:
    reason: str
    message: str


@dataclass(frozen=True)
class Empty:
    selector: ClusterTrustBundleSelector
    message: str


@dataclass(frozen=True)
class UpToDate:
    bundle: str
    """The resolved bundle (PEM), for the expiry gauge."""


@dataclass(frozen=True)
class Conflict:
    bundle: str
    managers: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Inject:
    bundle: str
    ca_bundle: str
    """The value of every slot: `bundle` as the base64 text of a JSON `[]byte` field,
    or `bundle` itself for a ConfigMap."""
    sources: int
    """How many ClusterTrustBundles were unified."""


Decision = Ignore | Release | Invalid | Empty | UpToDate | Conflict | Inject


def selector_of(target: Target) -> ClusterTrustBundleSelector | None:
    """The target's valid selector, or None (no annotation or a bad one)."""
    if target.annotation is None or len(target.annotation) > MAX_ANNOTATION:
        return None
    try:
        return parse_selector_json(target.annotation)
    except SelectorError:
        return None


def selection_keys(selector: ClusterTrustBundleSelector) -> list[str]:
    """Index values: which ClusterTrustBundle events can change what `selector` picks."""
    if selector.name is not None:
        return [f"name:{selector.name}"]
    return [f"signer:{selector.signer_name}"]


def bundle_keys(bundle: Mapping[str, Any]) -> list[str]:
    """The index values a ClusterTrustBundle event re-drives (see `selection_keys`)."""
    meta = bundle.get("metadata") or {}
    keys = [f"name:{meta.get('name', '')}"]
    signer = (bundle.get("spec") or {}).get("signerName")
    if signer:
        keys.append(f"signer:{signer}")
    return keys


def decide(target: Target, bundles: Iterable[Mapping[str, Any]]) -> Decision:
    """The outcome for `target` given every cached ClusterTrustBundle."""
    if target.annotation is None:
        return Release() if target.managed else Ignore()
    if len(target.annotation) > MAX_ANNOTATION:
        return Invalid(
            REASON_INVALID_SELECTOR,
            f"annotation {ANNOTATION} is longer than {MAX_ANNOTATION} characters; "
            "the object is left unchanged",
        )
    try:
        selector = parse_selector_json(target.annotation)
    except SelectorError as err:
        return Invalid(
            REASON_INVALID_SELECTOR,
            f"annotation {ANNOTATION}: {err}; the object is left unchanged",
        )
    if target.not_applicable is not None:
        return Invalid(REASON_NOT_APPLICABLE, f"{target.not_applicable}; nothing injected")
    candidates = list(bundles)
    chosen = [b for b in candidates if selector.matches(b)]
    try:
        bundle = resolve_selector(chosen, selector, allow_missing=True)
    except BundleError as err:
        return Invalid(REASON_INVALID_SELECTOR, f"the selected ClusterTrustBundles: {err}")
    if not bundle:
        hashed = hash_named_note(selector)
        return Empty(
            selector,
            f"selector {_compact(selector)} matches no ClusterTrustBundle; "
            f"the current {'ca.crt' if target.kind == CONFIG_MAP.kind else 'caBundle'} is kept"
            + (f"; {hashed}" if hashed else ""),
        )
    if target.kind == CONFIG_MAP.kind:
        value, current = bundle, configmaps.is_current(target, bundle)
    else:
        value = base64.b64encode(bundle.encode("ascii")).decode("ascii")
        current = is_current(target, value)
    if current:
        return UpToDate(bundle)
    if target.others:
        field = "ca.crt or the truststore key" if target.kind == CONFIG_MAP.kind else "caBundle"
        return Conflict(
            bundle,
            target.others,
            f"field manager(s) {', '.join(target.others)} apply {field} too; the injector "
            "does not force over another manager's configuration: remove the field from "
            f"that configuration, or remove the annotation {ANNOTATION}",
        )
    return Inject(bundle, value, len(chosen))


def hash_named_note(selector: ClusterTrustBundleSelector) -> str | None:
    """Why a `name` selector on a hash-named bundle stops working, or None: that name
    changes with the bundle's content, so a rotation deletes it (docs/reference.md §4)."""
    stable = hash_named_stable_name(selector.name) if selector.name is not None else None
    if stable is None:
        return None
    return (
        f"{selector.name} is a hash-named ClusterTrustBundle, deleted when its content "
        f"changes (a CA rotation); select {json.dumps({'name': stable})} (updated in place) "
        "or by signerName instead"
    )


def _compact(selector: ClusterTrustBundleSelector) -> str:
    return json.dumps(selector.to_json(), separators=(",", ":"), sort_keys=True)
