"""The click pieces every command module shares: the `Group` whose errors are one line,
`StartupError`, the `Duration` and `Address` parameter types, `-o/--output`, and the
connection options with kubectl's meaning. Apart from `cli.main` so that the command
modules (`cli.ca`, `cli.explain`) import them without importing the CLI that registers
them (no import cycle).

Connection options — one meaning on every command that reads the cluster (`status`,
`explain`, `ca status`, `ca rotate`, `bundle resolve`):

* **Credentials, found as kubectl finds them**: `--kubeconfig FILE` (a missing file is an
  error naming it), else `$KUBECONFIG` (a colon-separated list, merged; files that do
  not exist are skipped, as kubectl skips them), else `~/.kube/config` if it exists,
  else the in-cluster ServiceAccount. `--context` picks the context. So a CI or toolbox
  Pod whose `$KUBECONFIG` names another cluster acts on that cluster, not its own.
  (`run`, the controller, keeps kube-controller-manager's order: `--kubeconfig`, else
  in-cluster; it is no command of a person's.)
* **`-n/--namespace`** is kubectl's: the namespace of the workload objects a command
  reads (Pods, PodCertificateRequests), default the context's namespace, else
  `default`. The signer's own namespace (its Leases, the managed CA Secret) is
  `--signer-namespace` wherever a command reads it. `ca status` and `ca rotate` read no
  workload object, so `-n` there is refused with a pointer to `--signer-namespace` (it
  used to name the signer's namespace: a silent change of meaning would act elsewhere);
  `bundle resolve` reads cluster-scoped objects and ignores `-n`, as kubectl does.
* **Errors** are one line naming the file or the object and never a library's class
  name: an unreachable server is `cannot reach the API server at HOST: connection
  refused` (`api_problem`), an answer is the API server's own message with its reason.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import click

from manager.options import BindAddress, OptionsError, parse_bind_address, parse_duration

if TYPE_CHECKING:
    _DurationBase = click.ParamType[float, Any]
    _AddressBase = click.ParamType[BindAddress | None, Any]
else:  # click < 8.3 has no generic ParamType
    _DurationBase = _AddressBase = click.ParamType


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


class StartupError(click.ClickException):
    """A failure before the process serves: printed as one `error:` line, exit 1."""


DEFAULT_SIGNER_NAMESPACE = "service-serving-signer"
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


class Connection:
    """A client and the namespace, resolved from the connection options as kubectl
    resolves them (module docstring). Nothing is sent to the server here."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespace: str | None = None,
        *,
        qps: float = 0,
        burst: int = 1,
    ) -> None:
        from kube.client import KubeconfigError
        from kube.client import connect as kube_connect

        paths = kubeconfig_paths(kubeconfig, context)
        self.namespace_flag = namespace
        context_namespace: str | None
        try:
            if paths is None:
                # No write limiter by default: a command makes a handful of requests.
                self.client = kube_connect(None, qps=qps, burst=burst)
                self.source = "the in-cluster ServiceAccount"
                context_namespace = _read(IN_CLUSTER_NAMESPACE)
            else:
                joined = os.pathsep.join(paths)
                self.source = f"kubeconfig {joined}" + (f" (context {context})" if context else "")
                self.client = kube_connect(joined, qps=qps, burst=burst, context=context)
                context_namespace = _context_namespace(joined, context)
        except KubeconfigError as err:
            problem = str(err).removeprefix("kubeconfig: ")
            raise StartupError(f"{self.source}: {problem}") from None
        except Exception as err:
            raise StartupError(f"{self.source}: {one_line(str(err))}") from None
        self.namespace = namespace or context_namespace or "default"

    @property
    def host(self) -> str:
        return str(self.client.host)

    def problem(self, err: BaseException) -> str:
        """`err` from a request as one line for a person (`api_problem`)."""
        return api_problem(err, self.host)


def kubeconfig_paths(flag: str | None, context: str | None = None) -> list[str] | None:
    """The kubeconfig files to merge, as kubectl picks them; None: in-cluster."""
    if flag:
        if not Path(flag).expanduser().is_file():
            raise StartupError(f"kubeconfig {flag}: no such file")
        return [str(Path(flag).expanduser())]
    env = os.environ.get("KUBECONFIG", "")
    if env:
        listed = [p for p in env.split(os.pathsep) if p]
        found = [p for p in listed if Path(p).expanduser().is_file()]
        if found:
            return found
        raise StartupError(f"$KUBECONFIG={env}: no such file" + ("s" if len(listed) > 1 else ""))
    default = Path("~/.kube/config").expanduser()
    if default.is_file():
        return [str(default)]
    if context is not None:
        raise StartupError(f"--context {context}: no kubeconfig file ({default} does not exist)")
    if not (os.environ.get("KUBERNETES_SERVICE_HOST") and IN_CLUSTER_TOKEN.is_file()):
        raise StartupError(
            f"no kubeconfig: no --kubeconfig, $KUBECONFIG is unset, {default} does not "
            "exist, and this is not a Pod (no in-cluster ServiceAccount)"
        )
    return None


