"""The click pieces every command module shares: the `Group` whose errors are one line,
`StartupError`, the `Duration` and `Address` parameter types, and `-o/--output`. Apart
from `cli.py` so that the command modules (`ca_cli`, `explain_cli`) import them without
importing the CLI that registers them (no import cycle)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from manager.options import BindAddress, OptionsError, parse_bind_address, parse_duration

if TYPE_CHECKING:
    from kube.client import Client

    _DurationBase = click.ParamType[float, Any]
    _AddressBase = click.ParamType[BindAddress | None, Any]
else:  # click < 8.3 has no generic ParamType
    _DurationBase = _AddressBase = click.ParamType


def one_line(text: str) -> str:
    """`text` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


class StartupError(click.ClickException):
    """A failure before the process serves: printed as one `error:` line, exit 1."""


def client(
    kubeconfig: str | None, *, qps: float = 0, burst: int = 1, context: str | None = None
) -> Client:
    """The API client a command reads with (`kube.client.connect`); a kubeconfig that
    gives none is the command's one `error: kubeconfig: …` line. No write limiter by
    default: a command makes a handful of requests."""
    from kube.client import KubeconfigError, connect

    try:
        return connect(kubeconfig, qps=qps, burst=burst, context=context)
    except KubeconfigError as err:
        raise StartupError(str(err)) from None


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
