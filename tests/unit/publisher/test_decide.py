"""The publisher's decision (`publisher.decide.plan`) as a table: from our trust bundle and
the cached ClusterTrustBundles, which bundles are created, replaced, kept and deleted, and
in which order — before anything is written."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from kube.types import JSON
from publisher import decide
from publisher.decide import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    PUBLISHED_BY_ANNOTATION,
    REVOKED_ROOTS_ANNOTATION,
)
from tests.unit import pki
from trust.bundle import (
    TrustBundle,
    anchor_ders,
    bundle_name,
    fingerprint,
    normalize_bundle,
    parse_anchors,
    stable_bundle_name,
    unlinked_bundle_name,
)
from trust.ca import cert_pem

SIGNER = "kubernetes.io/service-serving"
OLD = pki.ca("decide-old").cert
NEW = pki.ca("decide-new").cert
OURS = normalize_bundle(cert_pem(OLD))
BOTH = normalize_bundle(cert_pem(OLD) + cert_pem(NEW))
NAME = bundle_name(SIGNER, OURS)
BOTH_NAME = bundle_name(SIGNER, BOTH)
STABLE = stable_bundle_name(SIGNER)
US, THEM = "replica-a", "replica-b"
MODIFIED = datetime(2026, 12, 1, 10, 0, 0, 500000, tzinfo=UTC)
LATER, EARLIER = MODIFIED + timedelta(minutes=1), MODIFIED - timedelta(minutes=1)


def ctb(
    name: str,
    pem: str,
    *,
    signer: str = SIGNER,
    by: str | None = US,
    created: datetime | None = None,
    labelled: bool = True,
    revoked: str | None = None,
) -> JSON:
    metadata: JSON = {"name": name, "uid": f"uid-{name}", "resourceVersion": "7"}
    metadata["labels"] = {MANAGED_BY_LABEL: MANAGED_BY} if labelled else {}
    annotations = {}
    if by is not None:
        annotations[PUBLISHED_BY_ANNOTATION] = by
    if revoked is not None:
        annotations[REVOKED_ROOTS_ANNOTATION] = revoked
    metadata["annotations"] = annotations
    if created is not None:
        metadata["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"metadata": metadata, "spec": {"signerName": signer, "trustBundle": pem}}


PLACED = [ctb(NAME, OURS), ctb(STABLE, OURS, by=None)]
"""Ours and the stable bundle, both in place."""


@dataclass(frozen=True)
class Case:
    """What is cached → the plan's ops as (verb, name) in order, and the bundles kept."""

    cached: list[JSON]
    ops: list[tuple[str, str]]
    kept: frozenset[str] = field(default_factory=frozenset)
    stable_holds: str | None = None


