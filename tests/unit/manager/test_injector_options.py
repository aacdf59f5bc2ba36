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


def test_the_trust_distributor_without_the_injector_is_refused() -> None:
    # Its copies are filled and kept current by the injector's ConfigMap target: alone it
    # would create ConfigMaps nobody keeps current after the first rotation.
    with pytest.raises(OptionsError, match=r"trust-distributor.*injector"):
        parse_controllers(["trust-distributor"])
    with pytest.raises(OptionsError, match=r"trust-distributor.*injector"):
        parse_controllers(["injector,trust-distributor", "-injector"])
    assert parse_controllers(["injector,trust-distributor"]) == {"injector", "trust-distributor"}
