"""Which version of an API group serves a resource, asked of the server's discovery.

What it decides: the first of the caller's `preferred` versions whose discovery
document (`GET /apis/<group>/<version>`, or `/api/v1` for the core group) lists
`resource`. A version the server does not serve answers 404 and is skipped; a version
that is served but lacks the resource is skipped too. Any other error is raised (the
caller decides whether to retry or fail start-up): "not served" and "could not ask"
must not look alike.

For ClusterTrustBundles (certificates: `trust/`) the question is asked by
`trust.clustertrustbundles.served_version`.
"""

from __future__ import annotations

from kube.client import Client, is_not_found

CERTIFICATES_GROUP = "certificates.k8s.io"


def served_version(client: Client, group: str, resource: str, preferred: list[str]) -> str | None:
    """The first version in `preferred` that serves `group`/`resource`, or None."""
    for version in preferred:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            doc = client.get(path)
        except Exception as err:
            if is_not_found(err):
                continue
            raise
        for entry in doc.get("resources") or []:
            if entry.get("name") == resource:
                return version
    return None
