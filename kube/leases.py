"""Leases (`coordination.k8s.io/v1`): where one lives, and one writer for a Lease that
reports something.

A Lease is the API's own "I am alive, and here is my state" object: `renewTime` and
`leaseDurationSeconds` say whether its writer still runs, annotations carry the state.
Leader election (`kube.leaderelection`) holds one; the injector's convergence report and
each managed-CA replica's report are written with `write_report`.

- `LeaseRef(namespace, name)`: `.path` (the object) and `.collection`.
- `leases_path(namespace)`: the collection, for a create or a labelled LIST.
- `write_report(client, ref, ...)`: create the Lease, or replace it under the
  resourceVersion just read, with the given holder, duration, renewTime, labels and
  annotations. The writer owns its whole Lease: annotations it no longer sends go.
- `renewal(lease, now)`: what a Lease says of its last renewal, judged on a reader's
  wall clock: holder, renewTime, duration, age, and `fresh` (renewTime +
  leaseDurationSeconds not yet past). For a reader that sees a Lease once (`status`,
  `explain`, a presence check); a controller that watches one judges on its own
  monotonic clock instead (`kube.leaderelection`, `managedca.report.Liveness`), so that
  clock skew cannot matter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kube.client import ApiError, Client, is_conflict, is_not_found, path_segment
from kube.times import micro_time, parse_time
from kube.types import JSON

API_VERSION = "coordination.k8s.io/v1"


def leases_path(namespace: str) -> str:
    """The Leases of `namespace` (the collection)."""
    return f"/apis/{API_VERSION}/namespaces/{path_segment(namespace)}/leases"


@dataclass(frozen=True)
class LeaseRef:
    """Where one Lease lives."""

    namespace: str
    name: str

    @property
    def collection(self) -> str:
        return leases_path(self.namespace)

    @property
    def path(self) -> str:
        return f"{leases_path(self.namespace)}/{path_segment(self.name)}"


def write_report(
    client: Client,
    ref: LeaseRef,
    *,
    holder: str,
    duration_seconds: int,
    now: datetime,
    annotations: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
) -> bool:
    """Create or renew the report Lease at `ref` (renewTime `now`). False when another
    writer changed or created it between our read and our write (a conflict: the next
    period writes again); API errors other than that raise."""
    metadata: JSON = {
        "name": ref.name,
        "namespace": ref.namespace,
        "annotations": dict(annotations),
    }
    if labels:
        metadata["labels"] = dict(labels)
    body: JSON = {
        "apiVersion": API_VERSION,
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_seconds,
            "renewTime": micro_time(now),
        },
    }
    try:
        current = client.get(ref.path)
    except ApiError as err:
        if not is_not_found(err):
            raise
        return _written(lambda: client.create(ref.collection, body))
    metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
    return _written(lambda: client.replace(ref.path, body))


def _written(write: Callable[[], object]) -> bool:
    try:
        write()
    except ApiError as err:
        if is_conflict(err):  # 409: changed since read, or created meanwhile
            return False
        raise
    return True


@dataclass(frozen=True)
class Renewal:
    """A Lease's last renewal as a reader judged it: who renewed it (`holder`, "" when
    released or never held), when (`renew_time`), for how long (`duration_seconds`),
    and how long before the reader's `now` (`age_seconds`); None where the Lease does
    not say."""

    holder: str = ""
    renew_time: datetime | None = None
    duration_seconds: float | None = None
    age_seconds: float | None = None

    @property
    def fresh(self) -> bool:
        """Renewed within its duration by the reader's clock: renewTime +
        leaseDurationSeconds is not yet past. A Lease without either is not fresh. Says
        nothing of the holder: a released Lease renewed a moment ago is fresh."""
        if self.age_seconds is None or self.duration_seconds is None:
            return False
        return self.age_seconds <= self.duration_seconds


def renewal(lease: Mapping[str, Any], now: datetime) -> Renewal:
    """Judge `lease` (a Lease object) at the reader's wall-clock `now`. Pure. A reader
    whose clock runs a duration ahead of the writer's sees a renewing Lease stale:
    callers show the age so that a person can tell."""
    spec: Mapping[str, Any] = lease.get("spec") or {}
    renew = parse_time(spec.get("renewTime"))
    raw = spec.get("leaseDurationSeconds")
    duration = float(raw) if isinstance(raw, int | float) else None
    age = (now - renew).total_seconds() if renew is not None else None
    return Renewal(str(spec.get("holderIdentity") or ""), renew, duration, age)
