"""The `ca` command group: `ca init` (a throw-away CA for evaluation) and, for a managed
CA, `ca status` and `ca rotate`: the operator's view of it and its one lever
(docs/managed-ca.md).

`status` prints what `troubleshoot.castatus` reads with the caller's kubeconfig (the
replicas' report Leases, the leader-election Lease, the published ClusterTrustBundles;
never the CA Secret): the leader's last decision, the CAs, revoked roots, whether
issuance is paused, and what the rotation waits for. `-o json|yaml` prints it as one
object.

`rotate --emergency` answers a compromised key: it shows and, once confirmed, records
the plan `troubleshoot.carotate` computes from the Secret (`ca-emergency-requested-at`
and `ca-revoke`: the current CA unless `--revoke` names roots; merged with a pending
request; refused for a fresh emergency CA without `--force`); the leader makes a new CA
at once, every replica stops signing with a revoked root as soon as it reads that, and
the new CA signs once the bundle read back holds it.

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
    emit,
    output_option,
    refuse_namespace,
    signer_connection_options,
    signer_namespace_option,
)
from kube.times import format_time
from manager.options import DEFAULT_MANAGED_CA_SECRET, DEFAULT_SIGNER_NAME
from trust import keys

if TYPE_CHECKING:
    from kube.client import Client
    from kube.types import JSON

# The shortest CA `ca init` makes: its notBefore is backdated 5 minutes, and run refuses a
# CA that expires; two hours let it sign at least one certificate of the 1h minimum.
MIN_CA_VALIDITY = 2 * 3600.0


def _options(f: F) -> F:
    for option in reversed(
        [
            signer_connection_options,
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
    """Show the managed CA: leader, phase, CAs, revoked roots, whether issuance is
    paused, and what the rotation waits for."""
    from kube.client import ApiError
    from troubleshoot.castatus import CaStatusError, collect, lines, to_json

    refuse_namespace("ca status", namespace)
    conn = connect(kubeconfig, context)
    now = datetime.now(UTC)
    try:
        status = collect(conn.client, signer_namespace, secret_name, signer_name, lease_name, now)
    except ApiError as err:
        raise StartupError(f"ca status: {conn.problem(err)}") from None
    except CaStatusError as err:
        raise StartupError(f"ca status: {err}") from None
    if output != "text":
        emit(to_json(status), output)
        return
    for line in lines(status, now):
        click.echo(line)


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


@click.command("skip-consumers")
@_options
@click.option("--yes", "-y", is_flag=True, default=False, help="Do not ask for confirmation.")
def ca_skip_consumers(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    signer_namespace: str,
    secret_name: str,
    signer_name: str,
    yes: bool,
) -> None:
    """The escape for a consumer that will never take the new CA (an admin-owned webhook
    a policy freezes, say): the rotation under way swaps without waiting for the
    injector's report. For this rotation only; recorded on the CA Secret with who asked,
    and as a Warning Event (docs/managed-ca.md, "injector-not-converged")."""
    from kube.client import ApiError, is_conflict, path_segment
    from managedca.codec import CONSUMERS_SKIPPED_BY, CONSUMERS_SKIPPED_FOR, StoreError, decode

    refuse_namespace("ca skip-consumers", namespace)
    conn = connect(kubeconfig, context)
    client = conn.client
    where = f"{signer_namespace}/{secret_name}"
    path = (
        f"/api/v1/namespaces/{path_segment(signer_namespace)}/secrets/{path_segment(secret_name)}"
    )
    who = _who_am_i(client)
    for _ in range(5):
        try:
            secret = client.get(path)
            state = decode(secret).state
        except ApiError as err:
            raise StartupError(f"ca skip-consumers: {conn.problem(err)}") from None
        except StoreError as err:
            raise StartupError(f"ca skip-consumers: {err}") from None
        if state.next is None:
            raise StartupError(
                f"ca skip-consumers: no rotation is under way in {where}: nothing waits for "
                "the consumers (see `ca status`)"
            )
        nxt = state.next.fingerprint
        if state.consumers_skipped_for == nxt:
            click.echo(
                f"the swap to {nxt[:16]}… already skips the consumers (asked by "
                f"{state.consumers_skipped_by})"
            )
            return
        click.echo(
            f"The swap to the next CA {nxt[:16]}… of {where} will no longer wait for the "
            "caBundle injector's report. Consumers that do not hold the new CA yet (`ca "
            "status` names them) keep trusting the old root only: their calls fail once "
            "the leaves they verify come from the new CA, and they break for good when the "
            "old root is retired. Every other gate stays. Recorded as asked by "
            f"{who}, for this rotation only."
        )
        if not yes:
            click.confirm("Skip them?", abort=True)
        patch = {
            "metadata": {
                "resourceVersion": secret["metadata"]["resourceVersion"],
                "annotations": {CONSUMERS_SKIPPED_FOR: nxt, CONSUMERS_SKIPPED_BY: who},
            }
        }
        try:
            client.patch(path, patch)
        except ApiError as err:
            if is_conflict(err):
                continue
            raise StartupError(f"ca skip-consumers: {conn.problem(err)}") from None
        _record(client, signer_namespace, secret_name, secret["metadata"].get("uid", ""), who, nxt)
        click.echo(f"recorded: the swap to {nxt[:16]}… skips the consumers; follow `ca status`")
        return
    raise StartupError("ca skip-consumers: the Secret kept changing; try again")


def _who_am_i(client: Client) -> str:
    """The caller's user name (SelfSubjectReview), for the record; "unknown" if refused."""
    from kube.client import ApiError

    try:
        review = client.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
    except ApiError:
        return "unknown (SelfSubjectReview refused)"
    return str(((review.get("status") or {}).get("userInfo") or {}).get("username") or "unknown")