CASES = {
    "nothing published: ours, then the stable bundle": Case(
        [], [("create", NAME), ("create", STABLE)], stable_holds=OURS
    ),
    "both in place: nothing to write": Case(PLACED, []),
    "ours edited: restored": Case(
        [ctb(NAME, BOTH), ctb(STABLE, OURS, by=None)], [("replace", NAME)]
    ),
    "our label removed: restored": Case(
        [ctb(NAME, OURS, labelled=False), ctb(STABLE, OURS, by=None)], [("replace", NAME)]
    ),
    "the stable bundle lags: updated in place before the stale one goes": Case(
        [ctb(NAME, OURS), ctb(STABLE, BOTH, by=None), ctb(BOTH_NAME, BOTH, created=EARLIER)],
        [("replace", STABLE), ("delete", BOTH_NAME)],
        stable_holds=OURS,
    ),
    "new content: created before the old one is deleted": Case(
        [ctb(BOTH_NAME, BOTH), ctb(STABLE, BOTH, by=None)],
        [("create", NAME), ("replace", STABLE), ("delete", BOTH_NAME)],
    ),
    "another signer's bundle is not ours to touch": Case(
        [*PLACED, ctb("x:y:z", BOTH, signer="x/y")], []
    ),
    "another replica's newer bundle with an anchor we lack: kept, and in the stable one": Case(
        [*PLACED, ctb(BOTH_NAME, BOTH, by=THEM, created=LATER)],
        [("replace", STABLE)],
        kept=frozenset({BOTH_NAME}),
        stable_holds=BOTH,
    ),
    "an older version's newer bundle (no published-by) is kept too": Case(
        [ctb(NAME, OURS), ctb(STABLE, BOTH, by=None), ctb(BOTH_NAME, BOTH, by=None, created=LATER)],
        [],
        kept=frozenset({BOTH_NAME}),
    ),
    "created in the second our file changed: still newer": Case(
        [
            ctb(NAME, OURS),
            ctb(STABLE, BOTH, by=None),
            ctb(BOTH_NAME, BOTH, by=THEM, created=MODIFIED.replace(microsecond=0)),
        ],
        [],
        kept=frozenset({BOTH_NAME}),
    ),
    "a bundle we published ourselves is never kept": Case(
        [ctb(NAME, OURS), ctb(STABLE, BOTH, by=None), ctb(BOTH_NAME, BOTH, by=US, created=LATER)],
        [("replace", STABLE), ("delete", BOTH_NAME)],
    ),
    "another replica's bundle older than our file goes": Case(
        [
            *PLACED,
            ctb(BOTH_NAME, BOTH, by=THEM, created=EARLIER),
        ],
        [("delete", BOTH_NAME)],
    ),
    "another replica's bundle without our label goes": Case(
        [
            *PLACED,
            ctb(BOTH_NAME, BOTH, by=THEM, created=LATER, labelled=False),
        ],
        [("delete", BOTH_NAME)],
    ),
    "another replica's bundle that only lacks anchors goes": Case(
        [
            ctb(BOTH_NAME, BOTH),
            ctb(STABLE, BOTH, by=None),
            ctb(bundle_name(SIGNER, OURS), OURS, by=THEM, created=LATER),
        ],
        [("delete", NAME)],
    ),
    "another replica's newer bundle holding a revoked root goes": Case(
        [
            ctb(NAME, OURS),
            ctb(STABLE, OURS, by=None, revoked=fingerprint(NEW)),
            ctb(BOTH_NAME, BOTH, by=THEM, created=LATER),
        ],
        [("delete", BOTH_NAME)],
    ),
    "an unreadable bundle goes": Case(
        [
            *PLACED,
            ctb("x:junk", "junk", by=THEM, created=LATER),
        ],
        [("delete", "x:junk")],
    ),
}
# "another replica's bundle that only lacks anchors" publishes BOTH as ours.
BUNDLE_OF = {"another replica's bundle that only lacks anchors goes": BOTH}


def _verb(op: decide.Op) -> str:
    return {decide.Create: "create", decide.Replace: "replace", decide.Delete: "delete"}[type(op)]


@pytest.mark.parametrize("name", list(CASES))
def test_plan(name: str) -> None:
    case = CASES[name]
    pem = BUNDLE_OF.get(name, OURS)
    bundle = TrustBundle(pem, tuple(parse_anchors(pem)), MODIFIED)
    got = decide.plan(bundle, case.cached, signer_name=SIGNER, publisher_id=US, api_version="v1")
    assert [(_verb(op), op.name) for op in got.ops] == case.ops
    assert got.kept == case.kept
    if case.stable_holds is not None:
        (stable,) = [op for op in got.ops if op.name == STABLE]
        assert not isinstance(stable, decide.Delete)
        assert anchor_ders(stable.body["spec"]["trustBundle"]) == anchor_ders(case.stable_holds)


def test_a_created_bundle_says_who_published_it_and_the_stable_one_does_not() -> None:
    bundle = TrustBundle(OURS, tuple(parse_anchors(OURS)), MODIFIED)
    got = decide.plan(bundle, [], signer_name=SIGNER, publisher_id=US, api_version="v1beta1")
    ours, stable = got.ops
    assert isinstance(ours, decide.Create) and isinstance(stable, decide.Create)
    assert ours.body == {
        "apiVersion": "certificates.k8s.io/v1beta1",
        "kind": "ClusterTrustBundle",
        "metadata": {
            "name": NAME,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {PUBLISHED_BY_ANNOTATION: US},
        },
        "spec": {"signerName": SIGNER, "trustBundle": OURS},
    }
    assert "annotations" not in stable.body["metadata"]


