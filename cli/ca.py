"""The `ca` command group: `ca init` (a throw-away CA for evaluation) and, for a managed
CA, `ca status` and `ca rotate`: the operator's view of it and its one lever
(docs/managed-ca.md).

`status` reads the replicas' report Leases (the leader's carries its last decision),
the leader-election Lease and the published ClusterTrustBundles with the caller's
kubeconfig — never the CA Secret, so `get` on Leases and `list` on ClusterTrustBundles
suffice — and prints the leader, the phase, the current / next / previous CAs
(fingerprint, validity; never a key), the times of the rotation under way, each
replica's report, and what the rotation waits for, since and until when (relative
times beside the absolute ones). It shows what the leader decided, not a second
decision of its own. `-o json` prints the same as one JSON object.

`rotate --emergency` answers a compromised key: it records
`ca-emergency-requested-at` and `ca-revoke` (the current CA unless `--revoke` names
roots); the leader makes a new CA at once, every replica stops signing with a revoked
root as soon as it reads that, and the new CA signs once the bundle read back holds it.

`rotate` asks for a rotation now: it records `ca-rotate-requested-at` on the Secret with
a resourceVersion precondition; the leader stages the next CA within seconds and goes
through the same gated steps as a scheduled rotation. Refused while a rotation is under
way (a staged next CA) — the gates are what make a rotation safe, so nothing skips them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.common import (
    OUTPUT_FORMATS,
    Connection,
    Duration,
    F,
    StartupError,
    connection_options,
    emit,
    output_option,
    refuse_namespace,
    signer_namespace_option,
)
from kube.times import format_time
from manager.options import DEFAULT_MANAGED_CA_SECRET, DEFAULT_SIGNER_NAME

if TYPE_CHECKING:
    from kube.client import Client
    from kube.types import JSON
    from managedca.report import ReportLease


def _options(f: F) -> F:
    for option in reversed(
        [
            connection_options,
            signer_namespace_option(),
            click.option(
                "--secret-name",
                default=DEFAULT_MANAGED_CA_SECRET,
                show_default=True,
                help="The managed CA Secret (run's --managed-ca-secret-name).",
            ),
            click.option(
                "--signer-name",
                default=DEFAULT_SIGNER_NAME,
                show_default=True,
                help="The signer whose ClusterTrustBundles are read.",
            ),
        ]
    ):
        f = option(f)
    return f


def connect(kubeconfig: str | None, context: str | None) -> Connection:
    """The connection a `ca` command reads and writes with (kubectl's resolution)."""
    return Connection(kubeconfig, context)


def _t(t: datetime | None) -> str | None:
    return format_time(t) if t is not None else None


@click.command("status")
@_options
@click.option(
    "--lease-name",
    default="service-serving-signer",
    show_default=True,
    help="The leader-election Lease (run's --leader-elect-resource-name).",
)
@output_option("text, or one object as json or yaml.", OUTPUT_FORMATS)
def ca_status(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    signer_namespace: str,
    secret_name: str,
    signer_name: str,
    lease_name: str,
    output: str,
) -> None:
    """Show the managed CA: leader, phase, CAs, and what the rotation waits for."""
    from kube.client import ApiError
    from managedca.report import list_reports, parse_report
    from trust.bundle import stable_bundle_name

    refuse_namespace("ca status", namespace)
    namespace = signer_namespace
    conn = connect(kubeconfig, context)
    client = conn.client
    try:
        leases = [
            parsed
            for lease in list_reports(client, namespace, secret_name)
            if (parsed := parse_report(lease)) is not None
        ]
        leader = _leader(client, namespace, lease_name)
        published = _published(client, signer_name)
    except ApiError as err:
        raise StartupError(f"ca status: {conn.problem(err)}") from None
    now = datetime.now(UTC)
    report = status_report(leases, leader, published, now, f"{namespace}/{secret_name}")
    report["stableBundle"] = stable_bundle_name(signer_name)
    if output != "text":
        emit(report, output)
        return
    for line in _text(report, now):
        click.echo(line)


def _leader(client: Client, namespace: str, name: str) -> JSON | None:
    from kube.client import ApiError, is_not_found, path_segment

    path = f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(namespace)}/leases/"
    try:
        lease = client.get(path + path_segment(name))
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


