"""ConfigMaps as the injector's fourth target: `ca.crt` for Gateways, Ingress
controllers and applications that cannot read a ClusterTrustBundle (pure; no client).

What it decides:

* **Opt-in by label, so memory is bounded by what users asked for.** Only ConfigMaps
  labelled `LABEL=true` are listed and watched (a label-selector informer); a cluster's
  other ConfigMaps are never cached. The annotation (`injector.targets.ANNOTATION`, the
  same selector and the same strict resolution as the other kinds) says what to inject.
* **Keys.** `ca.crt` holds the selected anchors as PEM (what Gateway API's
  BackendTLSPolicy and frontend validation read at Core support, and what
  kube-root-ca.crt and trust-manager use). With the annotation `TRUSTSTORE_ANNOTATION:
  <key>` the same anchors also go into `binaryData[<key>]` as a PKCS#12 truststore for
  JVMs (`trust.truststore`), password `TRUSTSTORE_PASSWORD_ANNOTATION` or empty.
  Other keys are the user's: the patch names only ours.
* **Up to date by digests, never by parsing.** The record (`to_target`, the informer
  transform) keeps the SHA-256 of `ca.crt` and of the truststore's base64 text, and our
  `DIGEST_ANNOTATION`, written beside the truststore in the same write (trust-manager's
  hash annotation is the model): `<sha256 of key, password digest and bundle>:<sha256 of the
  base64 text we wrote>`. The truststore is current when that annotation names the
  wanted inputs and the text still has the digest we wrote; any other bytes (garbage,
  a store without the trusted-key-usage attribute, another bundle's store) are rewritten.
  Nothing a tenant wrote is ever decoded or parsed: a PKCS#12 file carries its own KDF
  cost, and 1 MiB values are not cached.
* **When nothing can be written**: an immutable ConfigMap, a truststore key that is not a
  valid ConfigMap key or collides with `ca.crt`, or a password over `MAX_PASSWORD`.
* **Release.** Our first write also puts our own label `MARK_LABEL=true` on the
  ConfigMap (and a ConfigMap we own fields of without it gets it: `is_current`). A second
  informer watches ConfigMaps with the mark and without the opt-in label
  (`DEPARTED_SELECTOR`) — whether the label went while the injector ran or while none
  did — and the controller releases each (`targets.release_ops`, which removes the mark
  too). Anyone may set the mark on a ConfigMap of any size, so that informer keeps only
  `departed_record` (name, uid, our entries, the mark, who takes our leaves), lists by a
  streaming list (one object decoded at a time) or small pages, and nothing ever LISTs
  whole objects. The release (also of a labelled ConfigMap whose annotation went) keeps
  `ca.crt` and the truststore and hands each key our entry owns to the ConfigMap's owner,
  as a webhook's caBundle goes to whoever names its server (`targets.handover_of`,
  `OWNER_PATHS`): its entry gets the key in the patch that removes ours, so a GitOps
  owner's next apply keeps it if its configuration sets it and prunes it if not, like
  any key it applies. With no other entry to take it (a ConfigMap only the injector and
  subresources wrote), the key stays owned by nobody, and a log line says so. The
  truststore key is handed only while `TRUSTSTORE_ANNOTATION` still names it: the
  admission policy admits that and no other binaryData key (a stolen token must not give
  an owner a key its next apply would delete).
  The same patch removes our note and truststore digest (`DROPPED`) where our entry
  alone owns them (`Target.dropped`), untested: the record keeps no text.
* **Records are bounded whatever the tenant wrote**: digests (of `ca.crt`, of the
  truststore's text, of its password), what our `injected` note says the object holds
  as 32-byte digests (`targets.MAX_HELD`), at most `targets.MAX_MANAGERS` field managers
  of `targets.MANAGER_NAME` characters (managedFields are client-writable).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from injector.targets import (
    INJECTED_ANNOTATION,
    Kind,
    Target,
    Truststore,
    annotation_of,
    handover_of,
    owned_by_us,
    owns,
    pointer,
    shared,
    single_slot,
    value_digest,
    writers,
)
from injector.targets import (
    MARK_LABEL as MARK_LABEL,
)
from trust.consumers import ANNOTATION as ANNOTATION
from trust.consumers import CA_KEY as CA_KEY
from trust.consumers import DIGEST_ANNOTATION as DIGEST_ANNOTATION
from trust.consumers import FIELD_MANAGER, outputs, text_digest
from trust.consumers import LABEL as LABEL
from trust.consumers import LABEL_SELECTOR as LABEL_SELECTOR
from trust.consumers import TRUSTSTORE_ANNOTATION as TRUSTSTORE_ANNOTATION
from trust.consumers import TRUSTSTORE_PASSWORD_ANNOTATION as TRUSTSTORE_PASSWORD_ANNOTATION
from trust.consumers import inputs_digest as _inputs_digest
from trust.consumers import is_selected as is_selected

MAX_PASSWORD = 1024

MAX_RECORDED = 129
"""`DIGEST_ANNOTATION` is two SHA-256 hex digests and a colon; a longer one is not ours."""

DEPARTED_SELECTOR = f"{MARK_LABEL}=true,{LABEL}!=true"

TENANT_PAGE = 10
"""Objects per page of a LIST of ConfigMaps (both informers, when the server refuses
streaming lists): anyone who may write a ConfigMap may label one of 1 MiB, so a page is
then ~10 MiB, not 500."""

OWNER_PATHS: tuple[tuple[str, ...], ...] = (("f:data",), ("f:metadata",))
"""Where a ConfigMap's owner is named, in turn (`targets.handover_of`): the entry owning
its other data keys (who writes what its consumers read beside `ca.crt`), else the entry
owning its metadata (a GitOps configuration of only labels and annotations, the usual
shape of a ConfigMap that asks for injection)."""

CA_LEAF: tuple[str, ...] = ("f:data", f"f:{CA_KEY}")

MAX_STORES = 2
"""The most binaryData keys of our entry a release names (the truststore key, and one a
former annotation named)."""

MAPS = ("data", "binaryData", "annotations")
"""The maps a record says exist (`Target.maps`), in this order."""

_MAP_SETS = {
    present: tuple(n for n, there in zip(MAPS, present, strict=True) if there)
    for present in itertools.product((False, True), repeat=len(MAPS))
}
"""Which of a ConfigMap's maps exist, by presence: one tuple for each of the 8 answers."""