def test_a_replace_keeps_the_cached_objects_version_and_a_delete_its_uid() -> None:
    bundle = TrustBundle(OURS, tuple(parse_anchors(OURS)), MODIFIED)
    cached = [ctb(NAME, BOTH), ctb(STABLE, OURS, by=None), ctb(BOTH_NAME, BOTH, created=EARLIER)]
    got = decide.plan(bundle, cached, signer_name=SIGNER, publisher_id=US, api_version="v1")
    replace, delete = got.ops
    assert isinstance(replace, decide.Replace) and isinstance(delete, decide.Delete)
    assert replace.body["metadata"]["resourceVersion"] == "7"
    assert replace.body["spec"]["trustBundle"] == OURS
    assert delete.body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": f"uid-{BOTH_NAME}"},
    }


UNLINKED = unlinked_bundle_name(SIGNER)


def unlinked_ctb(pem: str, *, labelled: bool = True) -> JSON:
    obj = ctb(UNLINKED, pem, by=None, labelled=labelled)
    del obj["spec"]["signerName"]
    return obj


def _plan_unlinked(cached: list[JSON], current: JSON | None, *, publish: bool) -> decide.Plan:
    bundle = TrustBundle(OURS, tuple(parse_anchors(OURS)), MODIFIED)
    return decide.plan(
        bundle,
        cached,
        signer_name=SIGNER,
        publisher_id=US,
        api_version="v1",
        unlinked=decide.Unlinked(UNLINKED, current, publish),
    )


def test_the_unlinked_bundle_is_a_colon_free_name_of_its_own() -> None:
    """The API requires a bundle without a signerName to have no ":" in its name."""
    assert UNLINKED == "kubernetes.io.service-serving.trust-anchors"
    assert ":" not in UNLINKED and UNLINKED != STABLE


def test_an_opted_in_unlinked_bundle_is_created_after_the_stable_one_without_a_signer() -> None:
    """It holds what the stable bundle holds, carries our label and no signerName, and is
    written after the stable bundle and before any delete."""
    cached = [ctb(BOTH_NAME, BOTH), ctb(STABLE, BOTH, by=None)]
    got = _plan_unlinked(cached, None, publish=True)
    assert [(_verb(op), op.name) for op in got.ops] == [
        ("create", NAME),
        ("replace", STABLE),
        ("create", UNLINKED),
        ("delete", BOTH_NAME),
    ]
    stable, unlinked = got.ops[1], got.ops[2]
    assert isinstance(stable, decide.Replace) and isinstance(unlinked, decide.Create)
    assert unlinked.body["spec"] == {"trustBundle": stable.body["spec"]["trustBundle"]}
    assert unlinked.body["metadata"] == {
        "name": UNLINKED,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
    }
    assert not unlinked.hashed


def test_an_unlinked_bundle_that_differs_is_replaced_and_one_in_place_left_alone() -> None:
    stale = unlinked_ctb(BOTH)
    got = _plan_unlinked(PLACED, stale, publish=True)
    ((verb, name),) = [(_verb(op), op.name) for op in got.ops]
    assert (verb, name) == ("replace", UNLINKED)
    replace = got.ops[0]
    assert isinstance(replace, decide.Replace)
    assert replace.body["metadata"]["resourceVersion"] == "7"
    assert "signerName" not in replace.body["spec"]
    assert anchor_ders(replace.body["spec"]["trustBundle"]) == anchor_ders(OURS)
    assert _plan_unlinked(PLACED, unlinked_ctb(OURS), publish=True).ops == ()


def test_turned_off_the_unlinked_bundle_we_published_is_deleted_and_anyone_elses_kept() -> None:
    """Off again, ours is deleted (conditionally, on its UID) rather than left holding a
    root the signer's bundles drop later; a bundle of that name without our label is not
    ours to delete."""
    got = _plan_unlinked(PLACED, unlinked_ctb(OURS), publish=False)
    ((verb, name),) = [(_verb(op), op.name) for op in got.ops]
    assert (verb, name) == ("delete", UNLINKED)
    assert _plan_unlinked(PLACED, unlinked_ctb(OURS, labelled=False), publish=False).ops == ()
    assert _plan_unlinked(PLACED, None, publish=False).ops == ()
