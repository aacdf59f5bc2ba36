"""The names through which an object asks for this signer's anchors: the contract between
the injector, which fills such objects, and the trust distributor, which creates
ConfigMaps that carry them (docs/inject.md); and what such a ConfigMap holds for a bundle
(`outputs`), so that a copy is created already filled, exactly as the injector would
fill it, and the injector then finds it current.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from trust.truststore import java_truststore

ANNOTATION = "service-serving-signer/ca-bundle-from"
"""The annotation whose value is a KEP-6283 `ClusterTrustBundleSelector` as JSON."""

LABEL = "service-serving-signer/inject-ca-bundle"
"""The ConfigMaps' opt-in label (value `true`): the injector watches only ConfigMaps
carrying it."""

LABEL_SELECTOR = f"{LABEL}=true"

TRUSTSTORE_ANNOTATION = "service-serving-signer/truststore-pkcs12"
"""Names a binaryData key to hold the anchors as a PKCS#12 truststore (for JVMs)."""

TRUSTSTORE_PASSWORD_ANNOTATION = "service-serving-signer/truststore-password"
"""The truststore's password; empty when absent (see `trust.truststore`)."""

FIELD_MANAGER = "service-serving-signer-injector"
"""The field manager of the injector's writes (guarded JSON patches), and of the distributor's
copies (created filled; the injector keeps them current): what they own, and what a
release gives up."""


def is_selected(raw: Mapping[str, Any]) -> bool:
    """Whether a ConfigMap carries the opt-in label (what `LABEL_SELECTOR` lists)."""
    return ((raw.get("metadata") or {}).get("labels") or {}).get(LABEL) == "true"


CA_KEY = "ca.crt"
"""The ConfigMap key that holds the selected anchors as PEM."""

DIGEST_ANNOTATION = "service-serving-signer/truststore-digest"
"""Written beside a truststore in the same write: `<inputs_digest>:<sha256 of the base64
text written>`, so a reader knows the file is ours and current without parsing it."""


def text_digest(value: str) -> str:
    """SHA-256 (hex) of a field's text."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def inputs_digest(key: str, password_digest: str, bundle: str) -> str:
    """The SHA-256 of what a truststore is made from: its key, its password (by its
    `text_digest`, which is all a cached record keeps of it), the bundle."""
    return text_digest("\0".join((key, password_digest, bundle)))


def outputs(bundle: str, truststore: tuple[str, str] | None) -> dict[str, dict[str, str]]:
    """What a consumer ConfigMap holds for `bundle`: `data` (`ca.crt`), and with a
    truststore (key, password) `binaryData` and `annotations` (`DIGEST_ANNOTATION`)."""
    out: dict[str, dict[str, str]] = {"data": {CA_KEY: bundle}}
    if truststore is not None:
        key, password = truststore
        text = base64.b64encode(java_truststore(bundle, password)).decode("ascii")
        out["binaryData"] = {key: text}
        recorded = f"{inputs_digest(key, text_digest(password), bundle)}:{text_digest(text)}"
        out["annotations"] = {DIGEST_ANNOTATION: recorded}
    return out


def bundle_record(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A ClusterTrustBundle as a selection reads it (an informer transform): name,
    resourceVersion (what a convergence report says it saw), labels, signer and PEM."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
            "labels": dict(meta.get("labels") or {}),
        },
        "spec": {
            "signerName": spec.get("signerName", ""),
            "trustBundle": spec.get("trustBundle", ""),
        },
    }
