"""What `ca status` shows of a managed CA (`cli/ca.py` prints it): read with the caller's
kubeconfig from the replicas' report Leases (the leader's carries its last decision,
`managedca.status.Decision`), the leader-election Lease and the published
ClusterTrustBundles — never the CA Secret, so `get`/`list` on Leases and `list` on
ClusterTrustBundles suffice. It shows what the leader decided, not a second decision of
its own: the leader, the phase, the current / next / previous CAs (fingerprint, validity;
never a key), the roots revoked by `ca rotate --emergency` and one still requested,
whether issuance is paused (and why), the times of the rotation under way, each replica's
report, and what the rotation waits for, since and until when.

`collect` reads; `CaStatus` is the typed result; `to_json` is `-o json`; `lines` is the
text, with relative times beside the absolute ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from kube.times import parse_time, span

if TYPE_CHECKING:
    from kube.client import Client
    from managedca.report import ReplicaReport
    from managedca.status import Decision


class CaStatusError(Exception):
    """What `ca status` cannot read, other than an API refusal: one line."""


@dataclass(frozen=True)
class LeaderView:
    lease: str
    identity: str | None
    renew_time: str | None
    duration: float
    held: bool
    renewed_seconds_ago: float | None


@dataclass(frozen=True)
class CaRow:
    role: str  # current, next, previous
    fingerprint: str
    not_before: str
    not_after: str
    published: bool
    retire_at: str | None = None


@dataclass(frozen=True)
class ReplicaRow:
    replica: str
    live: bool
    loaded_next: bool
    signing: str | None
    ready: str | None


@dataclass(frozen=True)
class Waiting:
    reason: str | None
    why: str | None
    until: str | None
    since: str | None


@dataclass(frozen=True)
class CaStatus:
    secret: str
    leader: LeaderView | None
    phase: str | None
    cas: tuple[CaRow, ...]
    times: tuple[tuple[str, str], ...]
    replicas: tuple[ReplicaRow, ...]
    published: tuple[str, ...]
    revoked: tuple[str, ...] = ()
    revoke_requested: tuple[str, ...] = ()  # a pending `ca rotate --emergency`
    revoke_requested_at: str | None = None
    paused: str | None = None  # why no certificate is issued now, or None
    decided_by: str | None = None
    decided_at: str | None = None
    decided_by_leader: bool = False
    waiting: Waiting | None = None
    next_step: str | None = None
    stable_bundle: str | None = None
    # With --publish-unlinked-bundle: the signer-less bundle's name, and the published
    # anchors (fingerprints) it does not hold yet — the managed CA counts a root as
    # published only once it does. None: not published.
    unlinked_bundle: str | None = None
    unlinked_lacks: tuple[str, ...] = ()
    # The running signer's --ca-mode, as its presence Lease says ("file", "managed"), or
    # None when no signer says (none runs, or one older than the annotation).
    ca_mode: str | None = None
    signer_running: bool | None = None  # its presence Lease is renewed; None: unreadable
    # `ca skip-consumers` (or a bare annotation): the CA whose swap does not wait for the
    # injector, and who asked, as the leader states it ("unknown": not the CLI).
    consumers_skipped: tuple[str, str] | None = None
    # With a file-mode signer running: the managed-CA report Leases found (none leads).
    idle_reports: int = 0


def collect(
    client: Client,
    namespace: str,
    secret_name: str,
    signer_name: str,
    lease_name: str,
    now: datetime,
) -> CaStatus:
    """Read what `ca status` shows. Raises `ApiError` when the API refuses a read (the
    CLI words it), `CaStatusError` when the cluster serves no ClusterTrustBundles."""
    from managedca.report import list_reports, parse_report
    from trust.bundle import stable_bundle_name, unlinked_bundle_name

    listed = list_reports(client, namespace, secret_name)
    leases = [parsed for lease in listed if (parsed := parse_report(lease)) is not None]
    leader = _leader(client, namespace, lease_name)
    published, version = _published(client, signer_name)
    unlinked = _unlinked_anchors(client, version, signer_name)
    where = f"{namespace}/{secret_name}"
    status = status_of(leases, leader, published, now, where)
    running, mode = _presence(client, namespace, lease_name, now)
    if running and mode == "file" and not status.decided_by_leader:
        # A file-mode signer leads and reports nothing: the reports are of managed
        # replicas that do not lead (a rollout to managed mode under way), or left behind
        # by a former managed install whose replicas could not delete them (a Helm move
        # back to file mode removes their Role first). Their decision is not the signer's.
        status = replace(status_of([], leader, published, now, where), idle_reports=len(listed))
    return replace(
        status,
        stable_bundle=stable_bundle_name(signer_name),
        ca_mode=mode,
        signer_running=running,
        unlinked_bundle=None if unlinked is None else unlinked_bundle_name(signer_name),
        unlinked_lacks=() if unlinked is None else tuple(p for p in published if p not in unlinked),
    )


def _presence(
    client: Client, namespace: str, lease_name: str, now: datetime
) -> tuple[bool | None, str | None]:
    """Whether a signer process runs (its presence Lease is renewed) and the --ca-mode
    its last renewer runs with; (None, None) when the Lease may not be read."""
    from kube import presence
    from kube.client import ApiError
    from signer import presence as signer_presence

    try:
        found = presence.read(client, namespace, signer_presence.presence_name(lease_name), now)
    except ApiError as err:
        if err.status != 403:
            raise
        return None, None
    return found.alive, found.annotations.get(signer_presence.CA_MODE)


def file_mode(status: CaStatus) -> bool:
    """The running signer signs with the CA files it was given (`--ca-mode=file`) and no
    managed CA has reported: there is no managed CA to show."""
    return status.ca_mode == "file" and status.phase is None and not status.replicas


def _leader(client: Client, namespace: str, name: str) -> Mapping[str, Any] | None:
    from kube.client import ApiError, is_not_found
    from kube.leases import LeaseRef

    try:
        lease = client.get(LeaseRef(namespace, name).path)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise
    spec = lease.get("spec") or {}
    return {
        "lease": name,
        "identity": spec.get("holderIdentity"),
        "renewTime": spec.get("renewTime"),
        "leaseDurationSeconds": spec.get("leaseDurationSeconds"),
    }


def _published(client: Client, signer_name: str) -> tuple[list[str], str]:
    """The anchors the signer's bundles publish, and the ClusterTrustBundle version."""
    from trust.clustertrustbundles import served_version, signer_anchors

    version = served_version(client)
    if version is None:
        raise CaStatusError("API server: certificates.k8s.io serves no clustertrustbundles")
    return sorted(signer_anchors(client, version, signer_name)), version