def _published(client: Client, signer_name: str) -> list[str]:
    from managedca.material import anchors_of

    path = f"/apis/certificates.k8s.io/{_ctb_version(client)}/clustertrustbundles"
    listed = client.get(path, {"fieldSelector": f"spec.signerName={signer_name}"})
    found: set[str] = set()
    for item in listed.get("items") or []:
        found |= anchors_of(str((item.get("spec") or {}).get("trustBundle", "")))
    return sorted(found)


def _ctb_version(client: Client) -> str:
    from kube.discovery import bundle_version

    version = bundle_version(client)
    if version is None:
        raise StartupError("API server: certificates.k8s.io serves no clustertrustbundles")
    return version


def status_report(
    leases: list[ReportLease],
    leader: JSON | None,
    published: list[str],
    now: datetime,
    where: str,
) -> JSON:
    """What `ca status` shows, from the replicas' report Leases (the leader's carries its
    decision: `managedca.controller.decision_record`), the leader-election Lease and the
    published bundles: no access to the CA Secret (the key) is needed."""
    from kube.times import parse_time
    from managedca.report import leading_decision

    chosen, by_leader = leading_decision(leases, (leader or {}).get("identity"))
    decision = dict(chosen.decision or {}) if chosen else {}
    out: JSON = {
        "secret": where,
        "leader": None,
        "phase": decision.get("phase"),
        "cas": [
            {**c, "published": c.get("fingerprint") in published} for c in decision.get("cas") or []
        ],
        "times": decision.get("times") or {},
        "replicas": decision.get("replicas") or [],
        "published": published,
    }
    if leader is not None:
        renewed = parse_time(leader.get("renewTime"))
        duration = float(leader.get("leaseDurationSeconds") or 0)
        age = (now - renewed).total_seconds() if renewed else None
        out["leader"] = {
            **leader,
            "held": age is not None and age < duration,
            "renewedSecondsAgo": round(age, 1) if age is not None else None,
        }
    if chosen:
        out["decidedBy"] = chosen.replica
        out["decidedAt"] = decision.get("at")
        out["decidedByLeader"] = by_leader
    if decision.get("step") == "Wait" or decision.get("reason"):
        out["waitingFor"] = decision.get("why") or decision.get("reason")
        out["reason"] = decision.get("reason")
        out["until"] = decision.get("until")
        out["since"] = decision.get("since")
    elif decision:
        out["next"] = decision.get("step")
    return out


def _ago(text: str | None, now: datetime) -> str:
    """`text` (RFC 3339) with how long ago or how soon, e.g. `… (in 4m)`, `… (2h ago)`."""
    from kube.times import parse_time

    t = parse_time(text)
    if t is None:
        return str(text)
    seconds = (t - now).total_seconds()
    span = _span(abs(seconds))
    return f"{text} ({'in ' + span if seconds > 0 else span + ' ago'})"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def _text(report: JSON, now: datetime) -> list[str]:
    leader = report.get("leader")
    if leader is None:
        who = "none (no leader-election Lease; is the signer running?)"
    else:
        state = "holding" if leader["held"] else "EXPIRED: no leader right now"
        who = (
            f"{leader['identity']} (Lease {leader['lease']}, renewed "
            f"{_span(leader['renewedSecondsAgo'] or 0)} ago, {state})"
        )
    lines = [f"Secret:  {report['secret']}", f"Leader:  {who}"]
    lines.append(f"Phase:   {report['phase'] or 'unknown (no leader has published a decision)'}")
    if report.get("decidedAt"):
        by = "" if report.get("decidedByLeader") else " (not the current leader)"
        lines.append(f"  decided by {report['decidedBy']}{by} at {_ago(report['decidedAt'], now)}")
    if report.get("stableBundle"):
        # The name to reference (Gateway caCertificateRefs, the injector's name selector).
        lines.append(f"Bundle:  ClusterTrustBundle {report['stableBundle']} (stable name)")
    for ca in report["cas"]:
        extra = f", retire at {_ago(ca['retireAt'], now)}" if ca.get("retireAt") else ""
        if ca["role"] == "previous" and not ca.get("retireAt"):
            extra = ", retire time set once every replica signs with the current CA"
        lines.append(
            f"  {ca['role']:<9} {ca['fingerprint'][:16]}…  valid {ca['notBefore']} → "
            f"{_ago(ca['notAfter'], now)}  "
            f"{'published' if ca['published'] else 'NOT published'}{extra}"
        )
    for name, value in (report.get("times") or {}).items():
        lines.append(f"  {name}: {_ago(value, now)}")
    for r in report["replicas"]:
        lines.append(
            f"  replica {r['replica']}: {'live' if r['live'] else 'not renewing'}"
            + (", has loaded the next CA" if r.get("loadedNext") else "")
            + (f", signs with {r['signingCA'][:16]}…" if r.get("signingCA") else "")
            + (f", ready to sign with {r['readyToSign'][:16]}…" if r.get("readyToSign") else "")
        )
    if "waitingFor" in report:
        until = f" until {_ago(report['until'], now)}" if report.get("until") else ""
        since = f", since {_ago(report['since'], now)}" if report.get("since") else ""
        lines.append(f"Waiting: [{report['reason']}] {report['waitingFor']}{until}{since}")
    elif report.get("next"):
        lines.append(f"Next step: {report['next']} (the leader acts within seconds)")
    return lines


