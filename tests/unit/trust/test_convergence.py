"""The convergence report contract (trust.convergence): what the injector writes is what
the managed CA reads, the reading rule, and a report nobody should trust parses to a
`ReportError` — never to a crash, never to a convergence it does not state."""

from __future__ import annotations

import contextlib
import json
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trust.convergence import (
    MAX_ANCHORS,
    MAX_COUNT,
    MAX_KEY,
    MAX_LAGGING,
    MAX_NAME,
    MAX_REASON,
    REPORT_NAME,
    AnchorCounts,
    ConvergenceReport,
    KindCounts,
    Lagging,
    ObjectConvergence,
    ReportError,
    converged,
    encode,
    parse,
    report_lease,
    summarise,
)

A = "a" * 64
B = "b" * 64
C = "c" * 64

fingerprints = st.text("0123456789abcdef", min_size=64, max_size=64)
counts = st.integers(0, MAX_COUNT)


@st.composite
def anchor_rows(draw: st.DrawFn) -> AnchorCounts:
    selecting = draw(counts)
    holding = draw(st.integers(0, selecting))
    return AnchorCounts(selecting, holding, draw(st.integers(0, selecting - holding)))


names = st.text(string.ascii_lowercase + "-./", min_size=1, max_size=MAX_NAME)
lagging = st.builds(Lagging, names, st.none() | st.text(max_size=MAX_REASON))


@st.composite
def kind_rows(draw: st.DrawFn) -> KindCounts:
    current = draw(st.integers(0, MAX_COUNT))
    stale = draw(st.integers(0, MAX_COUNT - current))
    blocked = draw(st.integers(0, MAX_COUNT - current - stale))
    managed = draw(st.integers(current + stale + blocked, MAX_COUNT))
    return KindCounts(
        managed, current, stale, blocked, tuple(draw(st.lists(lagging, max_size=MAX_LAGGING)))
    )


reports = st.builds(
    ConvergenceReport,
    st.booleans(),
    st.dictionaries(fingerprints, anchor_rows(), max_size=8),
    st.dictionaries(
        st.from_regex(r"[A-Z][A-Za-z0-9]{0,20}", fullmatch=True), kind_rows(), max_size=5
    ),
    st.frozensets(fingerprints, max_size=8),
)


@settings(max_examples=100, deadline=None)
@given(reports)
def test_what_the_writer_encodes_the_reader_parses_back_unchanged(
    report: ConvergenceReport,
) -> None:
    assert parse(encode(report)) == report


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=70),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=70), inner, max_size=4)
        ),
        max_leaves=30,
    )
)
def test_any_json_is_a_report_or_a_report_error(value: object) -> None:
    for doc in (
        value,
        {"complete": True, "anchors": value},
        {"kinds": {"ConfigMap": value}},
        {"anchors": {A: value}},
        {"observedAnchors": value},
        {"kinds": {"ConfigMap": {"lagging": [value]}}},
    ):
        with contextlib.suppress(ReportError):
            parse(json.dumps(doc))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300) | st.binary(max_size=50).map(repr))
def test_any_text_is_a_report_or_a_report_error(text: str) -> None:
    with contextlib.suppress(ReportError):
        parse(text)


def test_hostile_reports_are_refused_with_a_reason() -> None:
    hostile = {
        "not a string": None,
        "nested to death": "[" * 100_000 + "]" * 100_000,
        "an integer of 5000 digits": f'{{"anchors": {{"{A}": {{"selecting": {"9" * 5000}}}}}}}',
        "over the size": json.dumps({"kinds": {}, "pad": "x" * 300_000}),
        "a count past the bound": json.dumps({"anchors": {A: {"selecting": MAX_COUNT + 1}}}),
        "a negative count": json.dumps({"anchors": {A: {"selecting": 1, "holding": -5}}}),
        "holding more than selecting": json.dumps(
            {"complete": True, "anchors": {A: {"selecting": 1, "holding": 2}}}
        ),
        "a boolean count": json.dumps({"anchors": {A: {"selecting": True}}}),
        "a float count": json.dumps({"anchors": {A: {"selecting": 1.5}}}),
        "not a fingerprint": json.dumps({"anchors": {"A" * 64: {"selecting": 1}}}),
        "too many anchors": json.dumps({"observedAnchors": [A] * (MAX_ANCHORS + 1)}),
        "complete as a string": json.dumps({"complete": "true"}),
        "too many lagging": json.dumps(
            {
                "kinds": {
                    "ConfigMap": {
                        "managed": 20,
                        "stale": 20,
                        "lagging": [{"name": "n", "state": "stale"}] * 11,
                    }
                }
            }
        ),
        "a blocked object without a reason": json.dumps(
            {
                "kinds": {
                    "ConfigMap": {
                        "managed": 1,
                        "blocked": 1,
                        "lagging": [{"name": "n", "state": "blocked"}],
                    }
                }
            }
        ),
        "more states than objects": json.dumps(
            {"kinds": {"ConfigMap": {"managed": 1, "stale": 2}}}
        ),
        "a list": "[]",
    }
    for why, text in hostile.items():
        try:
            parse(text)
        except ReportError as err:
            assert str(err) and "\n" not in str(err), why
        else:
            raise AssertionError(f"{why}: parsed")


