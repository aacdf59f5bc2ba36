"""The injector's records and decisions, pure: what a target records, what each
selection decides (no cache, no client)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest

from injector import decide as decisions
from injector.kinds import API_SERVICE, CRD, VALIDATING_WEBHOOK, to_target
from injector.targets import ANNOTATION, selector_record, value_digest
from tests.unit.injector.builders import (
    BAD_ANNOTATIONS,
    SELECT_ALL,
    SIGNER,
    api_service,
    b64,
    crd,
    ctb,
    pem,
    webhook_config,
)
from trust.bundle import normalize_bundle
from trust.selector import parse_selector_json

# records and apply bodies -------------------------------------------------------------


def test_webhook_record_keeps_only_names_and_digests_of_ca_bundles() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=("QQ==", "")))
    assert target.annotation == selector_record(SELECT_ALL)  # the canonical selector
    assert json.loads(target.annotation) == json.loads(SELECT_ALL)
    assert [(s.webhook, s.digest) for s in target.slots] == [
        ("w0.example.com", value_digest("QQ==")),
        ("w1.example.com", value_digest("")),
    ]
    assert target.not_applicable is None
    assert target.key == "ValidatingWebhookConfiguration/hooks"


@pytest.mark.parametrize(
    ("kind", "raw", "fragment"),
    [
        (API_SERVICE, api_service(), "local APIService"),
        (
            API_SERVICE,
            api_service(service={"name": "s", "namespace": "n"}, insecureSkipTLSVerify=True),
            "insecureSkipTLSVerify",
        ),
        (CRD, crd(None), "conversion.strategy"),
        (CRD, crd({"strategy": "None"}), "conversion.strategy"),
        (VALIDATING_WEBHOOK, webhook_config(ca_bundles=()), "no webhooks"),
    ],
    ids=["local-apiservice", "insecure-apiservice", "crd-no-conversion", "crd-none", "no-hooks"],
)
def test_objects_that_cannot_carry_a_ca_bundle_say_why(kind: Any, raw: Any, fragment: str) -> None:
    target = to_target(kind, raw)
    assert target.not_applicable is not None and fragment in target.not_applicable
    decision = decisions.decide(
        dataclasses.replace(target, annotation=SELECT_ALL), [ctb("b", ["a"])]
    )
    assert isinstance(decision, decisions.Invalid)
    assert decision.reason == decisions.REASON_NOT_APPLICABLE


# decisions ----------------------------------------------------------------------------


def test_decide_unifies_every_selected_bundle_into_every_slot() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config())
    bundles = [ctb("b1", ["a", "b"]), ctb("b2", ["b", "c"]), ctb("o", ["d"], signer="x.io/y")]
    decision = decisions.decide(target, bundles)
    assert isinstance(decision, decisions.Inject)
    assert decision.sources == 2
    assert decision.bundle == normalize_bundle(pem("a") + pem("b") + pem("c"))
    assert base64.b64decode(decision.ca_bundle).decode() == decision.bundle


def test_decide_up_to_date_when_every_slot_matches() -> None:
    bundle = normalize_bundle(pem("a"))
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=(b64(bundle), b64(bundle))))
    assert isinstance(decisions.decide(target, [ctb("b", ["a"])]), decisions.UpToDate)


def test_decide_rewrites_when_one_slot_drifted() -> None:
    bundle = normalize_bundle(pem("a"))
    target = to_target(VALIDATING_WEBHOOK, webhook_config(ca_bundles=(b64(bundle), b64(pem("b")))))
    assert isinstance(decisions.decide(target, [ctb("b", ["a"])]), decisions.Inject)


def test_decide_ignores_objects_without_the_annotation() -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=None))
    assert decisions.decide(target, [ctb("b", ["a"])]) == decisions.Ignore()


@pytest.mark.parametrize(("annotation", "fragment"), BAD_ANNOTATIONS)
def test_decide_bad_annotation_is_invalid_with_the_problem(annotation: str, fragment: str) -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    decision = decisions.decide(target, [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Invalid)
    assert decision.reason == decisions.REASON_INVALID_SELECTOR
    assert fragment in decision.message and ANNOTATION in decision.message


@pytest.mark.parametrize(
    "annotation",
    [
        json.dumps({"signerName": SIGNER}),
        json.dumps({"signerName": SIGNER, "labelSelector": {"matchLabels": {"x": "y"}}}),
        json.dumps({"name": "missing"}),
    ],
    ids=["nil-label-selector", "no-label-match", "no-such-name"],
)
def test_decide_empty_selection_keeps_current(annotation: str) -> None:
    target = to_target(VALIDATING_WEBHOOK, webhook_config(annotation=annotation))
    decision = decisions.decide(target, [ctb("b", ["a"])])
    assert isinstance(decision, decisions.Empty)
    assert "current caBundle is kept" in decision.message


def test_selection_index_values_match_bundle_keys() -> None:
    by_name = decisions.selection_keys(parse_selector_json('{"name": "b1"}'))
    by_signer = decisions.selection_keys(parse_selector_json(SELECT_ALL))
    keys = decisions.bundle_keys(ctb("b1", ["a"]))
    assert set(by_name) <= set(keys) and set(by_signer) <= set(keys)
    assert decisions.bundle_keys(ctb("b2", ["a"], signer="x.io/y")) == ["name:b2", "signer:x.io/y"]
