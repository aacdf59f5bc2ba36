"""Which permission a read lacked, said the way `kubectl auth can-i` asks it.

`explain` and `status` run as whoever runs them — an application team with namespace
`view` plus the aggregated `service-serving-signer-view` role, or an administrator. A 403
is turned into the (verb, resource, namespace) that was refused, so the reader knows what
to ask for instead of a bare "forbidden".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kube.client import ApiError


@dataclass(frozen=True)
class Forbidden:
    verb: str
    resource: str
    group: str
    namespace: str  # "": cluster-scoped, or every namespace
    name: str = ""
    namespaced: bool = True

    @property
    def qualified(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource

    def can_i(self) -> str:
        """The `kubectl auth can-i` line that reproduces the check."""
        target = f"{self.qualified}/{self.name}" if self.name else self.qualified
        scope = f" -n {self.namespace}" if self.namespace else " -A" if self.namespaced else ""
        return f"kubectl auth can-i {self.verb} {target}{scope}"

    def __str__(self) -> str:
        if self.namespace:
            where = f"in namespace {self.namespace}"
        else:
            where = "in all namespaces" if self.namespaced else "(cluster-scoped)"
        what = f"{self.qualified} {self.name!r}" if self.name else self.qualified
        return f"forbidden: cannot {self.verb} {what} {where}"


def forbidden(
    verb: str, resource: str, group: str, namespace: str, name: str = "", *, namespaced: bool = True
) -> Forbidden:
    return Forbidden(verb, resource, group, namespace, name, namespaced)


class AccessDenied(RuntimeError):
    """A read that the answer needs was refused (403)."""

    def __init__(self, missing: Forbidden) -> None:
        self.missing = missing
        super().__init__(f"{missing} (check: {missing.can_i()})")


def denied_or_raise(
    err: ApiError, verb: str, resource: str, group: str, namespace: str, name: str = ""
) -> AccessDenied:
    """`AccessDenied` for a 403; any other error is re-raised."""
    if err.status != 403:
        raise err
    return AccessDenied(Forbidden(verb, resource, group, namespace, name))


# kube-apiserver's RBAC refusal: `… cannot list resource "pods" in API group "" in the
# namespace "shop"` (no namespace part for cluster-scoped or all-namespace requests).
_REFUSAL = re.compile(
    r'cannot (?P<verb>\S+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
    r'(?: in the namespace "(?P<namespace>[^"]+)")?'
)


def refusal(err: ApiError) -> AccessDenied | None:
    """The permission a 403 from any read names, or None for another error."""
    if err.status != 403:
        return None
    match = _REFUSAL.search(str(err.body.get("message") or ""))
    if match is None:
        return None
    details = err.body.get("details") or {}
    return AccessDenied(
        Forbidden(
            match["verb"],
            match["resource"],
            match["group"],
            match["namespace"] or "",
            str(details.get("name") or ""),
        )
    )
