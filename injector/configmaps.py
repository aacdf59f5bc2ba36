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
  hash annotation is the model): `<sha256 of key, password and bundle>:<sha256 of the
  base64 text we wrote>`. The truststore is current when that annotation names the
  wanted inputs and the text still has the digest we wrote; any other bytes (garbage,
  a store without the trusted-key-usage attribute, another bundle's store) are rewritten.
  Nothing a tenant wrote is ever decoded or parsed: a PKCS#12 file carries its own KDF
  cost, and 1 MiB values are not cached.
* **When nothing can be written**: an immutable ConfigMap, a truststore key that is not a
  valid ConfigMap key or collides with `ca.crt`, or a password over `MAX_PASSWORD`.
* **Release.** The informer sees a ConfigMap whose label is removed as deleted; the
  controller then reads it once and releases our fields (`targets.release_ops`). A label
  removed while no injector ran is never seen that way, so our first write also puts
  our own label `MARK_LABEL=true` on the ConfigMap: a periodic sweep lists ConfigMaps
  with the mark and without the opt-in label (`DEPARTED_SELECTOR`) and releases them
  (the release removes the mark too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from injector.targets import (
    CONFIG_MAP,
    INJECTED_ANNOTATION,
    Slot,
    Target,
    Truststore,
    annotation_of,
    injected_of,
    other_appliers,
    owned_by_us,
    pointer,
    value_digest,
)
from injector.targets import (
    MARK_LABEL as MARK_LABEL,
)
from trust.consumers import ANNOTATION as ANNOTATION
from trust.consumers import CA_KEY as CA_KEY
from trust.consumers import DIGEST_ANNOTATION as DIGEST_ANNOTATION
from trust.consumers import LABEL as LABEL
from trust.consumers import LABEL_SELECTOR as LABEL_SELECTOR
from trust.consumers import TRUSTSTORE_ANNOTATION as TRUSTSTORE_ANNOTATION
from trust.consumers import TRUSTSTORE_PASSWORD_ANNOTATION as TRUSTSTORE_PASSWORD_ANNOTATION
from trust.consumers import inputs_digest as _inputs_digest
from trust.consumers import is_selected as is_selected
from trust.consumers import outputs

MAX_PASSWORD = 1024

DEPARTED_SELECTOR = f"{MARK_LABEL}=true,{LABEL}!=true"

_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def to_target(raw: Mapping[str, Any]) -> Target:
    """The informer transform for labelled ConfigMaps: digests, never content."""
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
            recorded = annotations.get(DIGEST_ANNOTATION)
            truststore = Truststore(
                store_key,
                password,
                value_digest(current) if isinstance(current, str) else "",
                recorded[:200] if isinstance(recorded, str) else "",
            )
    if raw.get("immutable"):
        not_applicable = "the ConfigMap is immutable; delete and re-create it mutable"
    leaves: tuple[tuple[str, ...], ...] = (("f:data", f"f:{CA_KEY}"),)
    if truststore is not None:
        leaves += (("f:binaryData", f"f:{truststore.key}"),)
    return Target(
        kind=CONFIG_MAP.kind,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        annotation=annotation_of(meta),
        slots=(Slot(None, value_digest(str(data.get(CA_KEY) or ""))),),
        not_applicable=not_applicable,
        owned=owned_by_us(meta),
        namespace=str(meta.get("namespace", "")),
        truststore=truststore,
        others=other_appliers(meta, leaves),
        injected=injected_of(meta),
        marked=(meta.get("labels") or {}).get(MARK_LABEL) == "true",
        resource_version=str(meta.get("resourceVersion", "")),
        maps=frozenset(
            name
            for name, value in (
                ("data", raw.get("data")),
                ("binaryData", raw.get("binaryData")),
                ("annotations", annotations),
            )
            if isinstance(value, Mapping) and value
        ),
    )


def inputs_digest(store: Truststore, bundle: str) -> str:
    """The SHA-256 of what a truststore is made from: its key, its password, the bundle."""
    return _inputs_digest(store.key, store.password, bundle)


def is_current(target: Target, bundle: str) -> bool:
    """`ca.crt` is exactly the bundle and any truststore is the one we wrote for it."""
    wanted = value_digest(bundle)
    if any(slot.digest != wanted for slot in target.slots):
        return False
    store = target.truststore
    return store is None or (
        bool(store.digest) and store.recorded == f"{inputs_digest(store, bundle)}:{store.digest}"
    )


def written(target: Target, bundle: str) -> dict[str, dict[str, str]]:
    """What a write puts where (`trust.consumers.outputs`): our keys only."""
    store = target.truststore
    return outputs(bundle, (store.key, store.password) if store is not None else None)


def patch_ops(target: Target, bundle: str, note: str) -> list[dict[str, Any]]:
    """The JSON patch of our keys only (`targets.patch_ops` says why a JSON patch) and
    `targets.INJECTED_ANNOTATION` (`note`), guarded by the uid. A key goes into its map
    when the record saw the map; a map the record did not see is added whole, guarded by
    the record's resourceVersion, so a map someone created meanwhile is never replaced."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": target.uid}]
    guarded = False
    out = written(target, bundle)
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
