"""Compact, immutable records of the objects the signer caches.

The informers hold these instead of whole API objects: a Pod record is the handful of
fields the signer reads (docs/design.md §3), which is what lets a
replica cache tens of thousands of Pods cheaply. Each transform decides which fields
`sync` may depend on — anything not copied here cannot be read from the cache.

A request record keeps the key material (stub CSR or legacy PKIX key) and everything
needed for a conditional status write (`resourceVersion`); it drops `managedFields`,
`ownerReferences` and the rest of the metadata.

**Memory.** At the Kubernetes scalability envelope (150,000 Pods) every byte of a Pod
record counts, so records are slotted dataclasses and what many Pods share is shared:

* a label map or selector is a `Labels` (immutable) interned per namespace: the Pods of
  one ReplicaSet or StatefulSet revision share one instance. The pool holds its maps
  weakly, so a map goes when its last record does, and it is keyed by namespace, so a
  record never holds an object made for another namespace's records.
* namespace, node and ServiceAccount names are `sys.intern`ed (a few thousand distinct
  values for a whole cluster).

Interning changes identity only: records compare by value (`==`), which is what the
controller's re-drive decisions use (`old.labels != new.labels`).
"""

from __future__ import annotations

import base64
import sys
import threading
import uuid
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kube.times import parse_time
from kube.types import JSON

TERMINAL_CONDITIONS = ("Issued", "Denied", "Failed")


class Labels(Mapping[str, str]):
    """An immutable `str → str` map (labels, selectors, annotations) that compares equal
    to any mapping with the same items. Build with `frozen_map`, which interns it."""

    __slots__ = ("__weakref__", "_items")

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        self._items: dict[str, str] = dict(items or {})

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Labels):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"Labels({self._items!r})"


_EMPTY: Mapping[str, str] = Labels()
_pool: weakref.WeakValueDictionary[tuple[str, frozenset[tuple[str, str]]], Labels] = (
    weakref.WeakValueDictionary()
)
_pool_lock = threading.Lock()


def frozen_map(value: Any, namespace: str = "") -> Mapping[str, str]:
    """`value` (a JSON object) as an interned `Labels`: one instance per distinct map
    per namespace while any record holds it."""
    if not value:
        return _EMPTY
    items = {str(k): str(v) for k, v in dict(value).items()}
    key = (namespace, frozenset(items.items()))
    with _pool_lock:
        found = _pool.get(key)
        if found is None:
            found = _pool[key] = Labels(items)
        return found


def interned_maps() -> int:
    """How many interned maps are alive (tests: nothing outlives its records)."""
    with _pool_lock:
        return len(_pool)


def _name(value: Any) -> str:
    """A name many records share (namespace, node, ServiceAccount), interned."""
    return sys.intern(str(value)) if value else ""


_set = object.__setattr__


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


@dataclass(frozen=True, slots=True, init=False)
class PodRecord:
    """A cached Pod. It stores its cache key (`namespace/name`) rather than the name, so
    the informer's dict key and the record share one string (`name` is sliced from it
    when asked for: rare, for messages and Events), and its UID packed (`uid` unpacks)."""

    key: str
    namespace: str
    packed_uid: bytes | str
    labels: Mapping[str, str]
    hostname: str
    subdomain: str
    node_name: str
    service_account_name: str
    deleting: bool

    def __init__(
        self,
        namespace: str,
        name: str | None = None,
        uid: str = "",
        labels: Mapping[str, str] = _EMPTY,
        hostname: str = "",
        subdomain: str = "",
        node_name: str = "",
        service_account_name: str = "",
        deleting: bool = False,
        *,
        key: str | None = None,  # what dataclasses.replace passes back
        packed_uid: bytes | str | None = None,
    ) -> None:
        # Frozen: fields are set past the frozen `__setattr__`, one call each (this runs
        # once per Pod of the cluster at start-up).
        _set(self, "key", key if key is not None else _key(namespace, name or ""))
        _set(self, "namespace", namespace)
        _set(self, "packed_uid", packed_uid if packed_uid is not None else _pack_uid(uid))
        _set(self, "labels", labels)
        _set(self, "hostname", hostname)
        _set(self, "subdomain", subdomain)
        _set(self, "node_name", node_name)
        _set(self, "service_account_name", service_account_name)
        _set(self, "deleting", deleting)

    @property
    def name(self) -> str:
        return self.key[len(self.namespace) + 1 :] if self.namespace else self.key

    @property
    def uid(self) -> str:
        packed = self.packed_uid
        return str(uuid.UUID(bytes=packed)) if isinstance(packed, bytes) else packed


