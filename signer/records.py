"""Compact, immutable records of the objects the signer caches.

The informers hold these instead of whole API objects: a Pod record is the handful of
fields the signer reads (ARCHITECTURE "informer … transform"), which is what lets a
replica cache tens of thousands of Pods cheaply. Each transform decides which fields
`sync` may depend on — anything not copied here cannot be read from the cache.

A request record keeps the key material (stub CSR or legacy PKIX key) and everything
needed for a conditional status write (`resourceVersion`); it drops `managedFields`,
`ownerReferences` and the rest of the metadata.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

JSON = dict[str, Any]

TERMINAL_CONDITIONS = ("Issued", "Denied", "Failed")

_EMPTY: Mapping[str, str] = MappingProxyType({})


def _frozen_map(value: Any) -> Mapping[str, str]:
    if not value:
        return _EMPTY
    return MappingProxyType({str(k): str(v) for k, v in dict(value).items()})


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


@dataclass(frozen=True)
class PodRecord:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    hostname: str = ""
    subdomain: str = ""
    node_name: str = ""
    service_account_name: str = ""
    deleting: bool = False

    @property
    def key(self) -> str:
        return _key(self.namespace, self.name)


@dataclass(frozen=True)
class ServiceRecord:
    namespace: str
    name: str
    selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    type: str = "ClusterIP"
    cluster_ip: str = ""

    @property
    def key(self) -> str:
        return _key(self.namespace, self.name)

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"


@dataclass(frozen=True)
class PCRRecord:
    namespace: str
    name: str
    uid: str
    resource_version: str
    created: datetime | None
    signer_name: str
    pod_name: str
    pod_uid: str
    node_name: str
    service_account_name: str
    max_expiration_seconds: int | None
    stub_pkcs10: bytes | None
    pkix_public_key: bytes | None
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    terminal: str | None = None

    @property
    def key(self) -> str:
        return _key(self.namespace, self.name)

    @property
    def pod_key(self) -> str:
        return _key(self.namespace, self.pod_name)


def pod_record(obj: JSON) -> PodRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return PodRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        labels=_frozen_map(meta.get("labels")),
        hostname=str(spec.get("hostname") or ""),
        subdomain=str(spec.get("subdomain") or ""),
        node_name=str(spec.get("nodeName") or ""),
        service_account_name=str(spec.get("serviceAccountName") or "default"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def service_record(obj: JSON) -> ServiceRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return ServiceRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        selector=_frozen_map(spec.get("selector")),
        type=str(spec.get("type") or "ClusterIP"),
        cluster_ip=str(spec.get("clusterIP") or ""),
    )


def pcr_record(obj: JSON) -> PCRRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    max_seconds = spec.get("maxExpirationSeconds")
    return PCRRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        created=parse_time(meta.get("creationTimestamp")),
        signer_name=str(spec.get("signerName", "")),
        pod_name=str(spec.get("podName", "")),
        pod_uid=str(spec.get("podUID", "")),
        node_name=str(spec.get("nodeName", "")),
        service_account_name=str(spec.get("serviceAccountName", "")),
        max_expiration_seconds=int(max_seconds) if max_seconds is not None else None,
        stub_pkcs10=_bytes(spec.get("stubPKCS10Request")),
        pkix_public_key=_bytes(spec.get("pkixPublicKey")),
        annotations=_frozen_map(spec.get("unverifiedUserAnnotations")),
        terminal=terminal_condition(status),
    )


def terminal_condition(status: Mapping[str, Any]) -> str | None:
    """`Issued`, `Denied` or `Failed` if the request is finished, else None. A request
    with a certificate chain counts as Issued even without the condition."""
    for condition in status.get("conditions") or ():
        kind = condition.get("type")
        if kind in TERMINAL_CONDITIONS and condition.get("status") == "True":
            return str(kind)
    if status.get("certificateChain"):
        return "Issued"
    return None


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def format_time(value: datetime) -> str:
    """RFC 3339 in whole seconds, UTC — metav1.Time's wire form."""
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _bytes(value: Any) -> bytes | None:
    """API `[]byte` fields arrive base64-encoded in JSON; tolerate raw bytes too."""
    if value is None or value == "":
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        return str(value).encode()