def _unlinked_anchors(client: Client, version: str, signer_name: str) -> frozenset[str] | None:
    """The anchors of the signer's unlinked bundle; None when there is none, or it may
    not be read (then nothing is said of it)."""
    from trust.clustertrustbundles import anchors_of, pem_of, unlinked_bundle

    bundle = unlinked_bundle(client, version, signer_name)
    return None if bundle is None else anchors_of(pem_of(bundle))


def status_of(
    leases: Sequence[ReplicaReport],
    leader: Mapping[str, Any] | None,
    published: Sequence[str],
    now: datetime,
    where: str,
) -> CaStatus:
    """The status from the replicas' report Leases (the leader's carries its decision,
    read back as a typed `managedca.status.Decision`), the leader-election Lease and the
    published anchors."""
    from kube.leases import renewal
    from managedca.report import leading_decision
    from managedca.status import Decision

    chosen, by_leader = leading_decision(leases, (leader or {}).get("identity"))
    decision = Decision.from_json(chosen.decision) if chosen else None
    view = None
    if leader is not None:
        renewed = renewal({"spec": leader}, now)  # `leader` carries the spec's times
        age = renewed.age_seconds
        view = LeaderView(
            lease=str(leader.get("lease")),
            identity=leader.get("identity"),
            renew_time=leader.get("renewTime"),
            duration=renewed.duration_seconds or 0.0,
            held=renewed.fresh,
            renewed_seconds_ago=round(age, 1) if age is not None else None,
        )
    status = CaStatus(
        secret=where,
        leader=view,
        phase=None,
        cas=(),
        times=(),
        replicas=(),
        published=tuple(published),
    )
    if decision is None:
        return status
    replicas = tuple(
        ReplicaRow(r.replica, r.live, r.loaded_next, r.signing_ca, r.ready_to_sign)
        for r in decision.replicas
    )
    waiting = None
    if decision.step == "Wait" or decision.reason:
        waiting = Waiting(
            decision.reason, decision.why or decision.reason, decision.until, decision.since
        )
    return replace(
        status,
        phase=decision.phase,
        cas=tuple(
            CaRow(
                c.role,
                c.fingerprint,
                c.not_before,
                c.not_after,
                c.fingerprint in published,
                c.retire_at,
            )
            for c in decision.cas
        ),
        times=tuple(decision.times.items()),
        replicas=replicas,
        revoked=decision.revoked,
        revoke_requested=decision.revoke_requested,
        revoke_requested_at=decision.emergency_requested_at,
        paused=_paused(decision, replicas),
        decided_by=chosen.replica if chosen else None,
        decided_at=decision.at,
        decided_by_leader=by_leader,
        waiting=waiting,
        consumers_skipped=(
            (decision.consumers_skipped_for, decision.consumers_skipped_by or "unknown")
            if decision.consumers_skipped_for
            else None
        ),
        next_step=None if waiting else decision.step,
    )