_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def to_target(raw: Mapping[str, Any]) -> Target:
    """The informer transform for labelled ConfigMaps: digests, never content
    (`ConfigMaps.to_target`)."""
    return CONFIG_MAP.to_target(raw)


def departed_record(raw: Mapping[str, Any]) -> Target:
    """`ConfigMaps.departed_record`."""
    return CONFIG_MAP.departed_record(raw)


def _record(raw: Mapping[str, Any]) -> Target:
    """A labelled ConfigMap's record: digests, never content."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    data = raw.get("data") or {}
    not_applicable: str | None = None
    truststore: Truststore | None = None
    store_key = annotations.get(TRUSTSTORE_ANNOTATION)
    if isinstance(store_key, str):
        password = str(annotations.get(TRUSTSTORE_PASSWORD_ANNOTATION) or "")
        if not _CONFIG_MAP_KEY.fullmatch(store_key) or store_key == CA_KEY:
            not_applicable = (
                f"annotation {TRUSTSTORE_ANNOTATION}: {store_key[:64]!r} is not a ConfigMap "
                f"key other than {CA_KEY} (letters, digits, '-', '_' and '.')"
            )
        elif len(password) > MAX_PASSWORD:
            not_applicable = (
                f"annotation {TRUSTSTORE_PASSWORD_ANNOTATION} is longer than "
                f"{MAX_PASSWORD} characters"
            )
        else:
            current = (raw.get("binaryData") or {}).get(store_key)
            truststore = Truststore(
                shared(store_key), text_digest(password), _made_from(annotations, current)
            )
    if raw.get("immutable"):
        not_applicable = "the ConfigMap is immutable; delete and re-create it mutable"
    leaves: tuple[tuple[str, ...], ...] = (CA_LEAF,)
    if truststore is not None:
        leaves += (("f:binaryData", f"f:{truststore.key}"),)
    annotation = annotation_of(meta)
    return Target(
        kind=KIND,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        annotation=annotation,
        slots=single_slot(str(data.get(CA_KEY) or "")),
        not_applicable=not_applicable,
        owned=owned_by_us(meta),
        namespace=shared(str(meta.get("namespace", ""))),
        truststore=truststore,
        **writers(meta, leaves),
        marked=_marked(meta),
        resource_version=str(meta.get("resourceVersion", "")),
        **(_releasing(meta) if annotation is None else {}),
        maps=_MAP_SETS[
            tuple(
                isinstance(value, Mapping) and bool(value)
                for value in (raw.get("data"), raw.get("binaryData"), annotations)
            )
        ],
    ).with_holding(meta)


def _departed(raw: Mapping[str, Any]) -> Target:
    """The transform of the informer of departed ConfigMaps (`DEPARTED_SELECTOR`: our mark
    without the opt-in label; anyone may set the mark): what a release needs — name,
    namespace, uid, our managedFields entries (at most `targets.MAX_MANAGERS`), the mark,
    who takes the keys our entry owns (at most two handovers) and the resourceVersion
    that guards adding a map to the taker's entry. Nothing else of the object, whose data
    may be 1 MiB."""
    meta = raw.get("metadata") or {}
    return Target(
        kind=KIND,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        annotation=None,
        slots=(),
        owned=owned_by_us(meta),
        namespace=str(meta.get("namespace", "")),
        marked=_marked(meta),
        resource_version=str(meta.get("resourceVersion", "")),
        **_releasing(meta),
    )


def _releasing(meta: Mapping[str, Any]) -> dict[str, Any]:
    """`Target` fields `handover`, `unowned` and `dropped` of a ConfigMap to release (an
    entry of ours); none otherwise."""
    if not owned_by_us(meta):
        return {}
    handover, unowned = handover_of(CONFIG_MAP, meta)
    return {"handover": handover, "unowned": unowned, "dropped": _ours_alone(meta)}


DROPPED = (INJECTED_ANNOTATION, DIGEST_ANNOTATION)
"""Our annotations on a ConfigMap that its release removes (`Target.dropped`)."""

_DROP_SETS = {
    present: tuple(k for k, there in zip(DROPPED, present, strict=True) if there)
    for present in itertools.product((False, True), repeat=len(DROPPED))
}
"""Which of `DROPPED` to remove, by presence: one shared tuple for each answer."""


def _ours_alone(meta: Mapping[str, Any]) -> tuple[str, ...]:
    """The `DROPPED` annotations the ConfigMap has that our managedFields entry owns and
    no other entry does (one another manager owns is theirs: their configuration sets it,
    their next apply would put it back). Left, they would stay owned by nobody."""
    annotations = meta.get("annotations") or {}
    fields = [
        (e.get("manager") == FIELD_MANAGER, e["fieldsV1"])
        for e in meta.get("managedFields") or ()
        if isinstance(e, Mapping) and isinstance(e.get("fieldsV1"), Mapping)
    ]
    present = []
    for key in DROPPED:
        leaf = ("f:metadata", "f:annotations", f"f:{key}")
        owners = {ours for ours, f in fields if owns(f, leaf)}
        present.append(key in annotations and owners == {True})
    return _DROP_SETS[tuple(present)]


def _made_from(annotations: Mapping[str, Any], text: Any) -> str:
    """The inputs digest `DIGEST_ANNOTATION` records, if the store's text still has the
    digest it records beside it; else ""."""
    recorded = annotations.get(DIGEST_ANNOTATION)
    if not isinstance(recorded, str) or len(recorded) > MAX_RECORDED or not isinstance(text, str):
        return ""
    inputs, _, digest = recorded.partition(":")
    return inputs if digest == value_digest(text) else ""


def _marked(meta: Mapping[str, Any]) -> bool:
    return (meta.get("labels") or {}).get(MARK_LABEL) == "true"


def inputs_digest(store: Truststore, bundle: str) -> str:
    """The SHA-256 of what a truststore is made from: its key, its password (by the
    record's digest of it), the bundle."""
    return _inputs_digest(store.key, store.password_digest, bundle)


def is_current(target: Target, bundle: str) -> bool:
    """`ca.crt` is exactly the bundle, any truststore is the one we wrote for it, and a
    ConfigMap we own fields of bears our mark (one written before the mark existed gets
    it: the mark is how its release is found)."""
    if target.managed and not target.marked:
        return False
    wanted = value_digest(bundle)
    if any(slot.digest != wanted for slot in target.slots):
        return False
    store = target.truststore
    return store is None or (
        bool(store.made_from) and store.made_from == inputs_digest(store, bundle)
    )


def written(target: Target, bundle: str, password: str = "") -> dict[str, dict[str, str]]:
    """What a write puts where (`trust.consumers.outputs`): our keys only; a truststore
    made with `password` (read from the object by the write: the record keeps a digest)."""
    store = target.truststore
    return outputs(bundle, (store.key, password) if store is not None else None)


def patch_ops(target: Target, bundle: str, note: str, password: str = "") -> list[dict[str, Any]]:
    """The JSON patch of our keys only (`injector.targets` says why a JSON patch) and
    `targets.INJECTED_ANNOTATION` (`note`), guarded by the uid. A key goes into its map
    when the record saw the map; a map the record did not see is added whole, guarded by
    the record's resourceVersion, so a map someone created meanwhile is never replaced."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": target.uid}]
    guarded = False
    out = written(target, bundle, password)
    out.setdefault("annotations", {})[INJECTED_ANNOTATION] = note
    if not target.marked:
        out["labels"] = {MARK_LABEL: "true"}
    for name, values in out.items():
        where = f"/metadata/{name}" if name in ("annotations", "labels") else f"/{name}"
        if name in target.maps or name == "labels":  # a target is labelled: it has labels
            ops.extend(
                {"op": "add", "path": f"{where}/{pointer(k)}", "value": v}
                for k, v in values.items()
            )
        else:
            if not guarded:
                ops.append(
                    {
                        "op": "test",
                        "path": "/metadata/resourceVersion",
                        "value": target.resource_version,
                    }
                )
                guarded = True
            ops.append({"op": "add", "path": where, "value": dict(values)})
    return ops


KIND = "ConfigMap"


@dataclass(frozen=True)
class ConfigMaps(Kind):
    """Labelled ConfigMaps: the PEM in `ca.crt`, and a truststore when annotated; watched
    only with the opt-in label, released through the mark (`departed_selector`), listed in
    small pages (anyone may write one)."""

    def to_target(self, raw: Mapping[str, Any]) -> Target:
        return _record(raw)

    def departed_record(self, raw: Mapping[str, Any]) -> Target:
        return _departed(raw)

    def our_leaves(
        self, ours: list[Mapping[str, Any]], meta: Mapping[str, Any]
    ) -> list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]]:
        """`ca.crt`, and the truststore key while `TRUSTSTORE_ANNOTATION` names it, each
        to the ConfigMap's owner (`OWNER_PATHS`); another binaryData key our entry owns
        (a store an earlier annotation named) to nobody, and at most `MAX_STORES` named
        (managedFields are client-writable)."""
        found: list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]] = []
        if any(owns(fields, CA_LEAF) for fields in ours):
            found.append((CA_LEAF, OWNER_PATHS, f"data[{CA_KEY}]"))
        store = (meta.get("annotations") or {}).get(TRUSTSTORE_ANNOTATION)
        named = f"f:{store}" if isinstance(store, str) else None
        keys = {
            key
            for fields in ours
            if isinstance(binary := fields.get("f:binaryData"), Mapping)
            for key in binary
            if key != "."
        }
        for key in sorted(keys, key=lambda k: (k != named, k))[:MAX_STORES]:
            owner: tuple[tuple[str, ...], ...] = OWNER_PATHS if key == named else ()
            found.append((("f:binaryData", shared(key)), owner, f"binaryData[{key[2:][:253]}]"))
        return found

    def value_of(self, bundle: str) -> str:
        return bundle

    def holds(self, target: Target, bundle: str, value: str) -> bool:
        return is_current(target, bundle)

    def write_ops(
        self, target: Target, value: str, bundle: str, note: str, password: str
    ) -> list[dict[str, Any]]:
        return patch_ops(target, bundle, note, password)


CONFIG_MAP = ConfigMaps(
    KIND,
    "",
    "v1",
    "configmaps",
    namespaced=True,
    reads_when_not_applicable=True,
    informer="configmaps-injector",
    label_selector=LABEL_SELECTOR,
    departed_selector=DEPARTED_SELECTOR,
    page_size=TENANT_PAGE,
    field="ca.crt or the truststore key",
)
