"""The release hands the caBundle leaves the injector owns to the object's owner, without a
server: which managedFields entry takes each leaf (the one that owns where the server it
verifies is named; `Apply` before `Update`, then by manager name), the one guarded JSON
patch that adds each leaf to that entry and removes ours, and the leaves nobody can take
(left unowned, as before, and named in a log line)."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from injector import configmaps
from injector import decide as decisions
from injector.kinds import API_SERVICE, CRD, KINDS_BY_NAME, VALIDATING_WEBHOOK, to_target
from injector.targets import (
    FIELD_MANAGER,
    INJECTED_ANNOTATION,
    MAX_INJECTED,
    Handover,
    Target,
    read,
    release_ops,
    unowned_note,
)
from tests.unit.injector.builders import api_service, apply_json_patch, crd, webhook_config
from tests.unit.injector.harness import controller

W0, W1 = 'k:{"name":"w0.example.com"}', 'k:{"name":"w1.example.com"}'


def hook_owner(manager: str, operation: str, *keys: str) -> dict[str, Any]:
    """An entry owning each named webhook, its name and its clientConfig's service."""
    return {
        "manager": manager,
        "operation": operation,
        "fieldsV1": {
            "f:webhooks": {
                key: {".": {}, "f:name": {}, "f:clientConfig": {"f:service": {"f:name": {}}}}
                for key in keys
            }
        },
    }


def ours(*keys: str) -> dict[str, Any]:
    return {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {
            "f:metadata": {"f:annotations": {"f:service-serving-signer/injected": {}}},
            "f:webhooks": {key: {"f:clientConfig": {"f:caBundle": {}}} for key in keys},
        },
    }


def released(raw: dict[str, Any], *entries: dict[str, Any]) -> dict[str, Any]:
    """`raw` without our annotation, with `entries` as its managedFields."""
    out = copy.deepcopy(raw)
    out["metadata"].pop("annotations", None)
    out["metadata"]["managedFields"] = [copy.deepcopy(e) for e in entries]
    return out


def entry(obj: dict[str, Any], manager: str) -> dict[str, Any]:
    [found] = [e for e in obj["metadata"]["managedFields"] if e["manager"] == manager]
    return dict(found["fieldsV1"])


def test_each_webhook_leaf_goes_to_the_manager_that_owns_its_client_config() -> None:
    raw = released(
        webhook_config(),
        hook_owner("kubectl-edit", "Update", W1),
        ours(W0, W1),
        hook_owner("gitops", "Apply", W0),
        hook_owner("argocd", "Apply", W1),
    )
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.handover == (
        Handover(2, "gitops", "Apply", ("f:webhooks", W0, "f:clientConfig")),
        Handover(3, "argocd", "Apply", ("f:webhooks", W1, "f:clientConfig")),
    )
    assert target.unowned == ()
    after = apply_json_patch(raw, release_ops(target))
    assert FIELD_MANAGER not in [e["manager"] for e in after["metadata"]["managedFields"]]
    assert entry(after, "gitops")["f:webhooks"][W0]["f:clientConfig"] == {
        "f:service": {"f:name": {}},
        "f:caBundle": {},
    }
    assert "f:caBundle" in entry(after, "argocd")["f:webhooks"][W1]["f:clientConfig"]
    assert "f:caBundle" not in entry(after, "kubectl-edit")["f:webhooks"][W1]["f:clientConfig"]
    # No value changes: the patch touches managedFields only.
    assert after["webhooks"] == raw["webhooks"]