def _pack_uid(uid: str) -> bytes | str:
    """A canonical UUID (what kube-apiserver assigns: 8-4-4-4-12 lowercase hex) as its 16
    bytes (49 B instead of 85 B per Pod); anything else as it is. `PodRecord.uid` gives
    the same string back."""
    if len(uid) != 36 or not (uid[8] == uid[13] == uid[18] == uid[23] == "-"):
        return uid
    digits = uid[:8] + uid[9:13] + uid[14:18] + uid[19:23] + uid[24:]
    try:
        packed = bytes.fromhex(digits)
    except ValueError:
        return uid
    # fromhex also takes uppercase and spaces: only a string it gives back is canonical.
    return packed if len(packed) == 16 and packed.hex() == digits else uid


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    namespace: str
    name: str
    selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    type: str = "ClusterIP"
    cluster_ip: str = ""
    # `spec.clusterIPs` (both families on a dual-stack Service), for `--cluster-ip-sans`.
    cluster_ips: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return _key(self.namespace, self.name)

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"

    @property
    def virtual_ips(self) -> tuple[str, ...]:
        """The Service's cluster IPs: none for a headless or ExternalName Service."""
        if self.headless or self.type == "ExternalName":
            return ()
        ips = self.cluster_ips or ((self.cluster_ip,) if self.cluster_ip else ())
        return tuple(ip for ip in ips if ip and ip != "None")


@dataclass(frozen=True, slots=True)
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
    namespace = _name(meta.get("namespace"))
    return PodRecord(
        namespace=namespace,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        labels=frozen_map(meta.get("labels"), namespace),
        hostname=str(spec.get("hostname") or ""),
        subdomain=_name(spec.get("subdomain")),
        node_name=_name(spec.get("nodeName")),
        service_account_name=_name(spec.get("serviceAccountName") or "default"),
        deleting=bool(meta.get("deletionTimestamp")),
    )


# Each transform reads its kind's fields straight from the JSON: they run on every
# informer event, so no helper layer stands between.
def service_record(obj: JSON) -> ServiceRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    namespace = _name(meta.get("namespace"))
    return ServiceRecord(
        namespace=namespace,
        name=str(meta.get("name", "")),
        selector=frozen_map(spec.get("selector"), namespace),
        type=_name(spec.get("type") or "ClusterIP"),
        cluster_ip=str(spec.get("clusterIP") or ""),
        cluster_ips=tuple(str(ip) for ip in spec.get("clusterIPs") or ()),
    )


def pcr_record(obj: JSON) -> PCRRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    max_seconds = spec.get("maxExpirationSeconds")
    namespace = _name(meta.get("namespace"))
    terminal = terminal_condition(status)
    # A finished request is never decided again but stays cached until kube-apiserver
    # deletes it (15 minutes): it keeps no key material.
    pending = terminal is None
    return PCRRecord(
        namespace=namespace,
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        created=parse_time(meta.get("creationTimestamp")),
        signer_name=str(spec.get("signerName", "")),
        pod_name=str(spec.get("podName", "")),
        pod_uid=str(spec.get("podUID", "")),
        node_name=_name(spec.get("nodeName")),
        service_account_name=_name(spec.get("serviceAccountName")),
        max_expiration_seconds=int(max_seconds) if max_seconds is not None else None,
        stub_pkcs10=_bytes(spec.get("stubPKCS10Request")) if pending else None,
        pkix_public_key=_bytes(spec.get("pkixPublicKey")) if pending else None,
        annotations=frozen_map(spec.get("unverifiedUserAnnotations"), namespace),
        terminal=terminal,
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
