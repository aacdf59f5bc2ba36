"""The names through which an object asks for this signer's anchors: the contract between
the injector, which fills such objects, and the trust distributor, which creates
ConfigMaps that carry them (docs/inject.md). Names only; no decision lives here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
"""The server-side apply field manager of the injector's writes, and of the distributor's
copies (which the injector then fills): what they own, and what a release gives up."""


def is_selected(raw: Mapping[str, Any]) -> bool:
    """Whether a ConfigMap carries the opt-in label (what `LABEL_SELECTOR` lists)."""
    return ((raw.get("metadata") or {}).get("labels") or {}).get(LABEL) == "true"