@click.command("rotate")
@_options
@click.option(
    "--emergency",
    is_flag=True,
    default=False,
    help="The CA key is compromised: stop signing with it now and remove it from the "
    "bundle as soon as a new CA is published (docs/managed-ca.md: what breaks).",
)
@click.option(
    "--revoke",
    "revoke",
    multiple=True,
    metavar="FINGERPRINT",
    help="With --emergency: a root to revoke, by a unique prefix of its sha256 (as `ca "
    "status` prints it); repeatable; default the current CA.",
)
@click.option(
    "--force",
    is_flag=True,
    default=False,
    help="With --emergency: revoke the current CA even though an emergency rotation made it.",
)
@click.option("--yes", "-y", is_flag=True, default=False, help="Do not ask for confirmation.")
@output_option("text, or what was requested as json or yaml.", OUTPUT_FORMATS)
def ca_rotate(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    signer_namespace: str,
    secret_name: str,
    signer_name: str,
    emergency: bool,
    revoke: tuple[str, ...],
    force: bool,
    yes: bool,
    output: str,
) -> None:
    """Ask the leader to rotate the managed CA now (stage → swap → retire, gated), or
    with --emergency at once."""
    from kube.client import ApiError, is_conflict, is_not_found, path_segment
    from managedca.codec import (
        EMERGENCY_REQUESTED_AT,
        REVOKE,
        ROTATE_REQUESTED_AT,
        StoreError,
        decode,
    )

    if (revoke or force) and not emergency:
        raise StartupError("ca rotate: --revoke and --force go with --emergency")
    refuse_namespace("ca rotate", namespace)
    namespace = signer_namespace
    where = f"{namespace}/{secret_name}"
    conn = connect(kubeconfig, context)
    client = conn.client
    path = f"/api/v1/namespaces/{path_segment(namespace)}/secrets/{path_segment(secret_name)}"
    confirmed: str | None = None
    for _ in range(5):
        try:
            secret = client.get(path)
        except ApiError as err:
            if is_not_found(err):
                raise StartupError(
                    f"ca rotate: no managed CA Secret {namespace}/{secret_name} "
                    "(is the signer running with --ca-mode=managed?)"
                ) from None
            raise StartupError(f"ca rotate: {conn.problem(err)}") from None
        annotations: dict[str, str] | None
        if emergency:
            # Shown and confirmed on a terminal; -o json|yaml is for scripts: --yes.
            annotations = _emergency_plan(
                secret, revoke, force=force, yes=yes, confirmed=confirmed, output=output
            )
            if annotations is None:
                return
            confirmed = annotations[REVOKE]
        else:
            try:
                state = decode(secret).state
            except StoreError as err:
                raise StartupError(f"ca rotate: {err}") from None
            if state.next is not None:
                raise StartupError(
                    f"ca rotate: a rotation is already under way (next CA "
                    f"{state.next.fingerprint[:16]}…); see `ca status`"
                )
            if state.rotate_requested_at is not None:
                if output != "text":
                    at = _t(state.rotate_requested_at)
                    emit({"secret": where, "requested": "rotate", "requestedAt": at}, output)
                    return
                click.echo(f"a rotation was already requested at {_t(state.rotate_requested_at)}")
                return
            annotations = {ROTATE_REQUESTED_AT: format_time(datetime.now(UTC))}
        meta = secret["metadata"]
        patch = {
            "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": annotations}
        }
        try:
            client.patch(path, patch)
        except ApiError as err:
            if is_conflict(err):
                continue  # changed meanwhile (the leader acted?): read and plan again
            raise StartupError(f"ca rotate: {conn.problem(err)}") from None
        if output != "text":
            body = {
                "secret": where,
                "requested": "emergency" if emergency else "rotate",
                "requestedAt": annotations.get(EMERGENCY_REQUESTED_AT)
                or annotations.get(ROTATE_REQUESTED_AT),
                "revoke": annotations[REVOKE].split(",") if emergency else [],
            }
            emit(body, output)
        elif emergency:
            click.echo(
                f"emergency rotation requested for {where}: revoking {annotations[REVOKE]}; "
                "the leader acts within seconds; follow it with "
                "`service-serving-signer ca status`"
            )
        else:
            click.echo(
                f"rotation requested for {where}; the leader stages the "
                "next CA within seconds; follow it with `service-serving-signer ca status`"
            )
        return
    raise StartupError("ca rotate: the Secret kept changing; try again")


