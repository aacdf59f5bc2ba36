"""The managed CA's persisted state: one Secret, decoded into `decide.State` and encoded
back (pure: no client).

The Secret (layout in `managedca.material`): `ca.key`/`ca.crt` the signing CA, `next.key` /
`next.crt` a staged CA, `previous.crt` the roots being retired. The phase and its
timestamps are annotations (RFC 3339, UTC, whole seconds), so `kubectl describe` shows
them and every write of them is a write of the whole Secret with its resourceVersion:
the state and the keys can never disagree. `service-serving-signer/ca-phase` is
informational (derived on read); the previous roots' swap and retire times are one JSON
annotation, `ca-previous`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cryptography import x509

from kube.times import format_time, read_time
from managedca.decide import CaInfo, Previous, State
from managedca.layout import (
    ANNOTATION_PREFIX,
    CONFIRMED_AT,
    CURRENT_CERT,
    CURRENT_KEY,
    NEXT_CERT,
    NEXT_KEY,
    PREVIOUS_CERTS,
    RETIRED,
    REVOKED,
    pem_fingerprints,
    secret_data,
    split_pem,
)

PHASE = ANNOTATION_PREFIX + "ca-phase"
STAGED_AT = ANNOTATION_PREFIX + "ca-staged-at"
PUBLISHED_AT = ANNOTATION_PREFIX + "ca-published-at"
SWAP_NOT_BEFORE = ANNOTATION_PREFIX + "ca-swap-not-before"
SWAPPED_AT = ANNOTATION_PREFIX + "ca-swapped-at"
ROTATE_REQUESTED_AT = ANNOTATION_PREFIX + "ca-rotate-requested-at"
PREVIOUS = ANNOTATION_PREFIX + "ca-previous"
EMERGENCY_REQUESTED_AT = ANNOTATION_PREFIX + "ca-emergency-requested-at"
REVOKE = ANNOTATION_PREFIX + "ca-revoke"  # fingerprints, comma-separated (ca rotate --emergency)
EMERGENCY = ANNOTATION_PREFIX + "ca-emergency"
ISSUED_LIFETIME = (
    ANNOTATION_PREFIX + "ca-issued-lifetime"
)  # seconds, for the current CA  # "true": the current CA signs without gates
CONSUMERS_SKIPPED_FOR = ANNOTATION_PREFIX + "ca-consumers-skipped-for"  # a next CA's fingerprint
CONSUMERS_SKIPPED_BY = ANNOTATION_PREFIX + "ca-consumers-skipped-by"  # who asked
INJECTOR_SEEN = ANNOTATION_PREFIX + "ca-injector-report-seen"  # "true": a missing one waits
_TIMES = {
    "emergency_requested_at": EMERGENCY_REQUESTED_AT,
    "confirmed_at": CONFIRMED_AT,
    "staged_at": STAGED_AT,
    "published_at": PUBLISHED_AT,
    "swap_not_before": SWAP_NOT_BEFORE,
    "swapped_at": SWAPPED_AT,
    "rotate_requested_at": ROTATE_REQUESTED_AT,
}
LABELS = {
    "app.kubernetes.io/name": "service-serving-signer",
    "app.kubernetes.io/component": "managed-ca",
}


class StoreError(Exception):
    """The Secret cannot be decoded (edited by hand?). One line, never key bytes."""


@dataclass(frozen=True)
class Stored:
    """A decoded Secret: the state, the PEMs behind it, and its resourceVersion."""

    state: State
    resource_version: str
    certs: Mapping[str, bytes]  # fingerprint -> PEM, for every CA of the state
    current_key: bytes = field(repr=False)
    next_key: bytes | None = field(default=None, repr=False)


def ca_info(pem: bytes) -> CaInfo:
    cert = x509.load_pem_x509_certificate(pem)
    return CaInfo(pem_fingerprints(pem)[0], cert.not_valid_before_utc, cert.not_valid_after_utc)


def _time_or_none(text: str | None) -> datetime | None:
    return read_time(text) if text else None


def decode(secret: Mapping[str, Any]) -> Stored:
    meta = secret.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    data = secret_data(secret)
    try:
        certs: dict[str, bytes] = {}
        current = ca_info(data[CURRENT_CERT])
        certs[current.fingerprint] = data[CURRENT_CERT]
        nxt = None
        if NEXT_CERT in data:
            nxt = ca_info(data[NEXT_CERT])
            certs[nxt.fingerprint] = data[NEXT_CERT]
        by_fp = {}
        for pem in split_pem(data.get(PREVIOUS_CERTS, b"")):
            info = ca_info(pem)
            by_fp[info.fingerprint] = info
            certs[info.fingerprint] = pem
        previous = _previous(by_fp, annotations.get(PREVIOUS))
        times = {f: _time_or_none(annotations.get(a)) for f, a in _TIMES.items()}
        state = State(
            current=current,
            next=nxt,
            previous=previous,
            revoke=_fingerprints(annotations.get(REVOKE)),
            revoked=_fingerprints(annotations.get(REVOKED)),
            # Only the CA an emergency made, until it is confirmed (older writers kept it).
            emergency=annotations.get(EMERGENCY) == "true" and not annotations.get(CONFIRMED_AT),
            injector_seen=annotations.get(INJECTOR_SEEN) == "true",
            consumers_skipped_for=annotations.get(CONSUMERS_SKIPPED_FOR) or None,
            consumers_skipped_by=annotations.get(CONSUMERS_SKIPPED_BY) or None,
            issued_lifetime=_seconds(annotations.get(ISSUED_LIFETIME)),
            retired=tuple(f for f in (annotations.get(RETIRED) or "").split(",") if f),
            **times,
        )
        if CURRENT_KEY not in data:
            raise KeyError(f"{CURRENT_KEY} is missing")
        return Stored(
            state,
            str(meta.get("resourceVersion", "")),
            certs,
            data[CURRENT_KEY],
            data.get(NEXT_KEY),
        )
    except (KeyError, ValueError, TypeError, OverflowError) as err:
        raise StoreError(
            f"secret {meta.get('namespace')}/{meta.get('name')}: cannot be read as a managed "
            f"CA ({type(err).__name__}: {str(err)[:80]})"
        ) from None


def _previous(by_fp: Mapping[str, CaInfo], annotation: str | None) -> tuple[Previous, ...]:
    """The previous roots in `previous.crt`, with their times from `ca-previous`. Fails
    safe: a root without an entry (a hand edit) is kept with no retire time (scheduled
    again like a swapped-out root) and its notBefore as its swap time; an entry without
    a root is dropped (nothing to publish)."""
    entries = {str(p["fingerprint"]): p for p in json.loads(annotation or "[]")}
    out = []
    for fp, info in by_fp.items():
        entry = entries.get(fp)
        if entry is None:
            out.append(Previous(info, info.not_before, None))
            continue
        retire = read_time(entry["retireAt"]) if entry.get("retireAt") else None
        lifetime = _seconds(entry.get("lifetimeSeconds"))
        out.append(Previous(info, read_time(entry["swappedAt"]), retire, lifetime))
    return tuple(out)


def _seconds(value: object) -> timedelta | None:
    return timedelta(seconds=int(str(value))) if value not in (None, "") else None


def _fingerprints(text: str | None) -> frozenset[str]:
    return frozenset(f for f in (text or "").split(",") if f)


def encode(
    namespace: str,
    name: str,
    state: State,
    certs: Mapping[str, bytes],
    current_key: bytes,
    next_key: bytes | None,
    resource_version: str | None = None,
    existing: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole Secret for `state` (a create without `resource_version`, else a
    conditional update). Labels and annotations of `existing` (the metadata read) that
    are not the state's are kept."""
    data = {CURRENT_KEY: current_key, CURRENT_CERT: certs[state.current.fingerprint]}
    if state.next is not None:
        if next_key is None:
            raise ValueError("a staged CA without its key")
        data[NEXT_KEY] = next_key
        data[NEXT_CERT] = certs[state.next.fingerprint]
    if state.previous:
        data[PREVIOUS_CERTS] = b"".join(certs[p.ca.fingerprint] for p in state.previous)
    kept = dict((existing or {}).get("annotations") or {})
    annotations = {k: v for k, v in kept.items() if not k.startswith(ANNOTATION_PREFIX + "ca-")}
    annotations[PHASE] = state.phase
    for attr, key in _TIMES.items():
        value = getattr(state, attr)
        if value is not None:
            annotations[key] = format_time(value)
    for key, fps in ((REVOKE, state.revoke), (REVOKED, state.revoked)):
        if fps:
            annotations[key] = ",".join(sorted(fps))
    if state.emergency:
        annotations[EMERGENCY] = "true"
    if state.injector_seen:
        annotations[INJECTOR_SEEN] = "true"
    if state.consumers_skipped_for:
        annotations[CONSUMERS_SKIPPED_FOR] = state.consumers_skipped_for
        annotations[CONSUMERS_SKIPPED_BY] = state.consumers_skipped_by or ""
    if state.retired:
        annotations[RETIRED] = ",".join(state.retired)
    if state.issued_lifetime is not None:
        annotations[ISSUED_LIFETIME] = str(int(state.issued_lifetime.total_seconds()))
    if state.previous:
        annotations[PREVIOUS] = json.dumps(
            [
                {
                    "fingerprint": p.ca.fingerprint,
                    "swappedAt": format_time(p.swapped_at),
                    "retireAt": format_time(p.retire_at) if p.retire_at else None,
                    "lifetimeSeconds": int(p.lifetime.total_seconds()) if p.lifetime else None,
                }
                for p in state.previous
            ]
        )
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**((existing or {}).get("labels") or {}), **LABELS},
        "annotations": annotations,
    }
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode("ascii") for k, v in data.items()},
    }