def _paused(decision: Decision, replicas: Sequence[ReplicaRow]) -> str | None:
    return issuance_pause(decision)[0]


def issuance_pause(decision: Decision) -> tuple[str | None, str | None]:
    """Why nothing is issued now, from the leader's decision, and until when if known
    (RFC 3339): no confirmed CA (a first CA, a new root after a deleted Secret — named by
    the wait that holds it, e.g. the propagation delay — or an emergency CA not yet read
    back in the bundle), a revoked signing CA not yet replaced, or no live replica with a
    CA to sign with. `ca status`, `status` and `explain` say the same."""
    current = [c.fingerprint for c in decision.cas if c.role == "current"]
    if decision.issuance_paused:
        return (
            "the signing CA was revoked; nothing is signed until its replacement is in the "
            "ClusterTrustBundle read back (seconds)",
            None,
        )
    if decision.phase == "Bootstrapping":
        if decision.reason and decision.reason != "bundle-not-published":
            return (
                f"the current CA is not confirmed yet: it waits for "
                f"{decision.why or decision.reason} [{decision.reason}]",
                decision.until,
            )
        return (
            "the current CA is not confirmed yet: it signs once the ClusterTrustBundle "
            "read back holds it",
            None,
        )
    if current and current[0] in decision.revoke_requested:
        return (
            "an emergency rotation revokes the signing CA: nothing is signed until the "
            "new CA is published",
            None,
        )
    live = [r for r in decision.replicas if r.live]
    if live and not any(r.signing_ca for r in live):
        return "no live replica has a CA to sign with", None
    return None, None


# output --------------------------------------------------------------------------------