def _record(client: Client, namespace: str, secret: str, uid: str, who: str, nxt: str) -> None:
    """A Warning Event on the CA Secret saying who skipped the consumers, and for which CA."""
    from kube.client import ApiError, path_segment
    from kube.times import micro_time

    now = datetime.now(UTC)
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"generateName": f"{secret}.", "namespace": namespace},
        "eventTime": micro_time(now),
        "reportingController": "service-serving-signer-cli",
        "reportingInstance": "ca-skip-consumers",
        "action": "SkipConsumers",
        "reason": "ManagedCAConsumersSkipped",
        "type": "Warning",
        "regarding": {"kind": "Secret", "namespace": namespace, "name": secret, "uid": uid},
        "note": (
            f"{who} let the swap to CA {nxt} skip the caBundle injector's report: consumers "
            "that do not hold it keep the old root only"
        ),
    }
    try:
        client.create(f"/apis/events.k8s.io/v1/namespaces/{path_segment(namespace)}/events", event)
    except ApiError as err:
        click.echo(f"warning: the Event was not recorded ({err}); the Secret's annotation is")


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
    default=keys.DEFAULT_KEY_TYPE,
    show_default=True,
    type=click.Choice(keys.ca_key_types()),
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
@output_option("text, or the files written as json or yaml.", OUTPUT_FORMATS)
def ca_init(
    out: Path, key_type: str, validity: float, intermediate: bool, force: bool, output: str
) -> None:
    """Write a new CA key, signing cert and trust bundle into --out."""
    import datetime as dt

    from manager.options import format_duration
    from trust import ca

    if validity < MIN_CA_VALIDITY:
        raise StartupError(
            f"ca init: --validity {format_duration(validity)}: must be at least "
            f"{format_duration(MIN_CA_VALIDITY)}, so the CA outlives a certificate it signs "
            "(run refuses an expired one)"
        )

    try:
        files = ca.write_ca(
            out,
            key_type=key_type,
            intermediate=intermediate,
            validity=dt.timedelta(seconds=validity),
            overwrite=force,
        )
    except (OSError, ValueError) as err:
        raise StartupError(f"ca init: {err}") from None
    if output != "text":
        body = {
            "key": str(files.key),
            "cert": str(files.cert),
            "trustBundle": str(files.trust_bundle),
        }
        emit(body, output)
        return
    click.echo(f"wrote {files.key} (private key, mode 0600)")
    click.echo(f"wrote {files.cert} (signing certificate)")
    click.echo(f"wrote {files.trust_bundle} (trust bundle)")
    click.echo("install it in the cluster (README quick install, step 3):")
    click.echo(
        "  kubectl -n service-serving-signer create secret tls service-serving-signer-ca "
        f"--key {files.key} --cert {files.cert}"
    )
    click.echo(
        "  kubectl -n service-serving-signer create configmap "
        f"service-serving-signer-trust-bundle --from-file=trust-bundle.pem={files.trust_bundle}"
    )
    click.echo(
        "or run the signer here: service-serving-signer run "
        f"--service-serving-key={files.key} --service-serving-cert={files.cert} "
        f"--service-serving-trust-bundle={files.trust_bundle}"
    )


ca_group.add_command(ca_status)
ca_group.add_command(ca_rotate)
ca_group.add_command(ca_skip_consumers)
