"""Is anything going to act on a request: the signer's health as the cluster shows it.

What it decides, for `explain` and `status` (read-only, from the API server):

* **Leader.** The signer acts only while a replica holds its leader Lease
  (`run --leader-elect`). The Lease says `renewing` when `holderIdentity` is set and
  `renewTime + leaseDurationSeconds` is still ahead of our clock, `expired` when the
  holder stopped renewing (killed, hung, partitioned), `released` when a replica handed it
  back on shutdown and none took it (`holderIdentity: ""`), `missing` when no replica ever
  ran with that Lease name, and `unknown` when we may not read it — then which permission
  is missing is said, and nothing is concluded. The clocks compared are the signer's
  (`renewTime`) and ours: a clock more than a Lease duration (15 s) ahead of the signer's
  would report `expired` wrongly; the age is shown so a reader can tell.
* **Bundle.** The publisher (the same process) keeps the signer's ClusterTrustBundles (a
  hash-named one and the stable `<prefix>:trust-anchors`). None published means clients
  that trust through a `clusterTrustBundle` projection cannot verify what is issued; it
  does not stop issuance. The CA expiry shown
  is the earliest `notAfter` among the published anchors.
* **Managed CA.** In managed mode each replica keeps a report Lease beside the leader
  Lease (`managedca.report`), and the leader's carries its last decision: the phase and
  what the rotation does next or waits for. Shown when such reports exist and we may
  list Leases there; a 403 on the list shows nothing (`ca status` says more, and why).
* **Material in use.** The signing certificate is not visible through the API except in
  what it signed: `status` passes the chain of the newest issued request it saw.

Nothing here decides about one request; `troubleshoot.explain` combines the two.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.times import parse_time
from kube.types import JSON
from managedca.report import REPORT_LABEL, leading_decision, parse_report
from troubleshoot.access import Forbidden, forbidden
from trust.bundle import BundleError, normalize_bundle, parse_anchors

DEFAULT_LEASE_NAMESPACE = "service-serving-signer"
DEFAULT_LEASE_NAME = "service-serving-signer"


class Leader(enum.Enum):
    RENEWING = "renewing"
    EXPIRED = "expired"
    RELEASED = "released"
    MISSING = "missing"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class LeaseState:
    namespace: str
    name: str
    leader: Leader
    holder: str = ""
    renew_time: datetime | None = None
    duration_seconds: float | None = None
    age_seconds: float | None = None  # since renewTime, by our clock
    problem: Forbidden | None = None
    acquire_time: datetime | None = None  # when the holder took it
    transitions: int | None = None  # leaseTransitions: leader changes so far

    @property
    def acting(self) -> bool | None:
        """True when a signer is leading, False when none is, None when we cannot tell."""
        if self.leader is Leader.UNKNOWN:
            return None
        return self.leader is Leader.RENEWING


@dataclass(frozen=True)
class Anchor:
    subject: str
    not_after: datetime


@dataclass(frozen=True)
class BundleState:
    names: tuple[str, ...] = ()
    anchors: tuple[Anchor, ...] = ()
    problem: Forbidden | None = None

    @property
    def published(self) -> bool | None:
        return None if self.problem is not None else bool(self.names)

    @property
    def ca_not_after(self) -> datetime | None:
        return min((a.not_after for a in self.anchors), default=None)


@dataclass(frozen=True)
class ManagedCA:
    """The managed CA's last decision, as the leader (or the newest report) published it."""

    phase: str | None
    step: str | None  # the next step, when not waiting
    waiting: str | None  # the reason it waits for, when it waits
    since: datetime | None
    decided_by: str
    by_leader: bool


@dataclass(frozen=True)
class Health:
    signer_name: str
    lease: LeaseState
    bundle: BundleState
    material: Anchor | None = None  # the signing certificate seen in an issued chain
    managed_ca: ManagedCA | None = None