def test_the_patch_tests_the_uid_and_each_entry_it_edits_then_removes_ours() -> None:
    raw = released(webhook_config(), hook_owner("gitops", "Apply", W0, W1), ours(W0, W1))
    target = to_target(VALIDATING_WEBHOOK, raw)
    ops = release_ops(target)
    at = "/metadata/managedFields"
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "uid-hooks"}
    assert ops[1:4] == [
        {"op": "test", "path": f"{at}/0/manager", "value": "gitops"},
        {"op": "test", "path": f"{at}/0/operation", "value": "Apply"},
        {
            "op": "add",
            "path": f'{at}/0/fieldsV1/f:webhooks/k:{{"name":"w0.example.com"}}'
            "/f:clientConfig/f:caBundle",
            "value": {},
        },
    ]
    assert ops[-2:] == [
        {"op": "test", "path": f"{at}/1/manager", "value": FIELD_MANAGER},
        {"op": "remove", "path": f"{at}/1"},
    ]
    # Another writer moved the entries meanwhile: a test fails, nothing is written.
    moved = copy.deepcopy(raw)
    moved["metadata"]["managedFields"].reverse()
    with pytest.raises(ValueError, match="test failed"):
        apply_json_patch(moved, ops)


def test_an_apiservice_leaf_goes_to_the_owner_of_spec_service() -> None:
    raw = api_service(service={"namespace": "ns", "name": "svc"}, caBundle="Zm9v")
    spec_owner = {
        "manager": "gitops",
        "operation": "Apply",
        "fieldsV1": {"f:spec": {"f:group": {}, "f:service": {"f:name": {}}}},
    }
    helm = {"manager": "helm", "operation": "Update", "fieldsV1": {"f:spec": {"f:group": {}}}}
    mine = {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {"f:spec": {"f:caBundle": {}}},
    }
    raw = released(raw, helm, mine, spec_owner)
    target = to_target(API_SERVICE, raw)
    assert target.handover == (Handover(2, "gitops", "Apply", ("f:spec",)),)
    after = apply_json_patch(raw, release_ops(target))
    assert entry(after, "gitops")["f:spec"]["f:caBundle"] == {}
    assert "f:caBundle" not in entry(after, "helm")["f:spec"]
    assert [e["manager"] for e in after["metadata"]["managedFields"]] == ["helm", "gitops"]


def test_a_crd_leaf_goes_to_the_owner_of_its_conversion_client_config() -> None:
    where: dict[str, Any] = {
        "f:spec": {"f:conversion": {"f:webhook": {"f:clientConfig": {"f:url": {}}}}}
    }
    leaf: dict[str, Any] = {
        "f:spec": {"f:conversion": {"f:webhook": {"f:clientConfig": {"f:caBundle": {}}}}}
    }
    raw = released(
        crd({"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x"}}}),
        {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": leaf},
        {"manager": "flux", "operation": "Apply", "fieldsV1": where},
    )
    target = to_target(CRD, raw)
    assert target.handover == (
        Handover(1, "flux", "Apply", ("f:spec", "f:conversion", "f:webhook", "f:clientConfig")),
    )
    after = apply_json_patch(raw, release_ops(target))
    assert entry(after, "flux") == {
        "f:spec": {
            "f:conversion": {"f:webhook": {"f:clientConfig": {"f:url": {}, "f:caBundle": {}}}}
        }
    }


def test_apply_before_update_then_the_first_name_in_byte_order() -> None:
    raw = released(
        webhook_config(),
        ours(W0),
        hook_owner("zeta", "Apply", W0),
        hook_owner("Alpha", "Update", W0),
        hook_owner("beta", "Apply", W0),
    )
    assert to_target(VALIDATING_WEBHOOK, raw).handover[0].manager == "beta"
    only_updates = released(webhook_config(), ours(W0), hook_owner("kubectl-create", "Update", W0))
    [hand] = to_target(VALIDATING_WEBHOOK, only_updates).handover
    assert (hand.manager, hand.operation) == ("kubectl-create", "Update")


