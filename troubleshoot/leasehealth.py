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
* **Presence.** Every process running the signer controller — leader or standby, with
  leader election on or off — renews one presence Lease beside the leader Lease
  (`signer.presence`, `kube.presence`): `alive` while renewed within its duration,
  `expired` when every process stopped renewing it, `missing` when no signer of this
  version ran there, `unknown` (the missing permission said) when we may not read it.
  Whether a signer **acts** (`Health.acting`): the leader Lease renewing; else, with
  leader election off (the presence says so), a live presence; else, when the presence
  is readable, nothing acts — a process that runs but does not lead acts on nothing, and
  with no live presence no signer runs at all. With the presence unreadable, the leader
  Lease alone decides when it says someone renews, and otherwise nothing is concluded
  here (`troubleshoot.explain` then looks for traces of a signer acting).
* **Bundle.** The publisher (the same process) keeps the signer's ClusterTrustBundles (a
  hash-named one and the stable `<prefix>:trust-anchors`). None published means clients
  that trust through a `clusterTrustBundle` projection cannot verify what is issued; it
  does not stop issuance. The CA expiry shown
  is the earliest `notAfter` among the published anchors. With `--publish-unlinked-bundle`
  the publisher also keeps a bundle without `spec.signerName` (`<signer with ".">.trust-
  anchors`, read by name): it is named, and an anchor the signer's bundles hold but it does
  not yet is said (a managed-CA swap waits for it).
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
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from kube import presence as kube_presence
from kube.client import ApiError, Client, is_not_found
from kube.leases import LeaseRef, Renewal, leases_path, renewal
from kube.presence import Presence
from kube.times import parse_time
from kube.types import JSON
from managedca.report import REPORT_LABEL, leading_decision, parse_report
from signer import presence as signer_presence
from troubleshoot.access import Forbidden, forbidden
from trust.bundle import BundleError, normalize_bundle, parse_anchors
from trust.clustertrustbundles import signer_bundles, unlinked_bundle

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
    renewal: Renewal = field(default_factory=Renewal)  # by our clock
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
    # The unlinked bundle's name when published, and the anchors above it lacks.
    unlinked: str | None = None
    unlinked_lacks: tuple[Anchor, ...] = ()

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
    # Why the managed CA signs nothing now, and until when if known (`castatus`'s words).
    paused: str | None = None
    paused_until: datetime | None = None


@dataclass(frozen=True)
class PresenceState:
    """The signer's presence Lease as read: `presence` None when `problem` says why."""

    namespace: str
    name: str
    presence: Presence | None
    problem: Forbidden | None = None
    signer_name: str = ""  # the signer name we look for

    @property
    def alive(self) -> bool | None:
        """A process of this signer renews it; None: we cannot tell."""
        if self.presence is None:
            return None
        return self.presence.alive and self.serves_us

    @property
    def serves_us(self) -> bool:
        """The last renewer serves our signer name (an absent annotation: assumed)."""
        if self.presence is None:
            return False
        served = self.presence.annotations.get(signer_presence.SIGNER_NAME)
        return served is None or served == self.signer_name

    @property
    def leader_elect(self) -> bool | None:
        if self.presence is None or signer_presence.LEADER_ELECT not in self.presence.annotations:
            return None
        return self.presence.annotations[signer_presence.LEADER_ELECT] == "true"


@dataclass(frozen=True)
class Health:
    signer_name: str
    lease: LeaseState
    bundle: BundleState
    material: Anchor | None = None  # the signing certificate seen in an issued chain
    managed_ca: ManagedCA | None = None
    presence: PresenceState | None = None

    @property
    def acting(self) -> bool | None:
        """Whether a signer acts on requests: True, False, or None when we cannot tell
        (module docstring, "Presence")."""
        if self.lease.acting:
            return True
        presence = self.presence
        if presence is None or presence.alive is None:
            return None
        if presence.alive and presence.leader_elect is False:
            return True
        if presence.alive and self.lease.acting is None:
            return None  # alive, electing, and the leader Lease unreadable
        return False

    @property
    def presence_missing(self) -> bool:
        """The presence Lease does not exist (a signer older than the presence report may
        still run: its traces count)."""
        found = self.presence.presence if self.presence is not None else None
        return found is not None and found.state is kube_presence.PresenceVerdict.MISSING