def lease_state(namespace: str, name: str, lease: JSON | None, now: datetime) -> LeaseState:
    """Classify a Lease object (None: it does not exist). Pure."""
    if lease is None:
        return LeaseState(namespace, name, Leader.MISSING)
    spec: Mapping[str, Any] = lease.get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    renew = parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    seconds = float(duration) if isinstance(duration, int | float) else None
    age = (now - renew).total_seconds() if renew is not None else None
    if not holder:
        leader = Leader.RELEASED
    elif age is None or seconds is None or age > seconds:
        leader = Leader.EXPIRED
    else:
        leader = Leader.RENEWING
    transitions = spec.get("leaseTransitions")
    return LeaseState(
        namespace,
        name,
        leader,
        holder,
        renew,
        seconds,
        age,
        acquire_time=parse_time(spec.get("acquireTime")),
        transitions=int(transitions) if isinstance(transitions, int) else None,
    )


def bundle_state(items: Sequence[JSON]) -> BundleState:
    """The signer's ClusterTrustBundles → names and CA anchors. Pure."""
    names: list[str] = []
    anchors: list[Anchor] = []
    seen: set[bytes] = set()
    for item in items:
        names.append(str((item.get("metadata") or {}).get("name", "")))
        try:
            certs = parse_anchors(
                normalize_bundle(str((item.get("spec") or {}).get("trustBundle")))
            )
        except BundleError:
            continue
        # Each anchor once, as a signerName projection has it (kubelet de-duplicates; the
        # stable bundle repeats the hash-named ones').
        for cert in certs:
            der = cert.public_bytes(Encoding.DER)
            if der not in seen:
                seen.add(der)
                anchors.append(describe(cert))
    return BundleState(tuple(sorted(names)), tuple(anchors))


def describe(cert: x509.Certificate) -> Anchor:
    return Anchor(cert.subject.rfc4514_string(), cert.not_valid_after_utc)


def read_health(
    client: Client,
    *,
    signer_name: str,
    bundle_version: str | None,
    lease_namespace: str,
    lease_name: str,
    now: datetime | None = None,
) -> Health:
    """Read the Lease and the signer's bundles. A 403 on either becomes an `unknown`
    with the missing permission; other API errors propagate."""
    now = now or datetime.now(UTC)
    lease = _read_lease(client, lease_namespace, lease_name, now)
    if bundle_version is None:
        bundle = BundleState()
    else:
        try:
            listed = client.get(
                f"/apis/certificates.k8s.io/{bundle_version}/clustertrustbundles",
                {"fieldSelector": f"spec.signerName={signer_name}"},
            )
        except ApiError as err:
            if err.status != 403:
                raise
            bundle = BundleState(
                problem=forbidden(
                    "list", "clustertrustbundles", "certificates.k8s.io", "", namespaced=False
                )
            )
        else:
            bundle = bundle_state(listed.get("items") or [])
    return Health(signer_name, lease, bundle, managed_ca=_read_managed_ca(client, lease))


def _read_managed_ca(client: Client, lease: LeaseState) -> ManagedCA | None:
    try:
        listed = client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(lease.namespace)}/leases",
            {"labelSelector": REPORT_LABEL},
        )
    except ApiError as err:
        if err.status in (403, 404):
            return None
        raise
    return managed_ca_state(listed.get("items") or [], lease.holder)


def managed_ca_state(leases: Sequence[JSON], holder: str) -> ManagedCA | None:
    """The decision to show from the report Leases (None: no managed CA reports). Pure."""
    reports = [r for lease in leases if (r := parse_report(lease)) is not None]
    chosen, by_leader = leading_decision(reports, holder or None)
    if chosen is None or chosen.decision is None:
        return None
    decision = chosen.decision
    waiting = decision.get("reason") or (
        decision.get("why") if decision.get("step") == "Wait" else None
    )
    return ManagedCA(
        phase=_text(decision.get("phase")),
        step=None if waiting else _text(decision.get("step")),
        waiting=_text(waiting),
        since=parse_time(decision.get("since")) if waiting else None,
        decided_by=chosen.replica,
        by_leader=by_leader,
    )


def _text(value: object) -> str | None:
    return str(value) if value else None


def _read_lease(client: Client, namespace: str, name: str, now: datetime) -> LeaseState:
    try:
        raw = client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(namespace)}"
            f"/leases/{path_segment(name)}"
        )
    except ApiError as err:
        if is_not_found(err):
            return lease_state(namespace, name, None, now)
        if err.status != 403:
            raise
        problem = forbidden("get", "leases", "coordination.k8s.io", namespace, name)
        return LeaseState(namespace, name, Leader.UNKNOWN, problem=problem)
    return lease_state(namespace, name, raw, now)
