"""How `explain` and `status` print: text for people, `-o json|yaml` for scripts.

Decisions: machine output uses Kubernetes-style camelCase keys and RFC 3339 UTC times,
omits nothing (absent values are null), and names outcomes by their lowercase label;
text output is one fact per line, indented under what it belongs to, and times are shown
both absolute and as an age so a reader need not do the arithmetic.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kube.presence import PresenceVerdict
from kube.times import format_time, relative, span
from signer import presence as signer_presence
from troubleshoot.explain import Explanation, RequestReport, no_leader_text, not_acting_text
from troubleshoot.leasehealth import Anchor, Health, Leader, ManagedCA, PresenceState


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value else None


def _ago(value: datetime | None, now: datetime) -> str:
    return relative(value, now) if value else "unknown"


# text ----------------------------------------------------------------------------------


def health_lines(health: Health, now: datetime, *, full: bool) -> list[str]:
    lease = health.lease
    where = f"Lease {lease.namespace}/{lease.name}"
    presence = health.presence
    if lease.leader is Leader.RENEWING:
        age = span(timedelta(seconds=lease.renewal.age_seconds or 0))
        leader = f"leader: {lease.renewal.holder} (renewed {age} ago, {where})"
    elif presence is not None and presence.alive and presence.leader_elect is False:
        leader = "leader: none needed: the signer runs with leader election off"
    elif lease.leader is Leader.UNKNOWN:
        assert lease.problem is not None
        leader = f"leader: unknown: {lease.problem} (check: {lease.problem.can_i()})"
    else:
        leader = f"leader: none: {no_leader_text(lease.leader, lease.namespace, lease.name)}"
        if lease.renewal.renew_time is not None:
            when = "released" if lease.leader is Leader.RELEASED else "last renewed"
            leader += f"; {when} {_ago(lease.renewal.renew_time, now)}"
    lines = [leader]
    if full and lease.leader is Leader.RENEWING and lease.acquire_time is not None:
        changes = "" if lease.transitions is None else f"; {lease.transitions} leader changes"
        lines.append(f"  leading since {_ago(lease.acquire_time, now)}{changes}")
    # explain shows the presence when the leader Lease does not settle it; status always.
    if presence is not None and (full or lease.leader is not Leader.RENEWING):
        lines.append(presence_line(presence, health, now))
    waits = api_waits_line(presence) if presence is not None else None
    if waits is not None and (full or not waits.startswith("api writes: none")):
        lines.append(waits)
    bundle = health.bundle
    if bundle.problem is not None:
        lines.append(f"bundle: unknown: {bundle.problem} (check: {bundle.problem.can_i()})")
    elif bundle.names and full:
        expiry = bundle.ca_not_after
        shown = f"; CA expires {relative(expiry, now)}" if expiry else ""
        lines.append(f"bundle: published as ClusterTrustBundle {', '.join(bundle.names)}{shown}")
        lines += [f"  anchor: {_anchor(a, now)}" for a in bundle.anchors]
        if bundle.unlinked:
            lines.append(
                f"  unlinked: also ClusterTrustBundle {bundle.unlinked} (no signerName, "
                "--publish-unlinked-bundle): a by-name projection of it follows a change at "
                "the Pod's next kubelet resync"
            )
    elif full or bundle.published is False:
        lines.append(
            "bundle: no ClusterTrustBundle published for the signer: clients that trust "
            "through a clusterTrustBundle projection cannot verify its certificates"
        )
    if bundle.unlinked and bundle.unlinked_lacks:
        lacks = "; ".join(a.subject for a in bundle.unlinked_lacks)
        lines.append(
            f"bundle: the unlinked ClusterTrustBundle {bundle.unlinked} lacks {lacks}, which "
            "the signer's bundles hold: Pods projecting it by name do not trust that root "
            "yet (the publisher writes it right after them; a managed-CA swap waits for it)"
        )
    if full and health.managed_ca is not None:
        lines.append(managed_ca_line(health.managed_ca, now))
    if full and health.material is not None:
        lines.append(
            f"material in use: {_anchor(health.material, now)} (from the newest issued chain)"
        )
    return lines


def presence_line(state: PresenceState, health: Health, now: datetime) -> str:
    """`signer process: running (…)`, `… none running: …` or `… unknown: forbidden …`."""
    found = state.presence
    if found is None:
        assert state.problem is not None
        return f"signer process: unknown: {state.problem} (check: {state.problem.can_i()})"
    if state.alive:
        age = span(timedelta(seconds=found.renewal.age_seconds or 0))
        version = found.annotations.get(signer_presence.VERSION)
        built = f", version {version}" if version else ""
        if state.leader_elect is not False and health.lease.leader is Leader.RELEASED:
            # A stopping leader releases its Lease but leaves its presence to expire (a
            # standby may live): after an uninstall this is the last renewal fading out.
            return (
                f"signer process: presence Lease {found.namespace}/{found.name} renewed "
                f"{age} ago by {found.renewal.holder}{built}, but the leader Lease was "
                "released: the replicas are stopping (an uninstall or a rollout), or a "
                "standby takes the Lease within seconds"
            )
        return (
            f"signer process: running (presence Lease {found.namespace}/{found.name} renewed "
            f"{age} ago by {found.renewal.holder}{built})"
        )
    if health.acting:
        # The leader Lease is renewed though the presence is not (a signer older than the
        # presence report, or one that may not write it): the leader runs.
        return (
            f"signer process: running (holds the leader Lease; presence Lease "
            f"{found.namespace}/{found.name} {found.state.value})"
        )
    if found.state is PresenceVerdict.MISSING and health.lease.leader is not Leader.MISSING:
        # A leader Lease but no presence: a signer older than the presence report, or none.
        return (
            f"signer process: presence Lease {found.namespace}/{found.name} does not exist "
            "(a signer older than it leaves none); the leader Lease decides"
        )
    return f"signer process: {not_acting_text(health)}"


def api_waits_line(state: PresenceState) -> str | None:
    """Where the leading signer's API writes waited over its last presence renewal: its
    own client budget or the API server (None when the presence does not say)."""
    found = state.presence
    if not state.alive or found is None:
        return None
    waits = signer_presence.parse_api_waits(found.annotations.get(signer_presence.API_WAITS))
    if waits is None:
        return None
    window = f"the last {waits.window:g} s"
    if waits.writes == 0:
        return f"api writes: none in {window}"
    where = (
        "in the signer's own budget (--kube-api-qps/--kube-api-burst; docs/performance.md)"
        if waits.on_budget
        else "on the API server (its load, or the signer's priority level: docs/performance.md)"
    )
    return (
        f"api writes: {waits.writes} in {window} waited mostly {where}: "
        f"{waits.budget:.2f} s each in the budget, {waits.server:.2f} s on the server"
    )


def managed_ca_line(ca: ManagedCA, now: datetime) -> str:
    """`managed CA: phase Staged, waiting for replica-not-ready (since 4m ago)`."""
    line = f"managed CA: phase {ca.phase or 'none yet'}"
    if ca.waiting:
        line += f", waiting for {ca.waiting}"
        if ca.since is not None:
            line += f" (since {_ago(ca.since, now)})"
    elif ca.step:
        line += f", next step {ca.step}"
    if not ca.by_leader:
        line += f"; decided by {ca.decided_by}, not the current leader"
    if ca.paused:
        until = f" until {_ago(ca.paused_until, now)}" if ca.paused_until else ""
        line += f"; ISSUANCE PAUSED{until}: {ca.paused}"
    return line + " (details: ca status)"


def _anchor(anchor: Anchor, now: datetime) -> str:
    return f"{anchor.subject}, expires {relative(anchor.not_after, now)}"


def request_lines(request: RequestReport, now: datetime, indent: str = "  ") -> list[str]:
    created = _ago(request.created, now)
    key = f"; key {request.key_type}" if request.key_type else ""
    lines = [
        f"{indent}PodCertificateRequest {request.name} (created {created}{key}): {request.summary}"
    ]
    sub = indent + "  "
    fields = (
        ("nothing will act", request.why_nothing_acts),
        ("acting", request.acting),
        ("acting: unknown", request.acting_unknown),
        ("names", ", ".join(request.dns_names + request.ip_addresses)),
        ("notAfter", request.not_after and relative(request.not_after, now)),
        ("beginRefreshAt", request.begin_refresh_at and relative(request.begin_refresh_at, now)),
        ("reason", request.reason),
        ("message", request.message),
        ("fix", request.fix),
    )
    lines.extend(f"{sub}{label}: {value}" for label, value in fields if value)
    for block in request.blocking:
        lines.append(f"{sub}Service {block.service}: {block.reason}")
        lines.append(f"{sub}  {block.message}")
        for key, (wanted, has) in block.differing_keys.items():
            shown = "no such label" if has is None else f"{has!r}"
            lines.append(f"{sub}  selector key {key}: Service wants {wanted!r}, Pod has {shown}")
        if block.fix:
            lines.append(f"{sub}  fix: {block.fix}")
    if request.cleanup:
        lines.append(f"{sub}cleanup: {request.cleanup}")
    return lines


def render_text(report: Explanation, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    lines = [
        f"Pod {report.namespace}/{report.pod} (signer {report.signer_name}): {report.outcome.label}"
    ]
    if report.owner is not None and not report.owner.bare:
        lines.append(f"  owner: {report.owner.kind} {report.namespace}/{report.owner.name}")
    if report.health is not None:
        lines += [f"  {line}" for line in health_lines(report.health, now, full=False)]
    if report.note:
        lines.append(f"  {report.note}")
    if report.other_signers:
        lines.append(
            f"  requests for other signers (not decided here): {', '.join(report.other_signers)}"
        )
    for request in report.requests:
        lines += request_lines(request, now)
    return "\n".join(lines) + "\n"


# machine output --------------------------------------------------------------------------


def health_json(health: Health) -> dict[str, Any]:
    lease, bundle = health.lease, health.bundle
    return {
        "signerName": health.signer_name,
        "lease": {
            "namespace": lease.namespace,
            "name": lease.name,
            "leader": lease.leader.value,
            "holderIdentity": lease.renewal.holder or None,
            "renewTime": _time(lease.renewal.renew_time),
            "leaseDurationSeconds": lease.renewal.duration_seconds,
            "acquireTime": _time(lease.acquire_time),
            "leaseTransitions": lease.transitions,
            "forbidden": str(lease.problem) if lease.problem else None,
        },
        "bundle": {
            "published": bundle.published,
            "names": list(bundle.names),
            "caNotAfter": _time(bundle.ca_not_after),
            "anchors": [anchor_json(a) for a in bundle.anchors],
            "unlinked": None
            if bundle.unlinked is None
            else {"name": bundle.unlinked, "lacks": [a.subject for a in bundle.unlinked_lacks]},
            "forbidden": str(bundle.problem) if bundle.problem else None,
        },
        "presence": presence_json(health.presence) if health.presence else None,
        "acting": health.acting,
        "material": anchor_json(health.material) if health.material else None,
        "managedCA": managed_ca_json(health.managed_ca) if health.managed_ca else None,
    }


def presence_json(state: PresenceState) -> dict[str, Any]:
    found = state.presence
    return {
        "namespace": state.namespace,
        "name": state.name,
        "state": found.state.value if found else "unknown",
        "alive": state.alive,
        "holderIdentity": (found.renewal.holder or None) if found else None,
        "renewTime": _time(found.renewal.renew_time) if found else None,
        "leaseDurationSeconds": found.renewal.duration_seconds if found else None,
        "annotations": dict(found.annotations) if found else {},
        "forbidden": str(state.problem) if state.problem else None,
    }


def managed_ca_json(ca: ManagedCA) -> dict[str, Any]:
    return {
        "phase": ca.phase,
        "next": ca.step,
        "waitingFor": ca.waiting,
        "since": _time(ca.since),
        "decidedBy": ca.decided_by,
        "decidedByLeader": ca.by_leader,
        "issuancePaused": ca.paused,
        "issuancePausedUntil": _time(ca.paused_until),
    }


def anchor_json(anchor: Anchor) -> dict[str, Any]:
    return {"subject": anchor.subject, "notAfter": _time(anchor.not_after)}


def request_json(request: RequestReport) -> dict[str, Any]:
    return {
        "name": request.name,
        "signerName": request.signer_name,
        "creationTimestamp": _time(request.created),
        "outcome": request.outcome.label,
        "summary": request.summary,
        "condition": request.already,
        "reason": request.reason,
        "message": request.message,
        "fix": request.fix,
        "whyNothingActs": request.why_nothing_acts,
        "acting": request.acting,
        "actingUnknown": request.acting_unknown,
        "dnsNames": list(request.dns_names),
        "ipAddresses": list(request.ip_addresses),
        "keyType": request.key_type,
        "notAfter": _time(request.not_after),
        "beginRefreshAt": _time(request.begin_refresh_at),
        "cleanup": request.cleanup,
        "blocking": [
            {
                "service": b.service,
                "reason": b.reason,
                "message": b.message,
                "fix": b.fix,
                "differingKeys": {
                    k: {"service": v[0], "pod": v[1]} for k, v in b.differing_keys.items()
                },
            }
            for b in request.blocking
        ],
    }


def report_json(report: Explanation) -> dict[str, Any]:
    owner = report.owner
    return {
        "namespace": report.namespace,
        "pod": report.pod,
        "signerName": report.signer_name,
        "outcome": report.outcome.label,
        "exitStatus": int(report.outcome),
        "owner": {"kind": owner.kind, "name": owner.name} if owner else None,
        "note": report.note,
        "otherSigners": list(report.other_signers),
        "signer": health_json(report.health) if report.health else None,
        "requests": [request_json(r) for r in report.requests],
    }


def dump(body: Mapping[str, Any], output: str) -> str:
    if output == "yaml":
        import yaml

        text: str = yaml.safe_dump(dict(body), sort_keys=False, default_flow_style=False)
        return text
    return json.dumps(body, indent=2) + "\n"