def _context_namespace(path: str, context: str | None) -> str | None:
    from kubernetes.config import kube_config

    loader: Any = kube_config._get_kube_config_loader(filename=path, active_context=context)
    current: Any = loader.current_context
    value = ((current or {}).get("context") or {}).get("namespace")
    return str(value) if value else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def api_problem(err: BaseException, host: str = "") -> str:
    """One line for a failed request, as kubectl words it: an unreachable server names the
    server and what failed (refused, timed out, name not resolved, TLS); an answer from
    the server is its message with its reason. Never a library's class name."""
    from kube.client import ApiError

    if isinstance(err, ApiError) and err.status != 0:
        message = one_line(str(err.body.get("message") or err.reason))
        reason = err.api_reason or err.reason or str(err.status)
        return f"from the API server ({reason}): {message}"
    where = urlsplit(host).netloc or host or "the API server"
    return f"cannot reach the API server at {where}: {_unreachable(err)}"


def _causes(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _unreachable(err: BaseException) -> str:
    for cause in _causes(err):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS: {cause.verify_message or 'certificate verify failed'}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS: {cause.reason or 'handshake failed'}"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (is the server running, and is this the right kubeconfig?)"
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve the host ({cause.strerror})"
        if isinstance(cause, TimeoutError):
            return "timed out"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
    text = one_line(str(err))
    # "0 NewConnectionError: …" from the transport: keep what follows the class name.
    _, _, tail = text.partition(": ")
    return tail or text


HELP_OPTION_NAMES = ["-h", "--help"]
F = TypeVar("F", bound=Callable[..., Any])


def output_option(help: str, formats: tuple[str, ...] = ("text", "json")) -> Callable[[F], F]:
    """`-o/--output FORMAT`, default text, as every command that prints a report takes it."""
    return click.option(
        "--output",
        "-o",
        type=click.Choice(formats),
        default="text",
        show_default=True,
        help=help,
    )


def connection_options(f: F) -> F:
    """`-n/--namespace`, `--context` and `--kubeconfig`, with one meaning everywhere (the
    module docstring); the command gets `namespace`, `context` and `kubeconfig`."""
    return _connection_options(f, reads_workloads=True)


def signer_connection_options(f: F) -> F:
    """`connection_options` for a command that reads no workload: its `-n` is accepted only
    to be refused (`refuse_namespace`), so the help does not list it."""
    return _connection_options(f, reads_workloads=False)


def _connection_options(f: F, *, reads_workloads: bool) -> F:
    for option in reversed(
        [
            click.option(
                "-n",
                "--namespace",
                default=None,
                hidden=not reads_workloads,
                help="Namespace of the workloads to read (default: the context's, else "
                "'default'), as kubectl.",
            ),
            click.option("--context", default=None, help="The kubeconfig context to use."),
            click.option(
                "--kubeconfig",
                default=None,
                metavar="FILE",
                help="Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then "
                "in-cluster), as kubectl.",
            ),
        ]
    ):
        f = option(f)
    return f


def signer_namespace_option(*aliases: str) -> Callable[[F], F]:
    """`--signer-namespace`: where the signer runs (its Leases, the managed CA Secret)."""
    return click.option(
        "--signer-namespace",
        *aliases,
        "signer_namespace",
        default=DEFAULT_SIGNER_NAMESPACE,
        show_default=True,
        help="Namespace the signer runs in (its Leases, the managed CA Secret)"
        + (f"; {', '.join(aliases)} is an older name" if aliases else "")
        + ".",
    )


def refuse_namespace(command: str, namespace: str | None) -> None:
    """For a command that reads no workload: `-n` is refused, never reinterpreted."""
    if namespace is not None:
        raise StartupError(
            f"{command}: -n/--namespace names the workloads' namespace, and {command} reads "
            "none; the signer's namespace is --signer-namespace (default "
            f"{DEFAULT_SIGNER_NAMESPACE})"
        )


OUTPUT_FORMATS = ("text", "json", "yaml")


def emit(body: Any, output: str) -> None:
    """Print `body` as `-o json` (indented) or `-o yaml` (keys in their order)."""
    if output == "yaml":
        import yaml

        click.echo(yaml.safe_dump(body, sort_keys=False, default_flow_style=False), nl=False)
    else:
        import json

        click.echo(json.dumps(body, indent=2))


class Group(click.Group):
    """A click group whose errors are one `error: …` line and exit status 1, and whose
    every command takes `-h` as well as `--help` (set on each command, not only inherited
    from the group's context: a command can be invoked on its own)."""

    group_class = type  # subgroups are `Group`s too

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        cmd.context_settings.setdefault("help_option_names", HELP_OPTION_NAMES)
        super().add_command(cmd, name)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            result = super().main(*args, **kwargs)
        except click.ClickException as err:
            click.echo(f"error: {one_line(err.format_message())}", err=True)
            sys.exit(1)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


class Duration(_DurationBase):
    """A Go duration (`24h`, `15s`, `1h30m`) converted to seconds."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as err:
            self.fail(str(err), param, ctx)


class Address(_AddressBase):
    """`host:port`, `:port`, or `0` (disabled → None)."""

    name = "address"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> BindAddress | None:
        if value is None or isinstance(value, BindAddress):
            return value
        try:
            return parse_bind_address(str(value))
        except OptionsError as err:
            self.fail(err.problem, param, ctx)