def _emergency_plan(
    secret: JSON,
    revoke: tuple[str, ...],
    *,
    force: bool,
    yes: bool,
    confirmed: str | None,
    output: str,
) -> dict[str, str] | None:
    """The annotations to write for `--emergency` (None: nothing to write, said why),
    shown and confirmed unless `yes` or already confirmed as they are."""
    from managedca.codec import REVOKE
    from troubleshoot.carotate import RotateRefused, plan_emergency, read_ca_secret

    try:
        plan = plan_emergency(read_ca_secret(secret), revoke, force=force, now=datetime.now(UTC))
    except RotateRefused as err:
        raise StartupError(f"ca rotate --emergency: {err}") from None
    if plan.annotations is None:
        if output != "text":
            emit({"secret": plan.secret.where, "requested": None, "note": plan.note}, output)
        else:
            click.echo(plan.note)
        return None
    if plan.annotations[REVOKE] == confirmed:
        return plan.annotations
    if output != "text" and not yes:
        raise StartupError("ca rotate --emergency: -o json|yaml asks nothing: add --yes")
    if output == "text":
        click.echo(f"Emergency rotation of {plan.secret.where}")
        for root in plan.revoke:
            click.echo(f"  revoke {root.role:<9} {root.fingerprint}")
        for fp in sorted(plan.kept_pending):
            click.echo(f"  revoke {'(pending)':<9} {fp}  (an earlier request, kept)")
        click.echo("What breaks:")
        for line in plan.effects():
            click.echo(f"  - {line}")
        for problem in plan.secret.problems:
            click.echo(f"  note: the Secret: {problem}")
    if not yes:
        click.confirm("Request it now?", abort=True)
    return plan.annotations


@click.group("ca")
def ca_group() -> None:
    """Certificate authorities: a throw-away one for evaluation (init), and the managed
    CA's status and rotation (status, rotate; --ca-mode=managed)."""


@ca_group.command("init")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for ca.key, ca.crt and trust-bundle.pem.",
)
@click.option(
    "--key-type",
    default="ECDSAP256",
    show_default=True,
    type=click.Choice(
        ["ECDSAP256", "ECDSAP384", "ECDSAP521", "RSA2048", "RSA3072", "RSA4096", "ED25519"]
    ),
    help="Key algorithm of the CA (kubelet's keyType spelling).",
)
@click.option(
    "--validity",
    type=Duration(),
    default="8760h",
    show_default=True,
    help="CA certificate lifetime.",
)
@click.option("--intermediate", is_flag=True, help="Sign with an intermediate under a new root.")
@click.option(
    "--force",
    is_flag=True,
    help="Replace ca.key, ca.crt and trust-bundle.pem if they exist (the old key is lost).",
)
def ca_init(out: Path, key_type: str, validity: float, intermediate: bool, force: bool) -> None:
    """Write a new CA key, signing cert and trust bundle into --out."""
    import datetime as dt

    from trust import ca

    try:
        files = ca.write_ca(
            out,
            key_type=key_type,  # type: ignore[arg-type]
            intermediate=intermediate,
            validity=dt.timedelta(seconds=validity),
            overwrite=force,
        )
    except (OSError, ValueError) as err:
        raise StartupError(f"ca init: {err}") from None
    click.echo(f"wrote {files.key} (private key, mode 0600)")
    click.echo(f"wrote {files.cert} (signing certificate)")
    click.echo(f"wrote {files.trust_bundle} (trust bundle)")
    click.echo(
        "start the signer with: service-serving-signer run "
        f"--service-serving-key={files.key} --service-serving-cert={files.cert} "
        f"--service-serving-trust-bundle={files.trust_bundle}"
    )


ca_group.add_command(ca_status)
ca_group.add_command(ca_rotate)