def lease_state(namespace: str, name: str, lease: JSON | None, now: datetime) -> LeaseState:
    """Classify a Lease object (None: it does not exist). Pure."""
    if lease is None:
        return LeaseState(namespace, name, Leader.MISSING)
    spec: Mapping[str, Any] = lease.get("spec") or {}
    renewed = renewal(lease, now)
    if not renewed.holder:
        leader = Leader.RELEASED
    elif not renewed.fresh:
        leader = Leader.EXPIRED
    else:
        leader = Leader.RENEWING
    transitions = spec.get("leaseTransitions")
    return LeaseState(
        namespace,
        name,
        leader,
        renewed,
        acquire_time=parse_time(spec.get("acquireTime")),
        transitions=int(transitions) if isinstance(transitions, int) else None,
    )


def _certs(item: JSON) -> list[x509.Certificate]:
    try:
        return parse_anchors(normalize_bundle(str((item.get("spec") or {}).get("trustBundle"))))
    except BundleError:
        return []


def bundle_state(items: Sequence[JSON], unlinked: JSON | None = None) -> BundleState:
    """The signer's ClusterTrustBundles → names and CA anchors; with `unlinked` (the
    signer-less bundle, when published) its name and the anchors it lacks. Pure."""
    names: list[str] = []
    anchors: dict[bytes, Anchor] = {}
    for item in items:
        names.append(str((item.get("metadata") or {}).get("name", "")))
        # Each anchor once, as a signerName projection has it (kubelet de-duplicates; the
        # stable bundle repeats the hash-named ones').
        for cert in _certs(item):
            anchors.setdefault(cert.public_bytes(Encoding.DER), describe_anchor(cert))
    state = BundleState(tuple(sorted(names)), tuple(anchors.values()))
    if unlinked is None:
        return state
    held = {cert.public_bytes(Encoding.DER) for cert in _certs(unlinked)}
    return replace(
        state,
        unlinked=str((unlinked.get("metadata") or {}).get("name", "")),
        unlinked_lacks=tuple(a for der, a in anchors.items() if der not in held),
    )


def describe_anchor(cert: x509.Certificate) -> Anchor:
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
            listed = signer_bundles(client, bundle_version, signer_name)
        except ApiError as err:
            if err.status != 403:
                raise
            bundle = BundleState(
                problem=forbidden(
                    "list", "clustertrustbundles", "certificates.k8s.io", "", namespaced=False
                )
            )
        else:
            bundle = bundle_state(listed, unlinked_bundle(client, bundle_version, signer_name))
    return Health(
        signer_name,
        lease,
        bundle,
        managed_ca=_read_managed_ca(client, lease),
        presence=read_presence(client, lease_namespace, lease_name, signer_name, now),
    )


def read_presence(
    client: Client, namespace: str, lease_name: str, signer_name: str, now: datetime
) -> PresenceState:
    """The presence Lease beside leader Lease `lease_name`; a 403 names the permission."""
    name = signer_presence.presence_name(lease_name)
    try:
        found = kube_presence.read(client, namespace, name, now)
    except ApiError as err:
        if err.status != 403:
            raise
        problem = forbidden("get", "leases", "coordination.k8s.io", namespace, name)
        return PresenceState(namespace, name, None, problem, signer_name)
    return PresenceState(namespace, name, found, None, signer_name)


def _read_managed_ca(client: Client, lease: LeaseState) -> ManagedCA | None:
    try:
        listed = client.get(
            leases_path(lease.namespace),
            {"labelSelector": REPORT_LABEL},
        )
    except ApiError as err:
        if err.status in (403, 404):
            return None
        raise
    return managed_ca_state(listed.get("items") or [], lease.renewal.holder)


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
    from managedca.status import Decision
    from troubleshoot.castatus import issuance_pause

    read = Decision.from_json(decision)
    paused, until = issuance_pause(read) if read is not None else (None, None)
    return ManagedCA(
        phase=_text(decision.get("phase")),
        step=None if waiting else _text(decision.get("step")),
        waiting=_text(waiting),
        since=parse_time(decision.get("since")) if waiting else None,
        decided_by=chosen.replica,
        by_leader=by_leader,
        paused=paused,
        paused_until=parse_time(until) if until else None,
    )


def _text(value: object) -> str | None:
    return str(value) if value else None


def _read_lease(client: Client, namespace: str, name: str, now: datetime) -> LeaseState:
    try:
        raw = client.get(LeaseRef(namespace, name).path)
    except ApiError as err:
        if is_not_found(err):
            return lease_state(namespace, name, None, now)
        if err.status != 403:
            raise
        problem = forbidden("get", "leases", "coordination.k8s.io", namespace, name)
        return LeaseState(namespace, name, Leader.UNKNOWN, problem=problem)
    return lease_state(namespace, name, raw, now)
