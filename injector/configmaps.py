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
  Other keys are the user's: the apply body names only ours.
* **When nothing can be written**: an immutable ConfigMap, or a truststore key that is
  not a valid ConfigMap key or collides with `ca.crt`.
* **Release.** The informer sees a ConfigMap whose label is removed as deleted; the
  controller then reads it once and releases our fields (`targets.release_body`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from injector.targets import (
    CONFIG_MAP,
    Slot,
    Target,
    Truststore,
    owned_by_us,
)
from trust.bundle import anchor_ders
from trust.consumers import ANNOTATION as ANNOTATION
from trust.consumers import LABEL as LABEL
from trust.consumers import LABEL_SELECTOR as LABEL_SELECTOR
from trust.consumers import TRUSTSTORE_ANNOTATION as TRUSTSTORE_ANNOTATION
from trust.consumers import TRUSTSTORE_PASSWORD_ANNOTATION as TRUSTSTORE_PASSWORD_ANNOTATION
from trust.consumers import is_selected as is_selected
from trust.truststore import java_truststore, truststore_anchors

CA_KEY = "ca.crt"

_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")


def to_target(raw: Mapping[str, Any]) -> Target:
    """The informer transform for labelled ConfigMaps."""
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    annotation = annotations.get(ANNOTATION)
    data = raw.get("data") or {}
    not_applicable: str | None = None
    truststore: Truststore | None = None
    store_key = annotations.get(TRUSTSTORE_ANNOTATION)
    if isinstance(store_key, str):
        password = str(annotations.get(TRUSTSTORE_PASSWORD_ANNOTATION) or "")
        if not _CONFIG_MAP_KEY.fullmatch(store_key) or store_key == CA_KEY:
            not_applicable = (
                f"annotation {TRUSTSTORE_ANNOTATION}: {store_key!r} is not a ConfigMap key "
                f"other than {CA_KEY} (letters, digits, '-', '_' and '.')"
            )
        else:
            current = (raw.get("binaryData") or {}).get(store_key)
            truststore = Truststore(store_key, password, _anchors(current, password))
    if raw.get("immutable"):
        not_applicable = "the ConfigMap is immutable; delete and re-create it mutable"
    return Target(
        kind=CONFIG_MAP.kind,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        annotation=annotation if isinstance(annotation, str) else None,
        slots=(Slot(None, str(data.get(CA_KEY) or "")),),
        not_applicable=not_applicable,
        managed=owned_by_us(meta),
        namespace=str(meta.get("namespace", "")),
        truststore=truststore,
    )


def _anchors(value: Any, password: str) -> frozenset[bytes] | None:
    if not isinstance(value, str):
        return None
    try:
        data = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return truststore_anchors(data, password)


def is_current(target: Target, bundle: str) -> bool:
    """`ca.crt` is exactly the bundle and any truststore holds exactly its anchors."""
    if any(slot.ca_bundle != bundle for slot in target.slots):
        return False
    store = target.truststore
    return store is None or store.anchors == anchor_ders(bundle)


def apply_body(target: Target, bundle: str) -> dict[str, Any]:
    """The server-side apply configuration for our keys only; the uid makes
    kube-apiserver refuse (409) rather than re-create a ConfigMap deleted meanwhile."""
    body: dict[str, Any] = {
        "apiVersion": CONFIG_MAP.api_version,
        "kind": CONFIG_MAP.kind,
        "metadata": {"name": target.name, "namespace": target.namespace, "uid": target.uid},
        "data": {CA_KEY: bundle},
    }
    if target.truststore is not None:
        store = java_truststore(bundle, target.truststore.password)
        body["binaryData"] = {target.truststore.key: base64.b64encode(store).decode("ascii")}
    return body