def test_a_report_from_before_completeness_was_written_converges_nothing() -> None:
    old = json.dumps(
        {
            "anchors": {A: {"selecting": 1, "holding": 1, "blocked": 0}},
            "kinds": {},
            "observedBundles": ["x@1"],
        }
    )
    report = parse(old)
    assert not report.complete and not converged(report, A)


def test_an_anchor_converges_once_complete_observed_and_nothing_lags() -> None:
    rows = {A: AnchorCounts(3, 2, 1), B: AnchorCounts(3, 2, 0)}
    report = ConvergenceReport(True, rows, {}, frozenset({A, B, C}))
    assert converged(report, A)  # the one not holding is a blocked tenant's
    assert not converged(report, B)  # one holds it back
    assert converged(report, C)  # observed, selected by nothing
    assert not converged(ConvergenceReport(True, rows, {}, frozenset({B})), A)  # not observed
    assert not converged(ConvergenceReport(False, rows, {}, frozenset({A, C})), C)


def test_a_blocked_tenant_is_excused_but_a_blocked_cluster_scoped_consumer_holds_the_gate() -> None:
    objects = [
        ObjectConvergence(
            "ConfigMap",
            "tenant/web-ca",
            "stale",
            frozenset({A}),
            frozenset(),
            "the API refused the write: 403",
        ),
        ObjectConvergence(
            "ValidatingWebhookConfiguration",
            "policy",
            "stale",
            frozenset({B}),
            frozenset(),
            "the API refused the write: 422",
        ),
        ObjectConvergence(
            "ValidatingWebhookConfiguration", "ok", "current", frozenset({A, B}), frozenset({A, B})
        ),
        ObjectConvergence(
            "MutatingWebhookConfiguration", "late", "stale", frozenset({B}), frozenset()
        ),
        ObjectConvergence("APIService", "v1.example.com", "empty"),
    ]
    kinds = (
        "ConfigMap",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "APIService",
        "CustomResourceDefinition",
    )
    report = parse(encode(summarise(objects, kinds=kinds, observed={A, B}, complete=True)))
    assert report.anchors == {A: AnchorCounts(2, 1, 1), B: AnchorCounts(3, 1, 0)}
    assert converged(report, A) and not converged(report, B)
    assert report.kinds["ConfigMap"] == KindCounts(
        1, 0, 0, 1, (Lagging("tenant/web-ca", "the API refused the write: 403"),)
    )
    vwc = report.kinds["ValidatingWebhookConfiguration"]
    assert (vwc.managed, vwc.current, vwc.stale, vwc.blocked) == (2, 1, 0, 1)
    assert report.kinds["APIService"] == KindCounts(1, 0, 0, 0, ())
    assert report.kinds["CustomResourceDefinition"] == KindCounts()
    assert [(k, lag.name, lag.state) for k, lag in report.lagging()] == [
        ("ConfigMap", "tenant/web-ca", "blocked"),
        ("MutatingWebhookConfiguration", "late", "stale"),
        ("ValidatingWebhookConfiguration", "policy", "blocked"),
    ]


def test_lagging_names_are_bounded_blocked_first() -> None:
    objects = [
        ObjectConvergence("ConfigMap", f"ns/stale-{i:02d}", "stale", frozenset({A}))
        for i in range(30)
    ] + [ObjectConvergence("ConfigMap", "ns/z", "invalid", frozenset({A}), blocked="x" * 2000)]
    report = parse(encode(summarise(objects, observed={A}, complete=True)))
    row = report.kinds["ConfigMap"]
    assert (row.stale, row.blocked) == (30, 1)
    assert len(row.lagging) == MAX_LAGGING
    assert row.lagging[0] == Lagging("ns/z", "x" * MAX_REASON)
    assert [lag.name for lag in row.lagging[1:]] == [f"ns/stale-{i:02d}" for i in range(9)]


def test_a_report_too_large_to_write_whole_is_written_incomplete() -> None:
    many = {f"{i:064x}": AnchorCounts(1, 1, 0) for i in range(MAX_ANCHORS + 1)}
    report = parse(encode(ConvergenceReport(True, many, {}, frozenset())))
    assert not report.complete and len(report.anchors) == MAX_ANCHORS


def test_the_report_lease_is_named_by_the_flag_not_by_any_lease() -> None:
    assert report_lease("ns").name == REPORT_NAME == "service-serving-signer-injector-convergence"
    assert report_lease("ns", "mine").path == (
        "/apis/coordination.k8s.io/v1/namespaces/ns/leases/mine"
    )
    assert report_lease("ns", "") == report_lease("ns")


def test_an_incomplete_report_names_its_pending_keys_bounded_and_a_complete_one_none() -> None:
    """`pending` (the keys not yet synced) is written only while the report is incomplete,
    at most `MAX_LAGGING` keys of at most `MAX_KEY` characters; a reader that does not
    know it ignores it, and a malformed one makes the report unreadable."""
    keys = [f"ConfigMap/ns/cm-{i:02d}" for i in range(15)]
    text = encode(summarise([], complete=False, pending=keys))
    report = parse(text)
    assert report.pending == tuple(keys[:MAX_LAGGING])
    done = encode(summarise([], complete=True, pending=keys))
    assert "pending" not in json.loads(done) and parse(done).pending == ()
    for bad in ([1], ["x" * (MAX_KEY + 1)], "ConfigMap/a/b", [""] * 11):
        with pytest.raises(ReportError):
            parse(json.dumps({"complete": False, "pending": bad}))
