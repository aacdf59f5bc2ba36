"""The `ca` command group: `ca init` (a throw-away CA for evaluation) and, for a managed
CA, `ca status` and `ca rotate`: the operator's view of it and its one lever
(docs/managed-ca.md).

`status` reads the CA Secret, the published ClusterTrustBundles and the replicas'
reports with the caller's kubeconfig, and prints the phase, the current / next /
previous CAs (fingerprint, subject, validity; never a key), the recorded times, and what
the rotation waits for and until when (the same `managedca.decide` the leader runs, with
the flags given here, which default to the product's). `-o json` prints the same as one
JSON object.

`rotate` asks for a rotation now: it records `ca-rotate-requested-at` on the Secret with
a resourceVersion precondition; the leader stages the next CA within seconds and goes
through the same gated steps as a scheduled rotation. Refused while a rotation is under
way (a staged next CA) — the gates are what make a rotation safe, so nothing skips them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.common import Duration, F, StartupError, output_option
from cli.common import client as cli_client
from kube.times import format_time
from manager.options import DEFAULT_MANAGED_CA_SECRET, DEFAULT_SIGNER_NAME

if TYPE_CHECKING:
    from kube.client import Client
    from kube.types import JSON
    from managedca import decide as d

DEFAULT_NAMESPACE = "service-serving-signer"


def _options(f: F) -> F:
    for option in reversed(
        [
            click.option("--kubeconfig", default=None, help="Kubeconfig; default $KUBECONFIG."),
            click.option(
                "--namespace",
                "-n",
                default=DEFAULT_NAMESPACE,
                show_default=True,
                help="The signer's namespace (where the CA Secret is).",
            ),
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


def _t(t: datetime | None) -> str | None:
    return format_time(t) if t is not None else None


@click.command("status")
@_options
# `run`'s timing flags, with the same names and defaults (under short parameter names), so
# that status computes the times `run` would.
@click.option(
    "--managed-ca-rotate-at",
    "rotate_at",
    type=float,
    default=0.5,
    show_default=True,
    help="As given to `run` (when the next rotation is due).",
)
@click.option(
    "--max-certificate-lifetime",
    "max_leaf",
    type=Duration(),
    default="24h",
    show_default=True,
    help="As given to `run` (retire times of a swap not yet made).",
)
@click.option(
    "--managed-ca-retire-margin",
    "margin",
    type=Duration(),
    default="1h",
    show_default=True,
    help="As given to `run`.",
)
@click.option(
    "--managed-ca-propagation-delay",
    "delay",
    type=Duration(),
    default="10m",
    show_default=True,
    help="As given to `run` (for a rotation not yet published).",
)
@output_option("text, or one JSON object.")
def ca_status(
    kubeconfig: str | None,
    namespace: str,
    secret_name: str,
    signer_name: str,
    rotate_at: float,
    max_leaf: float,
    margin: float,
    delay: float,
    output: str,
) -> None:
    """Show the managed CA: phase, CAs, and what the rotation waits for."""
    from kube.client import ApiError
    from managedca import decide as d
    from managedca.controller import ManagedCAController
    from trust.bundle import stable_bundle_name

    client = cli_client(kubeconfig)
    config = d.Config(
        rotate_at=rotate_at,
        max_leaf_lifetime=timedelta(seconds=max_leaf),
        retire_margin=timedelta(seconds=margin),
        propagation_delay=timedelta(seconds=delay),
    )
    reader = ManagedCAController(
        client,
        namespace=namespace,
        secret_name=secret_name,
        signer_name=signer_name,
        ctb_version=_ctb_version(client),
        config=config,
        make_ca=_no_ca,
    )
    try:
        seen = reader.observe(collect=False)
    except ApiError as err:
        raise StartupError(f"ca status: {err}") from None
    now = datetime.now(UTC)
    state = seen.stored.state if seen.stored is not None else None
    action = d.decide(state, seen.observations, now, config)
    report = _report(state, seen.observations, action, now, config, f"{namespace}/{secret_name}")
    report["stableBundle"] = stable_bundle_name(signer_name)
    if output == "json":
        click.echo(json.dumps(report, indent=2))
        return
    for line in _text(report):
        click.echo(line)


def _no_ca(_now: datetime) -> tuple[bytes, bytes]:
    raise RuntimeError("ca status makes no CA")


def _ctb_version(client: Client) -> str:
    from kube.discovery import bundle_version

    version = bundle_version(client)
    if version is None:
        raise StartupError("API server: certificates.k8s.io serves no clustertrustbundles")
    return version


def _report(
    state: d.State | None,
    obs: d.Observations,
    action: d.Action,
    now: datetime,
    config: d.Config,
    where: str,
) -> JSON:
    from managedca import decide as d

    def ca(info: d.CaInfo, role: str, **extra: str | None) -> JSON:
        return {
            "role": role,
            "fingerprint": info.fingerprint,
            "notBefore": _t(info.not_before),
            "notAfter": _t(info.not_after),
            "published": info.fingerprint in obs.published,
            **extra,
        }

    out: JSON = {"secret": where, "phase": None, "cas": [], "replicas": []}
    if state is not None:
        out["phase"] = state.phase
        out["cas"].append(ca(state.current, "current"))
        if state.next is not None:
            out["cas"].append(ca(state.next, "next"))
        for prev in state.previous:
            out["cas"].append(
                ca(prev.ca, "previous", swappedAt=_t(prev.swapped_at), retireAt=_t(prev.retire_at))
            )
        out["times"] = {
            "confirmedAt": _t(state.confirmed_at),
            "stagedAt": _t(state.staged_at),
            "publishedAt": _t(state.published_at),
            "swapNotBefore": _t(state.swap_not_before),
            "swappedAt": _t(state.swapped_at),
            "rotateRequestedAt": _t(state.rotate_requested_at),
            "rotationDue": _t(d.rotation_due(state.current, config)),
        }
    for r in obs.reports:
        loaded_next = (
            state is not None and state.next is not None and (state.next.fingerprint in r.anchors)
        )
        out["replicas"].append(
            {
                "replica": r.replica,
                "live": r.live,
                "loadedNext": loaded_next,
                "signingCA": r.signing,
                "readyToSign": r.ready,
            }
        )
    if isinstance(action, d.Wait):
        out["waitingFor"] = action.why
        out["until"] = _t(action.until)
    else:
        out["next"] = type(action).__name__
    return out


def _text(report: JSON) -> list[str]:
    lines = [f"Secret:  {report['secret']}", f"Phase:   {report['phase'] or 'no CA yet'}"]
    if report.get("stableBundle"):
        # The name to reference (Gateway caCertificateRefs, the injector's name selector).
        lines.append(f"Bundle:  ClusterTrustBundle {report['stableBundle']} (stable name)")
    for ca in report["cas"]:
        extra = f", retire at {ca['retireAt']}" if ca.get("retireAt") else ""
        if ca["role"] == "previous" and not ca.get("retireAt"):
            extra = ", retire time set once the swap is read back"
        lines.append(
            f"  {ca['role']:<9} {ca['fingerprint'][:16]}…  valid {ca['notBefore']} → "
            f"{ca['notAfter']}  {'published' if ca['published'] else 'NOT published'}{extra}"
        )
    for name, value in (report.get("times") or {}).items():
        if value:
            lines.append(f"  {name}: {value}")
    for r in report["replicas"]:
        lines.append(
            f"  replica {r['replica']}: {'live' if r['live'] else 'expired'}"
            + (", has loaded the next CA" if r["loadedNext"] else "")
            + (f", signs with {r['signingCA'][:16]}…" if r["signingCA"] else "")
            + (f", ready to sign with {r['readyToSign'][:16]}…" if r["readyToSign"] else "")
        )
    if "waitingFor" in report:
        until = f" until {report['until']}" if report["until"] else ""
        lines.append(f"Waiting: {report['waitingFor']}{until}")
    else:
        lines.append(f"Next step: {report['next']} (the leader acts within seconds)")
    return lines


@click.command("rotate")
@_options
def ca_rotate(kubeconfig: str | None, namespace: str, secret_name: str, signer_name: str) -> None:
    """Ask the leader to rotate the managed CA now (stage → swap → retire, gated)."""
    from kube.client import ApiError, is_conflict, is_not_found, path_segment
    from managedca.codec import ROTATE_REQUESTED_AT, decode

    client = cli_client(kubeconfig)
    path = f"/api/v1/namespaces/{path_segment(namespace)}/secrets/{path_segment(secret_name)}"
    for _ in range(5):
        try:
            secret = client.get(path)
        except ApiError as err:
            if is_not_found(err):
                raise StartupError(
                    f"ca rotate: no managed CA Secret {namespace}/{secret_name} "
                    "(is the signer running with --ca-mode=managed?)"
                ) from None
            raise StartupError(f"ca rotate: {err}") from None
        state = decode(secret).state
        if state.next is not None:
            raise StartupError(
                f"ca rotate: a rotation is already under way (next CA "
                f"{state.next.fingerprint[:16]}…); see `ca status`"
            )
        if state.rotate_requested_at is not None:
            click.echo(f"a rotation was already requested at {_t(state.rotate_requested_at)}")
            return
        meta = secret["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "annotations": {ROTATE_REQUESTED_AT: format_time(datetime.now(UTC))},
            }
        }
        try:
            client.patch(path, patch)
        except ApiError as err:
            if is_conflict(err):
                continue
            raise StartupError(f"ca rotate: {err}") from None
        click.echo(
            f"rotation requested for {namespace}/{secret_name}; the leader stages the next "
            "CA within seconds; follow it with `service-serving-signer ca status`"
        )
        return
    raise StartupError("ca rotate: the Secret kept changing; try again")


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
