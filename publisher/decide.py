"""What one publisher sync writes (`plan`), from the trust bundle and the cached
ClusterTrustBundles of our signer, before anything is written. Pure: the controller
reads, `plan` decides, the controller acts in the plan's order (docs/reference.md §4;
the rules are the controller module's docstring, points 1-4):

1. the hash-named bundle of our content: `Create` when missing, `Replace` when edited;
2. the stable bundle, holding our anchors and those of the bundles kept by point 4;
3. every other bundle of our signer is `stale`, to be deleted once the stable bundle's
   write went through;
4. but another replica's newer bundle holding an anchor our file lacks is `kept`, unless
   it holds a root revoked for good (the stable bundle's `REVOKED_ROOTS_ANNOTATION`);
5. opt-in (`Unlinked`): the unlinked bundle — no `spec.signerName`, a colon-free name —
   holding what the stable bundle holds, written right after it; when not opted in, one
   we published before is deleted with the stale ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from kube.times import parse_time
from kube.types import JSON
from trust.bundle import (
    BundleError,
    TrustBundle,
    anchor_ders,
    bundle_name,
    earliest_expiry,
    encode_pem,
    fingerprints,
    normalize_bundle,
    stable_bundle_name,
)

GROUP = "certificates.k8s.io"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "service-serving-signer"
PUBLISHED_BY_ANNOTATION = "service-serving-signer/published-by"
REVOKED_ROOTS_ANNOTATION = "service-serving-signer/revoked-roots"
"""On the stable bundle: the sha256 fingerprints of roots revoked for good (the managed
CA writes it, `managedca.layout.REVOKED_ROOTS`). Another replica's bundle holding one is
never kept: a lagging publisher must not keep a revoked root published."""


@dataclass(frozen=True)
class Create:
    """Create bundle `name` as `body`. `hashed`: the hash-named bundle (an AlreadyExists is
    our cache lagging our own create); else the stable one (its event reconciles)."""

    name: str
    body: JSON
    hashed: bool


@dataclass(frozen=True)
class Replace:
    """Replace bundle `name` with `body` (the cached object restored: conditional on its
    resourceVersion). `hashed` as for `Create`: a stable replace that conflicts defers the
    deletes to the event of the newer version."""

    name: str
    body: JSON
    hashed: bool


@dataclass(frozen=True)
class Delete:
    """Delete the stale bundle `name`, on the condition `body` (its UID, when known)."""

    name: str
    body: JSON | None


Op = Create | Replace | Delete


@dataclass(frozen=True)
class Unlinked:
    """The unlinked bundle `name` (`trust.bundle.unlinked_bundle_name`) and its cached
    object, if any: `publish` it (point 5), or, when not, delete it if it is ours."""

    name: str
    current: JSON | None
    publish: bool


@dataclass(frozen=True)
class Plan:
    """One sync's writes in order: the hash-named bundle, the stable bundle, then the
    stale bundles' deletes (carried out only once the stable bundle's write went through).
    `kept` names the bundles point 4 keeps; `digest` and `expiry` describe our trust
    bundle (for the warning and the gauge)."""

    ops: tuple[Op, ...]
    kept: frozenset[str]
    digest: str
    expiry: datetime


def plan(
    bundle: TrustBundle,
    cached: Iterable[JSON],
    *,
    signer_name: str,
    publisher_id: str,
    api_version: str,
    unlinked: Unlinked | None = None,
) -> Plan:
    """What to write so our signer's bundles (and, with `unlinked`, that one) hold
    `bundle` (see the module docstring)."""
    name, ours, digest, expiry = (
        bundle_name(signer_name, bundle.pem),
        anchor_ders(bundle.pem),
        bundle.digest,
        earliest_expiry(bundle.pem),
    )
    by_name = {_name(obj): obj for obj in cached if _signer(obj) == signer_name}
    stable_name = stable_bundle_name(signer_name)
    revoked = _revoked(by_name.get(stable_name))
    kept: list[JSON] = []
    stale: list[JSON] = []
    for other, obj in by_name.items():
        if other in (name, stable_name):
            continue
        newer = _another_replicas_newer(obj, ours, bundle.modified, publisher_id)
        (kept if newer and not _holds(obj, revoked) else stale).append(obj)
    meta = _Meta(signer_name, publisher_id, f"{GROUP}/{api_version}")
    union = _union(ours, kept)
    writes = [
        meta.write(name, by_name.get(name), bundle.pem, hashed=True),
        meta.write(stable_name, by_name.get(stable_name), union, hashed=False),
    ]
    if unlinked is not None and unlinked.publish:
        writes.append(
            meta.write(unlinked.name, unlinked.current, union, hashed=False, linked=False)
        )
    elif unlinked is not None and unlinked.current is not None and _ours(unlinked.current):
        stale.append(unlinked.current)
    return Plan(
        ops=(*(w for w in writes if w is not None), *(_delete(obj) for obj in stale)),
        kept=frozenset(_name(obj) for obj in kept),
        digest=digest,
        expiry=expiry,
    )


@dataclass(frozen=True)
class _Meta:
    """What every bundle we write carries."""

    signer_name: str
    publisher_id: str
    api_version: str

    def write(
        self, name: str, current: JSON | None, pem: str, *, hashed: bool, linked: bool = True
    ) -> Op | None:
        """`linked`: with our `spec.signerName` (every bundle but the unlinked one)."""
        if current is None:
            metadata: JSON = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY}}
            if hashed:
                metadata["annotations"] = {PUBLISHED_BY_ANNOTATION: self.publisher_id}
            signer = {"signerName": self.signer_name} if linked else {}
            spec = {**signer, "trustBundle": pem}
            return Create(name, self._object(metadata, spec), hashed)
        if up_to_date(current, pem):
            return None
        metadata = dict(current.get("metadata") or {})
        metadata["labels"] = {**(metadata.get("labels") or {}), MANAGED_BY_LABEL: MANAGED_BY}
        if hashed:
            metadata["annotations"] = {
                **(metadata.get("annotations") or {}),
                PUBLISHED_BY_ANNOTATION: self.publisher_id,
            }
        spec = {**(current.get("spec") or {}), "trustBundle": pem}
        return Replace(name, {**current, **self._object(metadata, spec)}, hashed)

    def _object(self, metadata: JSON, spec: JSON) -> JSON:
        return {
            "apiVersion": self.api_version,
            "kind": "ClusterTrustBundle",
            "metadata": metadata,
            "spec": spec,
        }


def _delete(obj: JSON) -> Delete:
    uid = (obj.get("metadata") or {}).get("uid")
    if not uid:
        return Delete(_name(obj), None)
    return Delete(
        _name(obj), {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
    )


def up_to_date(obj: JSON, pem: str) -> bool:
    """`obj` holds exactly `pem` and carries our managed-by label."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(
        (obj.get("spec") or {}).get("trustBundle") == pem
        and labels.get(MANAGED_BY_LABEL) == MANAGED_BY
    )