def test_a_subresource_entry_or_one_that_owns_only_the_name_takes_nothing() -> None:
    status = hook_owner("gitops", "Apply", W0) | {"subresource": "status"}
    name_only = {
        "manager": "namer",
        "operation": "Apply",
        "fieldsV1": {"f:webhooks": {W0: {".": {}, "f:name": {}}}},
    }
    raw = released(webhook_config(), ours(W0), status, name_only)
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.handover == ()
    assert target.unowned == ("webhooks[w0.example.com].clientConfig.caBundle",)
    # Today's release, then: our entry removed, nothing else.
    assert release_ops(target) == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-hooks"},
        {"op": "test", "path": "/metadata/managedFields/0/manager", "value": FIELD_MANAGER},
        {"op": "remove", "path": "/metadata/managedFields/0"},
    ]
    note = unowned_note(target)
    assert "w0.example.com" in note and "owned by no field manager" in note


def test_a_leaf_another_manager_owns_already_is_left_to_it() -> None:
    shared = hook_owner("gitops", "Apply", W0)
    shared["fieldsV1"]["f:webhooks"][W0]["f:clientConfig"]["f:caBundle"] = {}
    raw = released(webhook_config(), ours(W0), shared)
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert (target.handover, target.unowned) == ((), ())


NOTE = '{"anchors":[],"notAfter":1800000000,"sha256":"abc"}'
NOTE_PATH = "/metadata/annotations/service-serving-signer~1injected"


def noted(raw: dict[str, Any], note: str = NOTE) -> dict[str, Any]:
    """`raw` bearing our note and an annotation of someone else's."""
    raw["metadata"]["annotations"] = {INJECTED_ANNOTATION: note, "example.com/team": "a"}
    return raw


def test_the_release_removes_our_note_tested_against_its_value() -> None:
    raw = noted(released(webhook_config(), hook_owner("gitops", "Apply", W0), ours(W0)))
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.note == NOTE
    ops = release_ops(target)
    assert ops[-2:] == [
        {"op": "test", "path": NOTE_PATH, "value": NOTE},
        {"op": "remove", "path": NOTE_PATH},
    ]
    after = apply_json_patch(raw, ops)
    # The note goes (it says what we injected, and we own nothing now); every value and
    # every other annotation stays.
    assert after["metadata"]["annotations"] == {"example.com/team": "a"}
    assert after["webhooks"] == raw["webhooks"]
    # A note rewritten meanwhile fails the patch: nothing is written, the next event re-plans.
    rewritten = copy.deepcopy(raw)
    rewritten["metadata"]["annotations"][INJECTED_ANNOTATION] = "{}"
    with pytest.raises(ValueError, match="test failed"):
        apply_json_patch(rewritten, ops)


