"""Which version of an API group serves a resource, asked of the server's discovery.

What it decides: the first of the caller's `preferred` versions whose discovery
document (`GET /apis/<group>/<version>`, or `/api/v1` for the core group) lists
`resource`. A version the server does not serve answers 404 and is skipped; a version
that is served but lacks the resource is skipped too. Any other error is raised (the
caller decides whether to retry or fail start-up): "not served" and "could not ask"
must not look alike.

`bundle_version` is that question for ClusterTrustBundles, which the process and every
read-only command ask (v1 first, then v1beta1: Kubernetes 1.33+ and older betas).
"""

from __future__ import annotations

from kube.client import Client, is_not_found

CERTIFICATES_GROUP = "certificates.k8s.io"
CTB_VERSIONS = ("v1", "v1beta1")


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


def bundle_version(client: Client) -> str | None:
    """The served ClusterTrustBundle version (`CTB_VERSIONS` in order), or None."""
    return served_version(client, CERTIFICATES_GROUP, "clustertrustbundles", list(CTB_VERSIONS))