def to_json(status: CaStatus) -> dict[str, Any]:
    """`ca status -o json`: one object; keys as before the move to a typed status."""
    out: dict[str, Any] = {
        "secret": status.secret,
        "leader": None,
        "phase": status.phase,
        "cas": [
            {
                "role": c.role,
                "fingerprint": c.fingerprint,
                "notBefore": c.not_before,
                "notAfter": c.not_after,
                "published": c.published,
                **({"retireAt": c.retire_at} if c.role == "previous" else {}),
            }
            for c in status.cas
        ],
        "times": dict(status.times),
        "replicas": [
            {
                "replica": r.replica,
                "live": r.live,
                "loadedNext": r.loaded_next,
                "signingCA": r.signing,
                "readyToSign": r.ready,
            }
            for r in status.replicas
        ],
        "published": list(status.published),
        "revoked": list(status.revoked),
        "revokeRequested": list(status.revoke_requested),
        "emergencyRequestedAt": status.revoke_requested_at,
        "issuancePaused": status.paused,
        "stableBundle": status.stable_bundle,
        "unlinkedBundle": None
        if status.unlinked_bundle is None
        else {"name": status.unlinked_bundle, "lacks": list(status.unlinked_lacks)},
        "caMode": status.ca_mode,
    }
    if status.idle_reports:
        out["idleReports"] = status.idle_reports
    if status.consumers_skipped is not None:
        out["consumersSkipped"] = {
            "for": status.consumers_skipped[0],
            "by": status.consumers_skipped[1],
        }
    if status.leader is not None:
        leader = status.leader
        out["leader"] = {
            "lease": leader.lease,
            "identity": leader.identity,
            "renewTime": leader.renew_time,
            "leaseDurationSeconds": leader.duration,
            "held": leader.held,
            "renewedSecondsAgo": leader.renewed_seconds_ago,
        }
    if status.decided_by is not None:
        out["decidedBy"] = status.decided_by
        out["decidedAt"] = status.decided_at
        out["decidedByLeader"] = status.decided_by_leader
    if status.waiting is not None:
        out["waitingFor"] = status.waiting.why
        out["reason"] = status.waiting.reason
        out["until"] = status.waiting.until
        out["since"] = status.waiting.since
    elif status.next_step:
        out["next"] = status.next_step
    return out


def _ago(text: str | None, now: datetime) -> str:
    """`text` (RFC 3339) with how long ago or how soon, e.g. `… (in 4m)`, `… (2h ago)`."""
    t = parse_time(text)
    if t is None:
        return str(text)
    return f"{text} ({'in ' + span(t - now) if t > now else span(now - t) + ' ago'})"


FILE_MODE_LINES = (
    "CA mode: file (the signer runs with --ca-mode=file): it signs with the CA files it was "
    "started with (--service-serving-key/--service-serving-cert; the install mounts them "
    "from your CA Secret), so there is no managed CA to show.",
    "  `service-serving-signer status` shows the signer, its published bundle and the "
    'CA\'s expiry; rotating a file-mode CA: docs/operate.md "CA rotation (no restart)"; '
    "moving to the managed CA: docs/managed-ca.md.",
)


def _no_phase(status: CaStatus) -> str:
    """Why no phase is shown: only a leader publishes one (in its report Lease)."""
    leader = status.leader
    if status.signer_running is False:
        return (
            f"none shown: no signer runs, so no leader reports one (an uninstall keeps the "
            f"Secret {status.secret} and its CA; a reinstall goes on from it)"
        )
    if leader is None or not leader.identity or not leader.held:
        return "none shown: no leader right now (a replica reports it once it leads)"
    return f"not published yet by the leader {leader.identity} (it does after its first sync)"


