"""The `service-serving-signer` command line.

Decides the user-facing surface: flag names and syntax as kube-controller-manager spells
them (`--flag=value` and `--flag value`; `--leader-elect`, `--leader-elect=true`,
`--leader-elect=false`), one environment variable per flag
(`SERVICE_SERVING_SIGNER_<FLAG_IN_CAPS>`, the same for `run`'s flags whichever
subcommand they belong to), and how failures look: any start-up failure — a bad flag,
unusable signing material, an unreadable kubeconfig — is ONE line
`error: <what>: <problem>` on stderr and exit status 1, never a traceback and never key
material. Heavy imports (the controllers, the official client) happen inside the
commands, so `--help` and `version` stay fast.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from cli import ca as ca_cli
from cli import explain as explain_cli
from cli.common import (
    HELP_OPTION_NAMES,
    OUTPUT_FORMATS,
    Address,
    Connection,
    Duration,
    F,
    Group,
    StartupError,
    connection_options,
    emit,
    output_option,
    refuse_namespace,
    signer_connection_options,
    signer_namespace_option,
)
from manager import logs
from manager.options import (
    CA_MODES,
    DEFAULT_ADOPT_SECRET,
    DEFAULT_MANAGED_CA_SECRET,
    DEFAULT_SIGNER_NAME,
    LOG_FORMATS,
    MANAGED_CA_KEY_TYPES,
    PCR_API_VERSIONS,
    Options,
    OptionsError,
    default_leader_election_namespace,
    parse_controllers,
)
from trust import keys
from trust.convergence import REPORT_NAME

ENV_PREFIX = "SERVICE_SERVING_SIGNER"


def env_name(flag: str) -> str:
    """`--leader-elect-retry-period` → `SERVICE_SERVING_SIGNER_LEADER_ELECT_RETRY_PERIOD`."""
    return f"{ENV_PREFIX}_{flag.lstrip('-').replace('-', '_').upper()}"


class _Flag(click.Option):
    """An option whose error names its environment variable only when the value came from
    it: `--x=bad` on the command line is reported as `--x`, not as the variable."""

    def get_error_hint(self, ctx: click.Context | None) -> str:
        from click.core import ParameterSource

        source = ctx.get_parameter_source(self.name) if ctx and self.name else None
        if source is not None and source is not ParameterSource.ENVIRONMENT:
            return " / ".join(f"'{opt}'" for opt in self.opts)
        return super().get_error_hint(ctx)


def flag(*decls: str, **attrs: Any) -> Callable[[F], F]:
    """`click.option` with the project's environment variable for the long name, and its
    default shown in --help (unless it is empty)."""
    long = next(d for d in decls if d.startswith("--"))
    attrs.setdefault("cls", _Flag)
    attrs.setdefault("envvar", env_name(long))
    attrs.setdefault("show_envvar", True)
    if attrs.get("default") not in ("", None):
        attrs.setdefault("show_default", True)
    return click.option(*decls, **attrs)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(_version_line())
    ctx.exit(0)


def _version_line() -> str:
    from manager import buildinfo

    info = buildinfo.current()
    return f"{buildinfo.DISTRIBUTION} {info.version} (commit {info.commit})"


@click.group(
    cls=Group,
    context_settings={
        "auto_envvar_prefix": ENV_PREFIX,
        "max_content_width": 120,
        "help_option_names": HELP_OPTION_NAMES,
    },
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Print the version and the commit it was built from, then exit.",
)
def main() -> None:
    """The kubernetes.io/service-serving PodCertificateRequest signer and
    ClusterTrustBundle publisher (KEP-6283)."""


class KlogVerbosity(click.IntRange):
    """`-v` as klog spells it: `-v 4`, `-v4`, `--v=4` and also `-v=4` (which click would
    otherwise read as the value `=4`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith("="):
            value = value[1:]
        return super().convert(value, param, ctx)


# One @flag block per flag: click's declarations are the table that --help and the
# environment variables are read from.
@main.command("run")
@flag(
    "--service-serving-key",
    default="",
    metavar="FILE",
    help="PEM private key of the signing CA (required with the signer controller).",
)
@flag(
    "--service-serving-cert",
    default="",
    metavar="FILE",
    help="PEM signing certificate, then intermediates (not the root). Not the key file. "
    "Required with the signer controller.",
)
@flag(
    "--service-serving-trust-bundle",
    default="",
    metavar="FILE",
    help="PEM trust anchors to publish as the ClusterTrustBundle. "
    "Required with the signer or publisher.",
)
@flag(
    "--cluster-service-domain",
    default="cluster.local",
    help="Domain appended to Service and Pod names.",
)
@flag("--signer-name", default=DEFAULT_SIGNER_NAME, help="Signer name to serve and publish for.")
@flag(
    "--controllers",
    multiple=True,
    default=("*",),
    help="Controllers to run: '*' (signer and publisher), 'signer', 'publisher', "
    "'injector' (opt-in: '*,injector'), 'trust-distributor' (opt-in), '-publisher' "
    "(comma lists).",
)
@flag(
    "--max-certificate-lifetime",
    type=Duration(),
    default="24h",
    help="Upper cap on issued lifetimes; at most 24h for kubernetes.io/* signers.",
)
@flag("--concurrent-syncs", type=click.IntRange(min=1), default=4, help="Signer worker threads.")
@flag(
    "--publish-unlinked-bundle",
    type=click.BOOL,
    default=False,
    is_flag=False,
    flag_value=True,
    help="Opt-in: also publish the anchors as a ClusterTrustBundle without a signerName "
    "(<signer with '.'>.trust-anchors), which kubelet 1.35-1.37 refreshes by name at its next "
    "Pod resync; lowers the least --managed-ca-propagation-delay to 2m.",
)
@flag(
    "--waiting-resync-period",
    type=Duration(),
    default="5m",
    help="How often requests waiting on a Service are re-driven without an event "
    "(a safety net; cost proportional to the waiting requests).",
)
@flag(
    "--pod-identity-subject",
    type=click.BOOL,
    default=False,
    is_flag=False,
    flag_value=True,
    help="Opt-in (KEP-6283): subject CN=Pod name, O=namespace, UID=Pod UID instead of empty.",
)
@flag(
    "--cluster-ip-sans",
    type=click.BOOL,
    default=False,
    is_flag=False,
    flag_value=True,
    help="Opt-in (KEP-6283): each named Service's cluster IPs as IP SANs (headless: none). "
    "Off by default: a deleted Service's IP is reused by the next Service.",
)
@flag(
    "--pcr-api-version",
    type=click.Choice(PCR_API_VERSIONS),
    default="auto",
    help="PodCertificateRequest API version; auto = newest served.",
)
@flag(
    "--kubeconfig",
    default=None,
    metavar="FILE",
    help="Kubeconfig; default in-cluster config, then $KUBECONFIG.",
)
@flag("--kube-api-qps", type=float, default=50.0, help="Client-side write rate limit.")
@flag("--kube-api-burst", type=int, default=100, show_default=True, help="Client-side write burst.")
@flag(
    "--leader-elect",
    type=click.BOOL,
    default=True,
    is_flag=False,
    flag_value=True,
    help="Run only while holding the leader Lease (--leader-elect=false).",
)
@flag(
    "--leader-elect-lease-duration",
    type=Duration(),
    default="15s",
    help="How long a non-leader waits after the last renewal before taking the Lease.",
)
@flag(
    "--leader-elect-renew-deadline",
    type=Duration(),
    default="10s",
    help="How long the leader keeps retrying a renewal before it stops leading "
    "(less than the lease duration).",
)
@flag(
    "--leader-elect-retry-period",
    type=Duration(),
    default="2s",
    help="Wait between attempts to acquire or renew the Lease.",
)
@flag(
    "--leader-elect-resource-namespace",
    default=None,
    help="Lease namespace; default the Pod's namespace, else kube-system.",
)
@flag(
    "--leader-elect-resource-name",
    default="",
    help="Name of the leader-election Lease; default service-serving-signer for "
    "signer+publisher, else service-serving-signer-<controllers> "
    "(e.g. service-serving-signer-injector).",
)
@flag(
    "--metrics-bind-address",
    type=Address(),
    default=":10358",
    help="host:port for /metrics; 0 disables.",
)
@flag(
    "--metrics-secure",
    type=click.BOOL,
    default=False,
    is_flag=False,
    flag_value=True,
    help="Serve /metrics over TLS, only to callers the API server authenticates "
    "(TokenReview) and authorizes for get on /metrics (SubjectAccessReview), as "
    "kube-controller-manager does.",
)
@flag(
    "--metrics-tls-cert-file",
    default="",
    metavar="FILE",
    help="PEM certificate (and chain) for the secure metrics port; default a self-signed "
    "one made at start. Re-read when it changes.",
)
@flag(
    "--metrics-tls-private-key-file",
    default="",
    metavar="FILE",
    help="PEM private key of --metrics-tls-cert-file.",
)
@flag(
    "--health-probe-bind-address",
    type=Address(),
    default=":10359",
    help="host:port for /healthz and /readyz; 0 disables.",
)
@flag(
    "--ca-mode",
    type=click.Choice(CA_MODES),
    default="file",
    help="file: the CA comes from --service-serving-key/-cert/-trust-bundle (the KEP's "
    "contract). managed: the signer makes its CA, keeps it in a Secret and rotates it "
    "(docs/managed-ca.md).",
)
@flag(
    "--managed-ca-secret-name",
    default=DEFAULT_MANAGED_CA_SECRET,
    help="Secret holding the managed CA, in the leader-election namespace.",
)
@flag(
    "--managed-ca-adopt-secret-name",
    default=DEFAULT_ADOPT_SECRET,
    help="The file-mode CA Secret (kubernetes.io/tls) a first managed bootstrap adopts as "
    "its CA, in the leader-election namespace, so a move from file mode keeps signing; "
    "empty: adopt none (docs/managed-ca.md).",
)
@flag(
    "--managed-ca-key-type",
    type=click.Choice(MANAGED_CA_KEY_TYPES),
    default=keys.DEFAULT_KEY_TYPE,
    help="Key algorithm of a managed CA.",
)
@flag(
    "--managed-ca-lifetime",
    type=Duration(),
    default="8760h",
    help="Lifetime of a managed CA certificate.",
)
@flag(
    "--managed-ca-rotate-at",
    type=float,
    default=0.5,
    help="Fraction of a managed CA's life after which its successor is staged.",
)
@flag(
    "--managed-ca-propagation-delay",
    type=Duration(),
    default="10m",
    help="Wait after the bundle holds both CAs before signing with the new one (covers "
    "kubelet's clusterTrustBundle projection refresh).",
)
@flag(
    "--managed-ca-retire-margin",
    type=Duration(),
    default="1h",
    help="Added to swap time + --max-certificate-lifetime before an old root leaves the bundle.",
)
@flag(
    "--managed-ca-keep-previous",
    type=click.IntRange(min=0),
    default=0,
    help="Previous roots kept in the bundle after their retire time, until they expire.",
)
@flag(
    "--managed-ca-allow-short-propagation-delay",
    type=click.BOOL,
    default=False,
    is_flag=False,
    flag_value=True,
    help="Accept a --managed-ca-propagation-delay below kubelet's worst case (6m30s; 2m with "
    "--publish-unlinked-bundle); clients may then get leaves their projected bundle cannot "
    "verify yet.",
)
@flag(
    "--managed-ca-wait-for-injector",
    type=click.Choice(("auto", "true", "false")),
    default="auto",
    help="Hold a swap until the caBundle injector's convergence report says every object it "
    "manages holds the next CA: auto (when the report exists), true (absent blocks), false.",
)
@flag(
    "--managed-ca-injector-report",
    default=REPORT_NAME,
    help="The injector's convergence report Lease, in --leader-elect-resource-namespace: "
    "the injector writes it and the managed CA reads it (give both the same value).",
)
@flag(
    "--logging-format",
    "--log-format",
    "log_format",
    type=click.Choice(LOG_FORMATS),
    default="text",
    # component-base's name first; the old name (flag and variable) stays an alias
    envvar=[env_name("--logging-format"), env_name("--log-format")],
    help="Log format: text (klog's) or json (component-base's). --log-format is an alias.",
)
@flag(
    "-v",
    "--v",
    "verbosity",
    type=KlogVerbosity(min=0),
    default=0,
    help="Log verbosity (klog style).",
)
def run_command(**values: Any) -> int:
    """Run the signer and publisher controllers (the production entry point)."""
    opts = build_options(values)
    logs.configure(opts.log_format, opts.verbosity)
    logs.fast_records()
    from manager.app import StartupFailure, run

    try:
        return run(opts)
    except StartupFailure as err:
        raise StartupError(str(err)) from None


def build_options(values: dict[str, Any]) -> Options:
    """`run`'s parsed click values → validated `Options` (one-line errors)."""
    try:
        controllers = parse_controllers(values.pop("controllers"))
        namespace = values.pop("leader_elect_resource_namespace") or (
            default_leader_election_namespace()
        )
        return Options(controllers=controllers, leader_elect_resource_namespace=namespace, **values)
    except OptionsError as err:
        raise StartupError(str(err)) from None


@main.command(
    "demo",
    hidden=True,
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
def demo_command() -> None:
    """A development command: says where it lives instead of running."""
    # The demo drives the local control plane (controlplane/), which the image and the
    # wheel do not carry, and no runtime package imports it. A hidden command, so an old
    # `service-serving-signer demo` habit gets directions instead of "no such command".
    raise StartupError(
        "demo needs the local control plane (controlplane/), which only a development "
        "checkout has: git clone the project and run `make demo` "
        "(python -m controlplane.demo)"
    )


@main.group("bundle")
def bundle_group() -> None:
    """Read ClusterTrustBundles from the cluster."""


@bundle_group.command("resolve")
@click.option("--name", default=None, help="Select one ClusterTrustBundle by name.")
@click.option("--signer-name", default=None, help="Select the bundles of this signer.")
@click.option(
    "--selector",
    "-l",
    default=None,
    help="Label selector (kubectl -l syntax) among the signer's bundles; "
    "omitted matches nothing, '' matches all (KEP-6283).",
)
@connection_options
@output_option(
    "text: the PEM bundle; json or yaml: the selector and the bundle (trustBundle).",
    OUTPUT_FORMATS,
)
def bundle_resolve(
    name: str | None,
    signer_name: str | None,
    selector: str | None,
    namespace: str | None,
    context: str | None,
    kubeconfig: str | None,
    output: str,
) -> None:
    """Print the unified trust bundle a ClusterTrustBundleSelector picks.

    ClusterTrustBundles are cluster-scoped: -n is ignored, as kubectl ignores it."""
    if (name is None) == (signer_name is None):
        raise StartupError("bundle resolve: give exactly one of --name or --signer-name")
    if name is not None and selector is not None:
        raise StartupError("bundle resolve: --selector goes with --signer-name, not --name")
    from kube.labels import SelectorSyntaxError, parse_label_selector

    spec: dict[str, Any]
    if name is not None:
        spec = {"name": name}
    else:
        spec = {"signerName": signer_name}
        if selector is not None:
            try:
                spec["labelSelector"] = parse_label_selector(selector)
            except SelectorSyntaxError as err:
                raise StartupError(f"--selector: {err}") from None
    bundles = _list_bundles(kubeconfig, context, name=name, signer_name=signer_name)
    from trust.bundle import BundleError
    from trust.selector import resolve_selector

    try:
        pem = resolve_selector(bundles, spec)
    except BundleError as err:
        raise StartupError(f"bundle resolve: {_zero_match(err, spec, bundles)}") from None
    if output == "text":
        click.echo(pem, nl=False)
    else:
        emit({"selector": spec, "trustBundle": pem}, output)


def _zero_match(err: Exception, spec: dict[str, Any], bundles: list[dict[str, Any]]) -> str:
    """Why `spec` selected nothing, and what would select the bundles there are. Pure."""
    from trust.bundle import stable_bundle_name

    if "name" in spec:
        return f"no ClusterTrustBundle is named {spec['name']!r}"
    signer = str(spec["signerName"])
    names = sorted(str(b["metadata"]["name"]) for b in bundles)
    if not names:
        return (
            f"no ClusterTrustBundle has signerName {signer} (is its signer running? "
            "`service-serving-signer status`)"
        )
    listed = f"{len(names)} bundle{'s' if len(names) > 1 else ''} of {signer} exist"
    listed += f" ({', '.join(names)})"
    if "labelSelector" not in spec:
        every = json.dumps({"signerName": signer, "labelSelector": {}})
        line = (
            f"{err}: a signerName selector without a labelSelector matches nothing "
            f"(KEP-6283, as the kubelet's clusterTrustBundle projection does); {listed}: "
            f"`-l ''` selects all of them (selector {every})"
        )
        stable = stable_bundle_name(signer)
        if stable in names:
            line += f", `--name {stable}` the one whose name survives rotations"
        return line
    labels = sorted(
        {f"{k}={v}" for b in bundles for k, v in (b["metadata"].get("labels") or {}).items()}
    )
    return f"{err}: {listed}, labelled {', '.join(labels) or 'with no labels'}; `-l ''` selects all"


def _list_bundles(
    kubeconfig: str | None, context: str | None, *, name: str | None, signer_name: str | None
) -> list[dict[str, Any]]:
    from kube.client import ApiError, is_not_found, path_segment
    from trust.clustertrustbundles import bundles_path, served_version, signer_bundles

    conn = Connection(kubeconfig, context)
    client = conn.client
    try:
        version = served_version(client)
        if version is None:
            raise StartupError("bundle resolve: the cluster serves no ClusterTrustBundle API")
        if name is not None:
            try:
                return [client.get(f"{bundles_path(version)}/{path_segment(name)}")]
            except ApiError as err:
                if is_not_found(err):
                    return []
                raise
        return signer_bundles(client, version, signer_name or "")
    except ApiError as err:
        raise StartupError(f"bundle resolve: {conn.problem(err)}") from None


@main.command("version")
@output_option(
    "Output format; json and yaml keys are camelCase, as kubectl prints.", OUTPUT_FORMATS
)
@click.option(
    "--client",
    "client_only",
    is_flag=True,
    help="Only the CLI's version; do not read the cluster.",
)
@signer_connection_options
@signer_namespace_option()
@click.option(
    "--lease-name",
    default="service-serving-signer",
    show_default=True,
    help="The signer's leader-election Lease (run's --leader-elect-resource-name); its "
    "presence Lease, beside it, names the running signer's version.",
)
def version_command(
    output: str,
    client_only: bool,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    signer_namespace: str,
    lease_name: str,
) -> None:
    """Print the CLI's version and commit, the version of the signer that runs (its
    presence Lease says it, whatever installed it), and the image each deployed signer and
    injector Deployment in --signer-namespace runs (as `cmctl version`; `--client` for the
    CLI only). A cluster that cannot be read is reported, not an error: the exit status
    is 0."""
    from manager import buildinfo

    info = buildinfo.current()
    body: dict[str, Any] = {
        "name": buildinfo.DISTRIBUTION,
        "version": info.version,
        "commit": info.commit,
    }
    if not client_only:
        refuse_namespace("version", namespace)
        try:
            connection = Connection(kubeconfig, context)
            body["running"] = _running(connection, signer_namespace, lease_name)
            body["deployed"] = _deployed(connection, signer_namespace)
        except StartupError as err:
            body.pop("running", None)
            body["deployedError"] = err.format_message()
    if output == "json":
        click.echo(json.dumps(body))
    elif output == "yaml":
        emit(body, output)
    else:
        click.echo(_version_line())
        if "deployedError" in body:
            click.echo(f"deployed: unknown ({body['deployedError']})")
        if "running" in body:
            click.echo(f"deployed: {_running_text(body['running'])}")
        if "deployed" in body and not body["deployed"]:
            click.echo(f"deployed: no signer Deployment in namespace {signer_namespace}")
        for deployed in body.get("deployed", []):
            version = f" (version {deployed['version']})" if deployed["version"] else ""
            click.echo(f"deployed: {deployed['deployment']}: {deployed['image']}{version}")


DEPLOYMENT_NAMES = ("service-serving-signer", "service-serving-signer-injector")


def _running(connection: Connection, namespace: str, lease_name: str) -> dict[str, Any]:
    """The running signer as its presence Lease says (every signer process renews it, with
    its version, however it was installed): `state` alive, expired, missing or forbidden."""
    from kube import presence
    from kube.client import ApiError
    from signer import presence as signer_presence

    name = signer_presence.presence_name(lease_name)
    body: dict[str, Any] = {"presenceLease": f"{namespace}/{name}"}
    try:
        found = presence.read(connection.client, namespace, name)
    except ApiError as err:
        if err.status != 403:
            raise StartupError(connection.problem(err)) from None
        return {**body, "state": "forbidden", "version": None}
    except OSError as err:
        raise StartupError(connection.problem(err)) from None
    age = found.renewal.age_seconds
    return {
        **body,
        "state": found.state.value,
        "version": found.annotations.get(signer_presence.VERSION),
        "renewedSecondsAgo": None if age is None else round(age),
    }


def _running_text(running: dict[str, Any]) -> str:
    """One line: which version runs, or why none is known. Pure."""
    from datetime import timedelta

    from kube.times import span

    lease = f"presence Lease {running['presenceLease']}"
    version = running.get("version") or "of unknown version"
    ago = running.get("renewedSecondsAgo")
    renewed = f"renewed {span(timedelta(seconds=ago))} ago" if ago is not None else "never renewed"
    if running["state"] == "alive":
        return f"service-serving-signer {version} runs ({lease}, {renewed})"
    if running["state"] == "expired":
        return f"no signer runs now ({lease} {renewed}, by service-serving-signer {version})"
    if running["state"] == "missing":
        return f"no signer runs ({lease} does not exist)"
    return f"running version unknown (cannot get the {lease})"


def _deployed(connection: Connection, namespace: str) -> list[dict[str, str]]:
    """The signer's and the injector's Deployments in `namespace` (by their
    app.kubernetes.io/name label, as config/ and the chart set it): name, image, version."""
    from kube.client import ApiError

    selector = f"app.kubernetes.io/name in ({','.join(DEPLOYMENT_NAMES)})"
    try:
        listed = connection.client.get(
            f"/apis/apps/v1/namespaces/{namespace}/deployments", {"labelSelector": selector}
        )
    except (ApiError, OSError) as err:
        raise StartupError(connection.problem(err)) from None
    found = []
    for item in listed.get("items") or []:
        meta = item["metadata"]
        for container in item["spec"]["template"]["spec"]["containers"]:
            found.append(
                {
                    "deployment": f"{meta['namespace']}/{meta['name']}",
                    "image": str(container.get("image", "")),
                    "version": str((meta.get("labels") or {}).get("app.kubernetes.io/version", "")),
                }
            )
    return sorted(found, key=lambda d: d["deployment"])


# `ca status` and `ca rotate` (cli.ca); `explain` and `status` (cli.explain),
# here and as the kubectl plugin.
main.add_command(ca_cli.ca_group)
explain_cli.register(main)


def kubectl_plugin() -> None:
    """The `kubectl-service_serving_signer` and `kubectl-service_serving` console scripts:
    `kubectl service-serving-signer …`, `kubectl service-serving …` (help names the one
    invoked)."""
    import sys

    explain_cli.plugin.main(prog_name=plugin_name(sys.argv[0]))


def plugin_name(executable: str) -> str:
    """How kubectl names the plugin run as `executable`: `kubectl-a_b` → `kubectl a-b`."""
    from pathlib import Path

    name = Path(executable).name
    if not name.startswith("kubectl-"):
        return "kubectl service-serving-signer"
    return "kubectl " + name.removeprefix("kubectl-").replace("_", "-")


def entrypoint(argv: Sequence[str] | None = None) -> None:
    """`python -m cli` entry point."""
    main.main(args=list(argv) if argv is not None else None, prog_name="service-serving-signer")
