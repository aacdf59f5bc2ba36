"""The managed CA Secret's layout, shared by its codec (`managedca.codec`) and the material
source (`managedca.material`): the data keys (`ca.key`/`ca.crt` the signing CA,
`next.key`/`next.crt` a staged CA, `previous.crt` the roots being retired), the
annotation prefix, and how a certificate is named (sha256 of its DER, lowercase hex).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from trust.bundle import fingerprint as trust_fingerprint
from trust.bundle import normalize_bundle, parse_anchors

DEFAULT_SECRET_NAME = "service-serving-signer-managed-ca"
CURRENT_KEY = "ca.key"
CURRENT_CERT = "ca.crt"
NEXT_KEY = "next.key"
NEXT_CERT = "next.crt"
PREVIOUS_CERTS = "previous.crt"
ANNOTATION_PREFIX = "service-serving-signer/"
CONFIRMED_AT = ANNOTATION_PREFIX + "ca-confirmed-at"
REVOKED = ANNOTATION_PREFIX + "ca-revoked"  # fingerprints, comma-separated
RETIRED = ANNOTATION_PREFIX + "ca-retired"  # fingerprints, comma-separated, newest first
REVOKED_ROOTS = ANNOTATION_PREFIX + "revoked-roots"
# On the stable ClusterTrustBundle too: a leader has seen the injector's convergence
# report Lease ("true"), remembered where a Secret deletion or restore does not reach.
INJECTOR_SEEN = ANNOTATION_PREFIX + "injector-report-seen"
"""On the signer's stable ClusterTrustBundle (`<signer>:trust-anchors`): every root ever
revoked, comma-separated. Cluster-scoped and never deleted by the publisher, it outlives
a restore of the Secret or of the namespace (docs/managed-ca.md "Revoked roots")."""


def split_pem(pem: bytes) -> list[bytes]:
    """Each certificate of a PEM bundle, as its own PEM."""
    end = b"-----END CERTIFICATE-----"
    return [part.strip() + b"\n" + end + b"\n" for part in pem.split(end) if part.strip()]


def secret_data(secret: Mapping[str, Any]) -> dict[str, bytes]:
    """The Secret's `data`, decoded."""
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def bundle_pem(data: Mapping[str, bytes]) -> bytes:
    """The roots a state publishes: current, next, previous (un-normalised)."""
    return b"".join(data.get(k, b"") for k in (CURRENT_CERT, NEXT_CERT, PREVIOUS_CERTS))


def pem_fingerprints(pem: bytes | str) -> list[str]:
    """`trust.bundle.fingerprint` of each certificate in `pem`, in order."""
    return [trust_fingerprint(c) for c in parse_anchors(normalize_bundle(pem))]