def lines(status: CaStatus, now: datetime) -> list[str]:
    """`ca status` as text, one fact a line."""
    if file_mode(status):
        return [
            *FILE_MODE_LINES,
            *_idle_report_lines(status),
            *_leader_lines(status),
            *_published_lines(status),
        ]
    leader = status.leader
    if leader is None:
        who = "none (no leader-election Lease; is the signer running?)"
    elif not leader.identity:
        who = f"none (Lease {leader.lease} released: no leader right now)"
    else:
        state = "holding" if leader.held else "EXPIRED: no leader right now"
        who = (
            f"{leader.identity} (Lease {leader.lease}, renewed "
            f"{span(timedelta(seconds=leader.renewed_seconds_ago or 0))} ago, {state})"
        )
    out = [f"Secret:  {status.secret}", f"Leader:  {who}"]
    out.append(f"Phase:   {status.phase or _no_phase(status)}")
    if status.decided_at:
        by = "" if status.decided_by_leader else " (not the current leader)"
        out.append(f"  decided by {status.decided_by}{by} at {_ago(status.decided_at, now)}")
    if status.paused:
        out.append(f"Issuance: PAUSED: {status.paused}")
    if status.stable_bundle:
        # The name to reference (Gateway caCertificateRefs, the injector's name selector).
        out.append(f"Bundle:  ClusterTrustBundle {status.stable_bundle} (stable name)")
    if status.unlinked_bundle:
        out.append(
            f"         ClusterTrustBundle {status.unlinked_bundle} (unlinked: no signerName, "
            "--publish-unlinked-bundle; a by-name projection of it follows a change at the "
            "Pod's next kubelet resync, and the swap waits until it holds the new root)"
        )
    for ca in status.cas:
        extra = f", retire at {_ago(ca.retire_at, now)}" if ca.retire_at else ""
        if ca.role == "previous" and not ca.retire_at:
            extra = ", retire time set once every replica signs with the current CA"
        out.append(
            f"  {ca.role:<9} {ca.fingerprint[:16]}…  valid {ca.not_before} → "
            f"{_ago(ca.not_after, now)}  "
            f"{_published_word(ca, status)}{extra}"
        )
    for fp in status.revoked:
        out.append(f"  revoked   {fp[:16]}…  never signed with nor published again")
    if status.revoke_requested:
        when = f" at {_ago(status.revoke_requested_at, now)}" if status.revoke_requested_at else ""
        names = ", ".join(f"{fp[:16]}…" for fp in status.revoke_requested)
        out.append(f"Emergency: requested{when}, revoking {names}; the leader acts within seconds")
    if status.consumers_skipped is not None:
        fp, by = status.consumers_skipped
        out.append(
            f"Consumers: the swap to {fp[:16]}… does not wait for the injector "
            f"(skipped by {by}); the consumers it names keep the old root"
        )
    for name, value in status.times:
        out.append(f"  {name}: {_ago(value, now)}")
    for r in status.replicas:
        out.append(
            f"  replica {r.replica}: {'live' if r.live else 'not renewing'}"
            + (", has loaded the next CA" if r.loaded_next else "")
            + (f", signs with {r.signing[:16]}…" if r.signing else "")
            + (f", ready to sign with {r.ready[:16]}…" if r.ready else "")
        )
    if status.waiting is not None:
        w = status.waiting
        until = f" until {_ago(w.until, now)}" if w.until else ""
        since = f", since {_ago(w.since, now)}" if w.since else ""
        out.append(f"Waiting: [{w.reason}] {w.why}{until}{since}")
    elif status.next_step:
        out.append(f"Next step: {status.next_step} (the leader acts within seconds)")
    return out


def _leader_lines(status: CaStatus) -> list[str]:
    leader = status.leader
    if leader is None:
        return ["Leader:  none (no leader-election Lease)"]
    if not leader.identity:
        return [f"Leader:  none (Lease {leader.lease} released: no leader right now)"]
    state = "holding" if leader.held else "EXPIRED: no leader right now"
    return [f"Leader:  {leader.identity} (Lease {leader.lease}, {state})"]


def _idle_report_lines(status: CaStatus) -> list[str]:
    """The managed-CA report Leases beside a file-mode signer, and how to delete them."""
    from managedca.report import REPORT_LABEL

    n = status.idle_reports
    if not n:
        return []
    namespace, secret = status.secret.split("/", 1)
    leases = "1 report Lease" if n == 1 else f"{n} report Leases"
    return [
        f"  {leases} of managed-CA replicas that do not lead: a rollout to managed mode "
        "under way, or left by a former managed install (after a move back to file mode, "
        f"delete them: kubectl -n {namespace} delete lease -l {REPORT_LABEL}={secret})."
    ]


def _published_lines(status: CaStatus) -> list[str]:
    return [f"  published {fp[:16]}…" for fp in status.published]


def _published_word(ca: CaRow, status: CaStatus) -> str:
    if not ca.published:
        return "NOT published"
    if ca.fingerprint in status.unlinked_lacks:
        return "published, not yet in the unlinked bundle"
    return "published"