def test_the_release_of_an_apiservice_and_a_crd_removes_our_note() -> None:
    mine = {
        "manager": FIELD_MANAGER,
        "operation": "Update",
        "fieldsV1": {"f:spec": {"f:caBundle": {}}},
    }
    api = noted(
        released(api_service(service={"namespace": "ns", "name": "svc"}, caBundle="Zm9v"), mine)
    )
    leaf: dict[str, Any] = {
        "f:spec": {"f:conversion": {"f:webhook": {"f:clientConfig": {"f:caBundle": {}}}}}
    }
    conversion = {"strategy": "Webhook", "webhook": {"clientConfig": {"url": "https://x"}}}
    definition = noted(
        released(
            crd(conversion), {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": leaf}
        )
    )
    for kind, raw in ((API_SERVICE, api), (CRD, definition)):
        after = apply_json_patch(raw, release_ops(to_target(kind, raw)))
        assert after["metadata"]["annotations"] == {"example.com/team": "a"}
        assert after["spec"] == raw["spec"]


def test_a_note_another_manager_owns_or_none_at_all_is_left_alone() -> None:
    theirs = hook_owner("gitops", "Apply", W0)
    theirs["fieldsV1"]["f:metadata"] = {"f:annotations": {f"f:{INJECTED_ANNOTATION}": {}}}
    for raw in (
        noted(released(webhook_config(), theirs, ours(W0))),
        released(webhook_config(), hook_owner("gitops", "Apply", W0), ours(W0)),
        noted(released(webhook_config(), ours(W0)), "x" * (MAX_INJECTED + 1)),
    ):
        target = to_target(VALIDATING_WEBHOOK, raw)
        assert target.note is None
        assert all("annotations" not in op["path"] for op in release_ops(target))
        apply_json_patch(raw, release_ops(target))  # and the patch applies


def test_the_note_stays_while_the_annotation_is_on_and_through_a_cleanup() -> None:
    raw = webhook_config()
    raw["metadata"]["annotations"][INJECTED_ANNOTATION] = NOTE
    raw["metadata"]["managedFields"] = [ours(W0) | {"operation": "Apply"}]
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert target.note is None
    assert all("annotations" not in op["path"] for op in release_ops(target, "Apply"))


DIGEST = "service-serving-signer/truststore-digest"


def released_config_map(*others: dict[str, Any], labelled: bool = False) -> dict[str, Any]:
    """A ConfigMap we injected (our note, a truststore digest, the mark, all owned by our
    entry) whose opt-in label went (or, `labelled`, whose selector annotation went)."""
    ours_fields: dict[str, Any] = {
        "f:metadata": {
            "f:annotations": {f"f:{INJECTED_ANNOTATION}": {}, f"f:{DIGEST}": {}},
            "f:labels": {f"f:{configmaps.MARK_LABEL}": {}},
        }
    }
    labels = {configmaps.MARK_LABEL: "true"}
    if labelled:
        labels[configmaps.LABEL] = "true"
    return {
        "metadata": {
            "name": "c",
            "namespace": "n",
            "uid": "u",
            "labels": labels,
            "annotations": {INJECTED_ANNOTATION: NOTE, DIGEST: "abc:def", "team": "a"},
            "managedFields": [
                *others,
                {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": ours_fields},
            ],
        }
    }


@pytest.mark.parametrize("labelled", [False, True], ids=["label-removed", "annotation-removed"])
def test_a_released_config_map_loses_our_note_digest_and_mark(labelled: bool) -> None:
    """The ConfigMap release removes what it wrote besides the values it hands over — our
    note, the truststore digest and the mark — instead of leaving them on the ConfigMap
    owned by nobody (no owner's next apply could remove them). The record keeps no text
    for that: which of the two the ConfigMap has, that our entry alone owns."""
    raw = released_config_map(labelled=labelled)
    target = configmaps.to_target(raw) if labelled else configmaps.departed_record(raw)
    after = apply_json_patch(raw, release_ops(target))
    assert after["metadata"]["annotations"] == {"team": "a"}
    assert configmaps.MARK_LABEL not in after["metadata"]["labels"]
    assert FIELD_MANAGER not in [e["manager"] for e in after["metadata"]["managedFields"]]


def test_an_annotation_of_ours_another_manager_owns_stays_at_the_release() -> None:
    """A note another manager's entry owns is theirs (their configuration sets it; their
    next apply would put it back): only the digest, ours alone, goes."""
    theirs = {
        "manager": "flux",
        "operation": "Apply",
        "fieldsV1": {"f:metadata": {"f:annotations": {f"f:{INJECTED_ANNOTATION}": {}}}},
    }
    raw = released_config_map(theirs)
    after = apply_json_patch(raw, release_ops(configmaps.departed_record(raw)))
    assert after["metadata"]["annotations"] == {INJECTED_ANNOTATION: NOTE, "team": "a"}


def test_nothing_is_handed_while_the_annotation_is_on() -> None:
    raw = webhook_config()
    legacy = ours(W0) | {"operation": "Apply"}
    raw["metadata"]["managedFields"] = [hook_owner("gitops", "Apply", W0), legacy]
    target = to_target(VALIDATING_WEBHOOK, raw)
    assert (target.handover, target.unowned) == ((), ())
    # The cleanup of an old apply entry of ours drops it and hands nothing over.
    ops = release_ops(target, "Apply")
    assert all("fieldsV1" not in op["path"] for op in ops)


def test_the_plan_of_a_release_carries_the_handover() -> None:
    raw = released(webhook_config(), hook_owner("gitops", "Apply", W0), ours(W0))
    target = to_target(VALIDATING_WEBHOOK, raw)
    seen = read(target.key, KINDS_BY_NAME, {target.kind: {target.name: target}}, {})
    planned = decisions.plan(seen, [])
    assert planned.result == "released"
    assert planned.release == release_ops(target)
    assert any(op["path"].endswith("/f:caBundle") for op in planned.release or [])


NAMES = st.sampled_from(["gitops", "argocd", "helm", "kubectl-client-side-apply", "Zed"])


@given(
    owners=st.lists(
        st.tuples(NAMES, st.sampled_from(["Apply", "Update"]), st.sets(st.sampled_from([W0, W1]))),
        max_size=5,
        unique_by=lambda o: (o[0], o[1]),
    ),
    mine=st.sets(st.sampled_from([W0, W1]), min_size=1),
    position=st.integers(0, 5),
)
def test_the_release_patch_applies_and_leaves_every_leaf_owned_by_the_chosen_owner(
    owners: list[tuple[str, str, set[str]]], mine: set[str], position: int
) -> None:
    entries = [hook_owner(m, op, *sorted(keys)) for m, op, keys in owners]
    entries.insert(min(position, len(entries)), ours(*sorted(mine)))
    raw = released(webhook_config(), *entries)
    target: Target = to_target(VALIDATING_WEBHOOK, raw)
    after = apply_json_patch(raw, release_ops(target))
    managers = after["metadata"]["managedFields"]
    assert FIELD_MANAGER not in [e["manager"] for e in managers]
    assert after["webhooks"] == raw["webhooks"]
    for key in mine:
        candidates = [(op != "Apply", m.encode()) for m, op, keys in owners if key in keys]
        holders = [
            (e["operation"] != "Apply", e["manager"].encode())
            for e in managers
            if "f:caBundle" in e["fieldsV1"]["f:webhooks"].get(key, {}).get("f:clientConfig", {})
        ]
        assert holders == ([min(candidates)] if candidates else [])
    # Every other entry is what it was, but for the caBundle leaves handed to it.
    for before, now in zip(
        [e for e in raw["metadata"]["managedFields"] if e["manager"] != FIELD_MANAGER],
        managers,
        strict=True,
    ):
        stripped = json.loads(json.dumps(now))
        for item in stripped["fieldsV1"]["f:webhooks"].values():
            item["f:clientConfig"].pop("f:caBundle", None)
        assert stripped == before


def test_a_release_that_leaves_a_leaf_unowned_says_so_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name_only = {
        "manager": "namer",
        "operation": "Apply",
        "fieldsV1": {"f:webhooks": {W0: {".": {}, "f:name": {}}}},
    }
    lonely = to_target(VALIDATING_WEBHOOK, released(webhook_config(), ours(W0), name_only))
    ctrl, client, _, _ = controller([lonely], [])
    with caplog.at_level(logging.INFO, logger="injector.controller"):
        ctrl.sync(lonely.key)
    assert client.patches, "the release was sent"
    [line] = [r.getMessage() for r in caplog.records if "owned by no field manager" in r.message]
    assert "webhooks[w0.example.com].clientConfig.caBundle" in line
    # A release that hands every leaf over logs no such line.
    caplog.clear()
    handed = to_target(
        VALIDATING_WEBHOOK,
        released(webhook_config(), ours(W0), hook_owner("gitops", "Apply", W0)),
    )
    ctrl, client, _, _ = controller([handed], [])
    with caplog.at_level(logging.INFO, logger="injector.controller"):
        ctrl.sync(handed.key)
    assert client.patches
    assert not [r for r in caplog.records if "owned by no field manager" in r.getMessage()]
