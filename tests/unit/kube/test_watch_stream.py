"""A watch stream is one JSON event per line, and HTTP may cut it anywhere: the client
yields exactly the events sent, whole and in order, however the bytes are chunked."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube.client import ApiError
from kube.types import JSON
from tests.unit.fakeapi import FakeApi, Raw, event

PODS = "/api/v1/namespaces/ns/pods"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeApi]:
    api = FakeApi().start()
    yield api
    api.stop()


def events(n: int) -> list[JSON]:
    return [
        event("ADDED", {"metadata": {"name": f"p{i}", "namespace": "ns"}, "pad": "x" * (i * 37)})
        for i in range(n)
    ]


def chunked(data: bytes, cuts: list[int]) -> list[Raw]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [Raw(data[a:b]) for a, b in itertools.pairwise(points)]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(n=st.integers(0, 12), cuts=st.lists(st.integers(0, 10**6), max_size=30), blank=st.booleans())
def test_events_come_out_whole_and_in_order_however_the_stream_is_cut(
    fake: FakeApi, n: int, cuts: list[int], blank: bool
) -> None:
    sent = events(n)
    sep = b"\n\n" if blank else b"\n"  # empty lines between events are skipped
    data = b"".join(json.dumps(e).encode() + sep for e in sent)
    fake.script_watch(PODS, *chunked(data, cuts))
    got = list(fake.client().watch(PODS, {}, read_timeout=10))
    assert got == sent


def test_a_stream_cut_off_mid_event_is_an_error(fake: FakeApi) -> None:
    whole = json.dumps(events(1)[0]).encode()
    fake.script_watch(PODS, Raw(whole + b"\n"), Raw(whole[:10]))
    stream = fake.client().watch(PODS, {}, read_timeout=10)
    assert next(stream)["object"]["metadata"]["name"] == "p0"
    with pytest.raises(ApiError):
        next(stream)
