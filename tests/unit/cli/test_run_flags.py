"""Each `run` flag is declared twice — a click option in `cli/main.py` (help, environment
variable, default as typed) and an `Options` field in `manager/options.py` (the default
the process and the tests construct with) — and these tests hold the two as one: every
flag has its field and every field its flag, the defaults are equal once click has
parsed them, and every flag reads its own environment variable and says what it does."""

from __future__ import annotations

import dataclasses
from typing import Any

import click
import pytest

from cli.main import env_name, main
from manager.options import Options, default_leader_election_namespace, parse_controllers

RUN = main.commands["run"]
assert isinstance(RUN, click.Command)
PARAMS = {p.name: p for p in RUN.params if isinstance(p, click.Option) and p.name != "help"}
FIELDS = {f.name: f for f in dataclasses.fields(Options)}


def _field_default(name: str) -> Any:
    field = FIELDS[name]
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


def _parsed_default(param: click.Option) -> Any:
    """The value `run` hands to `Options` when the flag is not given, as `build_options`
    completes it."""
    context = RUN.make_context("run", [], resilient_parsing=True)
    value = param.type_cast_value(context, param.get_default(context, call=True))
    if param.name == "controllers":
        return parse_controllers(value)
    if param.name == "leader_elect_resource_namespace" and value is None:
        # Outside a Pod, with no $POD_NAMESPACE: what the process would compute.
        return default_leader_election_namespace("/nonexistent", environ={})
    return value


def test_every_run_flag_is_an_options_field_and_every_field_a_flag() -> None:
    assert sorted(PARAMS) == sorted(FIELDS)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_a_flags_default_is_its_options_fields(name: str) -> None:
    """A flag left out gives the process what `Options()` gives a test: otherwise a default
    changed in one place would hold in the tests and not in production, or back."""
    if FIELDS[name].default is dataclasses.MISSING and FIELDS[name].default_factory is (
        dataclasses.MISSING
    ):
        assert PARAMS[name].default == ""  # required with some controllers: no default
        return
    assert _parsed_default(PARAMS[name]) == _field_default(name)


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_a_flag_reads_its_own_environment_variable_and_shows_it(name: str) -> None:
    param = PARAMS[name]
    long = next(o for o in param.opts if o.startswith("--"))
    envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
    assert envvars[0] == env_name(long)
    assert param.show_envvar


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_a_flag_with_a_default_shows_it_in_help(name: str) -> None:
    param = PARAMS[name]
    assert param.help
    if param.default not in ("", None, ()):
        assert param.show_default
