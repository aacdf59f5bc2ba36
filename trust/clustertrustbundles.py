"""The ClusterTrustBundle API as this project reads it: which version the server serves,
where the bundles are, and one signer's bundles — asked in one place by the process, the
managed CA, `status`, `ca status` and `bundle resolve`.

- `CTB_VERSIONS`: the versions asked for, in order (v1 first, then v1beta1: Kubernetes
  1.33+ and older betas); `served_version(client)`: the first one served, or None.
- `bundles_path(version)`: the collection (an informer's list/watch, a create).
- `signer_bundles(client, version, signer_name)`: the bundles linked to one signer, by
  the API's own field selector `spec.signerName` (never every signer's, filtered here).
- `signer_anchors(...)`: the fingerprints (`trust.bundle.fingerprint`) of every anchor
  those bundles publish; a bundle that cannot be read publishes nothing.
"""

from __future__ import annotations

from kube import discovery
from kube.client import ApiError, Client, path_segment
from kube.discovery import CERTIFICATES_GROUP
from kube.types import JSON
from trust.bundle import BundleError, fingerprints, unlinked_bundle_name

CTB_VERSIONS = ("v1", "v1beta1")
RESOURCE = "clustertrustbundles"


def served_version(client: Client) -> str | None:
    """The served ClusterTrustBundle version (`CTB_VERSIONS` in order), or None."""
    return discovery.served_version(client, CERTIFICATES_GROUP, RESOURCE, list(CTB_VERSIONS))


def bundles_path(version: str) -> str:
    return f"/apis/{CERTIFICATES_GROUP}/{path_segment(version)}/{RESOURCE}"


def signer_bundles(client: Client, version: str, signer_name: str) -> list[JSON]:
    """Every ClusterTrustBundle linked to `signer_name` (one LIST, server-side filtered).
    API errors raise."""
    listed = client.get(bundles_path(version), {"fieldSelector": f"spec.signerName={signer_name}"})
    return list(listed.get("items") or [])


def unlinked_bundle(client: Client, version: str, signer_name: str) -> JSON | None:
    """The signer's unlinked bundle (no `spec.signerName`, `--publish-unlinked-bundle`),
    read by name; None when there is none or the caller may not read it (a 403: then
    nothing is said of it). Any other refusal raises `ApiError`."""
    name = unlinked_bundle_name(signer_name)
    try:
        found = client.get(f"{bundles_path(version)}/{path_segment(name)}")
    except ApiError as err:
        if err.status in (403, 404):
            return None
        raise
    return found if (found.get("metadata") or {}).get("name") == name else None


def pem_of(bundle: JSON) -> str:
    """A bundle object's `spec.trustBundle`."""
    return str((bundle.get("spec") or {}).get("trustBundle", ""))


def anchors_of(pem: str) -> frozenset[str]:
    """The fingerprints of a published bundle's anchors; empty when it cannot be read."""
    try:
        return fingerprints(pem)
    except (BundleError, ValueError):
        return frozenset()


def signer_anchors(client: Client, version: str, signer_name: str) -> frozenset[str]:
    """The fingerprints of every anchor `signer_name`'s bundles publish."""
    return frozenset().union(
        *(anchors_of(pem_of(b)) for b in signer_bundles(client, version, signer_name))
    )
