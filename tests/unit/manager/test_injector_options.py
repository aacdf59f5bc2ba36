"""`--controllers` and the opt-in injector: `*` leaves it off, naming it turns it on, and
an injector-only process needs none of the signing-material files."""

from __future__ import annotations

import pytest

from manager.options import Options, OptionsError, parse_controllers


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["*"], {"signer", "publisher"}),
        (["*,injector"], {"signer", "publisher", "injector"}),
        (["injector"], {"injector"}),
        (["*", "injector", "-publisher"], {"signer", "injector"}),
    ],
)
def test_injector_is_opt_in(items: list[str], expected: set[str]) -> None:
    assert parse_controllers(items) == frozenset(expected)


def test_injector_alone_needs_no_signing_files() -> None:
    opts = Options("", "", "", controllers=frozenset({"injector"}))
    assert opts.controllers == {"injector"}


def test_signing_files_still_required_with_the_signer() -> None:
    with pytest.raises(OptionsError, match="--service-serving-key: required"):
        Options("", "", "", controllers=frozenset({"signer", "injector"}))
