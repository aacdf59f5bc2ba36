"""Where the revoked roots are remembered beyond the CA Secret: an annotation on the
signer's stable ClusterTrustBundle (`<signer>:trust-anchors`, `layout.REVOKED_ROOTS`).

Why there (docs/managed-ca.md "Revoked roots"): the Secret can move backwards (a Velero
or namespace restore, a GitOps re-apply of an exported copy), and with it its
`ca-revoked` annotation; a revoked root must still never sign nor be published again,
after a restart of every replica too. The stable bundle is cluster-scoped (a namespace
restore does not touch it), the publisher updates it in place keeping its annotations and
never deletes it, every replica may already read it, and the leader may already update
it (the publisher's Role). A separate namespaced object would be restored with the
Secret; a Velero restore of the whole cluster skips objects that exist.

Written by the leader (`remember`) whenever the state revokes a root the annotation lacks
(right after an emergency's write, and on any later step until it lands); read by every
replica's material source on each Secret it applies (`read`), and by the leader from the
bundles it lists anyway (`of`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kube.client import ApiError, Client, is_not_found, path_segment
from managedca.codec import ca_info
from managedca.decide import CaInfo, State
from managedca.layout import INJECTOR_SEEN, REVOKED_ROOTS, split_pem


def of(bundle: Mapping[str, Any] | None) -> frozenset[str]:
    """The revoked fingerprints a ClusterTrustBundle's annotation lists."""
    annotations = ((bundle or {}).get("metadata") or {}).get("annotations") or {}
    text = str(annotations.get(REVOKED_ROOTS) or "")
    return frozenset(f.strip().lower() for f in text.split(",") if f.strip())


def read(client: Client, path: str) -> frozenset[str]:
    """What the stable bundle at `path` remembers (none when it does not exist yet)."""
    return read_stable(client, path)[0]


def read_stable(client: Client, path: str) -> tuple[frozenset[str], tuple[CaInfo, ...]]:
    """The revoked roots the stable bundle at `path` remembers, and the roots it publishes
    (what consumers trust now: a replica started after a restore must not drop one). Both
    empty when it does not exist yet; an unreadable bundle publishes nothing."""
    try:
        bundle = client.get(path)
    except ApiError as err:
        if is_not_found(err):
            return frozenset(), ()
        raise
    pem = str((bundle.get("spec") or {}).get("trustBundle") or "")
    roots: list[CaInfo] = []
    for cert in split_pem(pem.encode()):
        try:
            roots.append(ca_info(cert))
        except ValueError:
            continue
    return of(bundle), tuple(roots)


def injector_seen(bundle: Mapping[str, Any] | None) -> bool:
    """Whether the stable bundle remembers that a leader saw the injector's report."""
    annotations = ((bundle or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(INJECTOR_SEEN) == "true"


def remember(
    client: Client,
    collection: str,
    bundle: Mapping[str, Any],
    revoked: Iterable[str],
    *,
    seen_injector: bool = False,
) -> None:
    """Add `revoked` to `bundle`'s annotation (and, with `seen_injector`, that the
    injector's report was seen): a conditional replace (its resourceVersion), so the
    publisher's concurrent update of its anchors is never lost; a conflict is retried by
    the next step."""
    meta = dict(bundle.get("metadata") or {})
    merged = of(bundle) | frozenset(revoked)
    annotations = dict(meta.get("annotations") or {})
    if merged:
        annotations[REVOKED_ROOTS] = ",".join(sorted(merged))
    if seen_injector:
        annotations[INJECTOR_SEEN] = "true"
    meta["annotations"] = annotations
    version = collection.rstrip("/").split("/")[-2]  # /apis/certificates.k8s.io/<v>/...
    body = {
        **bundle,
        "apiVersion": f"certificates.k8s.io/{version}",
        "kind": "ClusterTrustBundle",
        "metadata": meta,
    }
    client.replace(f"{collection}/{path_segment(str(meta['name']))}", body)


def wanted(state: State) -> frozenset[str]:
    """What `state` revokes, or asks to (`ca rotate --emergency` pending: remembered before
    the emergency is written, so a restore in between cannot lose it)."""
    requested: frozenset[str] = frozenset()
    if state.emergency_requested_at is not None:
        requested = state.revoke or frozenset({state.current.fingerprint})
        if state.current.fingerprint in requested and state.next is not None:
            # The emergency revokes the staged CA too (its key sat beside the
            # compromised one): remembered before the write as well, so a Secret deleted
            # right after the emergency cannot bring it back as an adopted root.
            requested |= {state.next.fingerprint}
    return state.revoked | requested