def _ours(obj: JSON) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


def _another_replicas_newer(
    obj: JSON, ours: frozenset[bytes], modified: datetime, publisher_id: str
) -> bool:
    """Another replica's bundle published from a newer file than ours (point 4)."""
    metadata = obj.get("metadata") or {}
    if (metadata.get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGED_BY:
        return False
    if (metadata.get("annotations") or {}).get(PUBLISHED_BY_ANNOTATION) == publisher_id:
        return False
    created = parse_time(metadata.get("creationTimestamp"))
    # creationTimestamp has whole seconds: compare with the mtime's second.
    if created is None or created < modified.replace(microsecond=0):
        return False
    try:
        theirs = anchor_ders(_pem(obj))
    except BundleError:
        return False
    return bool(theirs - ours)


def _revoked(stable: JSON | None) -> frozenset[str]:
    annotations = ((stable or {}).get("metadata") or {}).get("annotations") or {}
    text = str(annotations.get(REVOKED_ROOTS_ANNOTATION) or "")
    return frozenset(f.strip().lower() for f in text.split(",") if f.strip())


def _holds(obj: JSON, revoked: frozenset[str]) -> bool:
    """Whether the bundle `obj` holds a root listed in `revoked` (an unreadable one: no)."""
    if not revoked:
        return False
    try:
        return bool(fingerprints(_pem(obj)) & revoked)
    except BundleError:
        return False


def _union(ours: frozenset[bytes], kept: list[JSON]) -> str:
    """What the stable bundle holds: our anchors and those of the bundles point 4 keeps
    (just ours if the union would not fit in one ClusterTrustBundle)."""
    pem = "".join(encode_pem(der) for der in ours)
    try:
        return normalize_bundle(pem + "".join(_pem(obj) for obj in kept))
    except BundleError:
        return normalize_bundle(pem)


def _pem(obj: JSON) -> str:
    return str((obj.get("spec") or {}).get("trustBundle") or "")


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _signer(obj: JSON) -> str:
    return str((obj.get("spec") or {}).get("signerName", ""))
