"""The `explain` and `status` commands, with kubectl's habits, also as a kubectl plugin.

What it decides — the command-line surface of the read-only troubleshooting tools:

* **Where to connect, as kubectl does** (`cli.common`'s connection options):
  `--kubeconfig`, else `$KUBECONFIG` (a colon-separated list, merged), else
  `~/.kube/config`, else the in-cluster ServiceAccount; `--context` picks the context;
  `-n/--namespace` (the workloads') defaults to the context's namespace, else `default`;
  `--signer-namespace` is where the signer runs (`--lease-namespace`, its older name).
* **What to name**: `explain pod NAME -n NS`, `explain pod NS/NAME`, `explain pod/NAME`,
  and the same for `pcr` (alias `podcertificaterequest`); `explain --all [-n NS]` is
  `status` for one namespace (every namespace without `-n`).
* **Output**: text, or `-o json|yaml` (camelCase keys, `troubleshoot.render`).
* **The plugin**: the console script `kubectl-service_serving` is this group, so
  `kubectl service-serving explain …` and `kubectl service-serving status` work (kubectl
  maps `-` in a plugin name to `_` when it looks for the executable).
* **Failures** are one `error:` line and exit status 1: an unreadable kubeconfig, a
  missing object, or a refused read the answer needs — naming (verb, resource, namespace)
  and the `kubectl auth can-i` line that checks it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from cli.common import (
    OUTPUT_FORMATS,
    Connection,
    Duration,
    F,
    Group,
    StartupError,
    connection_options,
    one_line,
    output_option,
    signer_namespace_option,
)
from manager.options import DEFAULT_SIGNER_NAME, PCR_API_VERSIONS

if TYPE_CHECKING:
    from kube.client import Client
    from troubleshoot.explain import Explainer
    from troubleshoot.leasehealth import Health

KINDS = {"pod": "pod", "pods": "pod", "po": "pod"} | dict.fromkeys(
    ("pcr", "pcrs", "podcertificaterequest", "podcertificaterequests"), "pcr"
)
VIEW_ROLE = "service-serving-signer-view"


def explain_options(f: F) -> F:
    for option in reversed(
        [
            connection_options,
            click.option(
                "--signer-name",
                default=DEFAULT_SIGNER_NAME,
                show_default=True,
                help="Signer whose requests to explain (the signer's --signer-name).",
            ),
            click.option(
                "--cluster-service-domain",
                default="cluster.local",
                show_default=True,
                help="Domain the signer appends to Service and Pod names (as its run flag).",
            ),
            click.option(
                "--pcr-api-version",
                type=click.Choice(PCR_API_VERSIONS),
                default="auto",
                show_default=True,
                help="PodCertificateRequest API version to read; auto = newest served.",
            ),
            signer_namespace_option("--lease-namespace"),
            click.option(
                "--lease-name",
                default="service-serving-signer",
                show_default=True,
                help="Name of the signer's leader Lease (--leader-elect-resource-name).",
            ),
            output_option(
                "Output format; json and yaml keys are camelCase, as kubectl prints.",
                OUTPUT_FORMATS,
            ),
        ]
    ):
        f = option(f)
    return f


max_requests_option = click.option(
    "--max-requests",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Decide and show at most this many requests (oldest first); the rest are counted.",
)


def _setup(
    conn: Connection,
    *,
    signer_name: str,
    cluster_service_domain: str,
    pcr_api_version: str,
    signer_namespace: str,
    lease_name: str,
) -> tuple[Explainer, Health]:
    from kube.discovery import served_version
    from troubleshoot.explain import Explainer
    from troubleshoot.leasehealth import read_health
    from trust import clustertrustbundles

    client: Client = conn.client
    version = pcr_api_version
    if version == "auto":
        version = (
            served_version(
                client, "certificates.k8s.io", "podcertificaterequests", ["v1", "v1beta1"]
            )
            or ""
        )
        if not version:
            raise StartupError("the cluster serves no PodCertificateRequest API")
    ctb_version = clustertrustbundles.served_version(client)
    health = read_health(
        client,
        signer_name=signer_name,
        bundle_version=ctb_version,
        lease_namespace=signer_namespace,
        lease_name=lease_name,
    )
    explainer = Explainer(
        client,
        signer_name=signer_name,
        domain=cluster_service_domain,
        pcr_version=version,
        health=health,
    )
    return explainer, health


def _target(kind: str, name: str | None, namespace: str | None) -> tuple[str, str | None, str]:
    """(kind, namespace or None, name) from `pod NAME`, `pod NS/NAME` or `pod/NAME`."""
    if name is None and "/" in kind:
        kind, _, name = kind.partition("/")
    resolved = KINDS.get(kind.lower())
    if resolved is None:
        raise StartupError(f"explain: unknown kind {kind!r}; use pod or pcr")
    if not name:
        raise StartupError("explain: name a Pod or a request (explain pod NAME -n NS), or --all")
    ns, sep, short = name.rpartition("/")
    if sep and (not ns or not short or "/" in ns):
        raise StartupError(f"explain: {name!r} is not NAME or NAMESPACE/NAME")
    if sep and namespace and namespace != ns:
        raise StartupError(f"explain: {name!r} names namespace {ns}, but -n says {namespace}")
    return resolved, ns or None, short or name


def _access_error(command: str, err: Exception, conn: Connection) -> StartupError:
    from kube.client import ApiError
    from troubleshoot.access import AccessDenied, refusal

    if isinstance(err, ApiError):
        denied = refusal(err)
        if denied is None:
            return StartupError(f"{command}: {conn.problem(err)}")
        err = denied

    if isinstance(err, AccessDenied):
        if not err.missing.namespace and err.missing.namespaced:
            return StartupError(f"{command}: {err}; with -n NAMESPACE it reads one namespace")
        return StartupError(
            f"{command}: {err}; namespace view with the aggregated ClusterRole {VIEW_ROLE} "
            "grants what it reads"
        )
    return StartupError(f"{command}: {one_line(str(err))}")


@click.command("explain")
@click.argument("kind", metavar="(pod|pcr)[/NAME]", required=False)
@click.argument("name", metavar="[NAMESPACE/]NAME", required=False)
@click.option(
    "--all",
    "all_",
    is_flag=True,
    help="Every request not issued, as status does (with -n: one namespace).",
)
@max_requests_option
@explain_options
def explain_command(
    kind: str | None,
    name: str | None,
    all_: bool,
    max_requests: int,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
    output: str,
    **settings: Any,
) -> int:
    """Say what will happen to a Pod's certificate requests, why, and what to change.

    Read-only. Exit status: 0 issued or would be issued, 2 waits, 3 Denied/Failed or would
    be, 4 the Pod has no request for the signer, 5 nothing will act on it (no signer
    leading, or another signer's request), 1 error."""
    if all_:
        if kind or name:
            raise StartupError("explain: --all takes no Pod or request name")
        conn = Connection(kubeconfig, context, namespace)
        return _status(conn, namespace and conn.namespace, max_requests, output, settings)
    if kind is None:
        raise StartupError("explain: name a Pod or a request (explain pod NAME -n NS), or --all")
    resolved, target_ns, short = _target(kind, name, namespace)
    conn = Connection(kubeconfig, context, namespace)
    ns = target_ns or conn.namespace
    from kube.client import ApiError
    from troubleshoot.access import AccessDenied
    from troubleshoot.explain import ExplainError
    from troubleshoot.render import dump, render_text, report_json

    try:
        explainer, _ = _setup(conn, **settings)
        if resolved == "pod":
            report = explainer.explain_pod(ns, short)
        else:
            report = explainer.explain_pcr(ns, short)
    except (ExplainError, ApiError, AccessDenied) as err:
        raise _access_error("explain", err, conn) from None
    if output == "text":
        click.echo(render_text(report), nl=False)
    else:
        click.echo(dump(report_json(report), output), nl=False)
    return int(report.outcome)


@click.command("status")
@click.option(
    "-A", "--all-namespaces", is_flag=True, help="Every namespace (the default without -n)."
)
@click.option(
    "--wait",
    type=Duration(),
    default="0s",
    show_default=True,
    help="Wait up to this long (e.g. 2m) for a signer to act and its bundle to be published "
    "(exit 5 and 6 until then), as `cmctl check api --wait`; then report.",
)
@max_requests_option
@explain_options
# `status` takes explain's connection options (the decorator above), hence their parameters.
def status_command(
    all_namespaces: bool,
    wait: float,
    max_requests: int,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
    output: str,
    **settings: Any,
) -> int:
    """The signer's health and every request not issued, by namespace and reason.

    Read-only. Exit status: 0 a signer acts, its bundle is published and nothing waits or
    failed; 2 requests wait, were denied or failed; 5 no signer acts (none runs, or none
    leads); 6 no ClusterTrustBundle is published for the signer; 1 error."""
    conn = Connection(kubeconfig, context, namespace)
    scope = None if all_namespaces or namespace is None else conn.namespace
    return _status(conn, scope, max_requests, output, settings, wait=wait)


WAIT_POLL = 2.0  # seconds between looks while `status --wait` waits


def _status(
    conn: Connection,
    namespace: str | None,
    max_requests: int,
    output: str,
    settings: Any,
    *,
    wait: float = 0.0,
) -> int:
    import time

    from kube.client import ApiError
    from troubleshoot.access import AccessDenied
    from troubleshoot.render import dump
    from troubleshoot.status import (
        EXIT_NOT_PUBLISHED,
        EXIT_NOTHING_ACTS,
        collect,
        render_status,
        status_json,
    )

    deadline = time.monotonic() + wait
    while True:
        try:
            explainer, health = _setup(conn, **settings)
            status = collect(explainer, health, namespace=namespace, max_shown=max_requests)
        except (ApiError, AccessDenied) as err:
            if time.monotonic() < deadline and isinstance(err, ApiError) and err.transient:
                time.sleep(WAIT_POLL)
                continue
            raise _access_error("status", err, conn) from None
        down = status.exit_status in (EXIT_NOTHING_ACTS, EXIT_NOT_PUBLISHED)
        if not down or time.monotonic() + WAIT_POLL > deadline:
            break
        time.sleep(WAIT_POLL)
    if output == "text":
        click.echo(render_status(status), nl=False)
    else:
        click.echo(dump(status_json(status), output), nl=False)
    return status.exit_status


@click.group(
    cls=Group, context_settings={"max_content_width": 120, "help_option_names": ["-h", "--help"]}
)
def plugin() -> None:
    """kubectl service-serving: why a Pod's serving certificate waits, and the signer's
    health (read-only)."""


plugin.add_command(explain_command)
plugin.add_command(status_command)


def register(main: click.Group) -> None:
    main.add_command(explain_command)
    main.add_command(status_command)
