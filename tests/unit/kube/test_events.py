"""Events are created once, then aggregated into a series; the recorder never blocks
or raises."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from kube.client import Client
from kube.events import EventRecorder, ObjectRef, truncate_utf8
from kube.types import JSON
from tests.unit.fakeapi import FakeApi

EVENTS = "/apis/events.k8s.io/v1/namespaces/ns/events"
POD = ObjectRef(kind="Pod", namespace="ns", name="web-0", uid="uid-1")
PCR = ObjectRef(
    kind="PodCertificateRequest",
    namespace="ns",
    name="req-1",
    uid="uid-2",
    api_version="certificates.k8s.io/v1",
)


@contextmanager
def clocked_recorder(fake: FakeApi) -> Iterator[tuple[EventRecorder, list[float]]]:
    """A recorder whose clock reads `now[0]` (the test moves it); stopped on leaving."""
    now = [0.0]
    rec = EventRecorder(fake.client(), "c", "i", clock=lambda: now[0])
    try:
        yield rec, now
    finally:
        rec.stop()


@pytest.fixture
def recorder(fake: FakeApi) -> Iterator[EventRecorder]:
    rec = EventRecorder(fake.client(), "service-serving-signer", "pod-a")
    yield rec
    rec.stop()


def test_first_event_is_created_with_the_events_v1_shape(
    fake: FakeApi, recorder: EventRecorder
) -> None:
    recorder.warning(POD, "ServiceNotFound", "no Service web", "Sign", related=PCR)
    assert recorder.flush()
    [ev] = fake.items(EVENTS)
    assert re.fullmatch(r"web-0\.[0-9a-f]+", ev["metadata"]["name"])
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", ev["eventTime"])
    assert ev["apiVersion"] == "events.k8s.io/v1"
    assert ev["type"] == "Warning"
    assert ev["reason"] == "ServiceNotFound"
    assert ev["note"] == "no Service web"
    assert ev["action"] == "Sign"
    assert ev["reportingController"] == "service-serving-signer"
    assert ev["reportingInstance"] == "pod-a"
    assert ev["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ns",
        "name": "web-0",
        "uid": "uid-1",
    }
    assert ev["related"]["kind"] == "PodCertificateRequest"
    assert "series" not in ev


def test_repeats_cost_one_create_and_one_patch_then_nothing_until_the_refresh(
    fake: FakeApi,
) -> None:
    """client-go's events library: create, then the first repeat starts the series, later
    repeats are counted in memory and written at the 30-minute refresh."""
    with clocked_recorder(fake) as (rec, now):
        for _ in range(20):
            rec.warning(POD, "ServiceNotFound", "no Service web", "Sign")
        assert rec.flush()
        [ev] = fake.items(EVENTS)
        assert ev["series"]["count"] == 2
        assert re.fullmatch(r".*\.\d{6}Z", ev["series"]["lastObservedTime"])
        assert fake.count("POST", EVENTS) == 1
        assert fake.count("PATCH") == 1

        for _ in range(6):  # a repeat every 5 minutes keeps the series running
            now[0] += 5 * 60 - 10
            rec.warning(POD, "ServiceNotFound", "no Service web", "Sign")
            rec.tick()
            assert rec.flush()
        assert now[0] < 30 * 60
        assert fake.count("PATCH") == 1, "no write before the refresh period"

        now[0] = 30 * 60 + 1
        rec.tick()
        assert rec.flush()
        [ev] = fake.items(EVENTS)
        assert ev["series"]["count"] == 26
        assert fake.count("PATCH") == 2

        now[0] += 5 * 60
        rec.tick()
        assert rec.flush()
        assert fake.count("PATCH") == 2, "an unchanged count is not written again"


def test_stop_writes_the_counts_series_gained_since_their_last_write(fake: FakeApi) -> None:
    rec = EventRecorder(fake.client(), "c", "i")
    for _ in range(5):
        rec.warning(POD, "R", "n", "Sign")
    rec.stop()
    [ev] = fake.items(EVENTS)
    assert ev["series"]["count"] == 5
    assert fake.count("POST", EVENTS) == 1
    assert fake.count("PATCH") == 2


def test_a_different_note_or_type_is_a_different_event(
    fake: FakeApi, recorder: EventRecorder
) -> None:
    recorder.warning(POD, "ServiceNotFound", "no Service web", "Sign")
    recorder.warning(POD, "ServiceNotFound", "no Service api", "Sign")
    recorder.normal(POD, "ServiceNotFound", "no Service web", "Sign")
    assert recorder.flush()
    assert len(fake.items(EVENTS)) == 3
    assert len({e["metadata"]["name"] for e in fake.items(EVENTS)}) == 3


def test_series_starts_over_when_the_event_is_gone(fake: FakeApi, recorder: EventRecorder) -> None:
    recorder.warning(POD, "R", "n", "Sign")
    assert recorder.flush()
    [ev] = fake.items(EVENTS)
    fake.remove(EVENTS, ev["metadata"]["name"])
    recorder.warning(POD, "R", "n", "Sign")
    recorder.warning(POD, "R", "n", "Sign")
    assert recorder.flush()
    [again] = fake.items(EVENTS)
    assert again["metadata"]["name"] != ev["metadata"]["name"]
    assert again["series"]["count"] == 2
    assert fake.count("POST", EVENTS) == 2


def test_a_quiet_series_is_finished_and_a_later_repeat_creates_a_new_event(
    fake: FakeApi,
) -> None:
    with clocked_recorder(fake) as (rec, now):
        for _ in range(4):
            rec.warning(POD, "R", "n", "Sign")
        assert rec.flush()
        now[0] += 6 * 60 + 1
        rec.tick()
        assert rec.flush()
        [ev] = fake.items(EVENTS)
        assert ev["series"]["count"] == 4, "the final count is written when the series ends"

        rec.warning(POD, "R", "n", "Sign")
        assert rec.flush()
    assert fake.count("POST", EVENTS) == 2
    assert fake.count("PATCH") == 2


def test_a_singleton_leaves_the_cache_after_the_finish_period(fake: FakeApi) -> None:
    with clocked_recorder(fake) as (rec, now):
        rec.warning(POD, "R", "n", "Sign")
        assert rec.flush()
        now[0] += 5 * 60
        rec.warning(POD, "R", "n", "Sign")  # within the period: the series starts
        assert rec.flush()
        rec.warning(POD, "Other", "n", "Sign")
        assert rec.flush()
        now[0] += 6 * 60 + 1
        rec.tick()
        assert rec.flush()
        rec.warning(POD, "Other", "n", "Sign")  # its singleton was dropped: new Event
        assert rec.flush()
    assert fake.count("POST", EVENTS) == 3
    assert fake.count("PATCH") == 1


def test_an_event_about_another_related_object_is_a_different_event(
    fake: FakeApi, recorder: EventRecorder
) -> None:
    other = ObjectRef("PodCertificateRequest", "ns", "req-2", "uid-3", "certificates.k8s.io/v1")
    recorder.warning(POD, "R", "n", "Sign", related=PCR)
    recorder.warning(POD, "R", "n", "Sign", related=other)
    assert recorder.flush()
    assert fake.count("POST", EVENTS) == 2


def test_note_is_cut_to_1_KiB_on_a_character_boundary(
    fake: FakeApi, recorder: EventRecorder
) -> None:
    recorder.warning(POD, "R", "é" * 600, "Sign")  # 1200 bytes
    assert recorder.flush()
    [ev] = fake.items(EVENTS)
    assert ev["note"] == "é" * 512
    assert truncate_utf8("aé", 2) == "a"


def test_cluster_scoped_objects_get_events_in_default_and_long_names_are_cut(
    fake: FakeApi, recorder: EventRecorder
) -> None:
    node = ObjectRef(kind="Node", namespace="", name="n" * 253, uid="u")
    recorder.normal(node, "R", "n", "Sign")
    assert recorder.flush()
    [ev] = fake.items("/apis/events.k8s.io/v1/namespaces/default/events")
    assert len(ev["metadata"]["name"]) == 253
    assert "namespace" not in ev["regarding"]


def test_api_failures_are_logged_not_raised(
    fake: FakeApi, recorder: EventRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail("POST", EVENTS, 500)
    with caplog.at_level(logging.WARNING, logger="kube.events"):
        recorder.warning(POD, "R", "n", "Sign")
        assert recorder.flush()
    assert "could not record event" in caplog.text
    assert fake.items(EVENTS) == []
    recorder.warning(POD, "R", "n", "Sign")
    assert recorder.flush()
    assert len(fake.items(EVENTS)) == 1, "a failed create is not cached as sent"


class BlockingClient:
    def __init__(self) -> None:
        self.release = threading.Event()
        self.created: list[JSON] = []

    def create(self, path: str, body: JSON, params: Any = None) -> JSON:
        self.release.wait(5)
        self.created.append(body)
        return body


def test_a_full_queue_drops_events_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    client = BlockingClient()
    rec = EventRecorder(cast(Client, client), "c", "i", queue_size=1)
    try:
        with caplog.at_level(logging.WARNING, logger="kube.events"):
            for i in range(5):
                rec.warning(POD, "R", f"note {i}", "Sign")
        assert "event queue full" in caplog.text
    finally:
        client.release.set()
        assert rec.flush()
        rec.stop()
    assert 1 <= len(client.created) <= 2


def test_stop_sends_what_is_queued_and_ends_the_thread(fake: FakeApi) -> None:
    rec = EventRecorder(
        fake.client(), "c", "i", now=lambda: datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    )
    rec.warning(POD, "A", "n", "Sign")
    rec.warning(POD, "B", "n", "Sign")
    rec.stop()
    assert len(fake.items(EVENTS)) == 2
    assert {e["eventTime"] for e in fake.items(EVENTS)} == {"2025-01-02T03:04:05.000006Z"}
    assert len({e["metadata"]["name"] for e in fake.items(EVENTS)}) == 2, (
        "same timestamp, distinct names"
    )
    rec.warning(POD, "C", "n", "Sign")  # after stop: ignored, no error


# An object name is a DNS subdomain; so is an Event's: dot-separated labels that start and
# end alphanumeric (the API server answers 422 to anything else and the Event is lost).
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize("separator", ["-", "."])
def test_a_long_name_cut_before_a_dash_or_dot_still_makes_a_valid_event_name(
    fake: FakeApi, separator: str
) -> None:
    at = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
    suffix = 1 + len(f"{int(at.timestamp()) * 10**9:x}")  # `.<hex nanoseconds>`
    kept = 253 - suffix
    # A 237-character Pod name (at this date) whose cut falls right after a separator.
    name = "a" * (kept - 1) + separator + "b"
    recorder = EventRecorder(fake.client(), "service-serving-signer", "pod-a", now=lambda: at)
    try:
        recorder.warning(ObjectRef(kind="Pod", namespace="ns", name=name, uid="u"), "R", "n", "S")
        assert recorder.flush()
    finally:
        recorder.stop()
    [ev] = fake.items(EVENTS)
    assert len(name) == 237
    assert len(ev["metadata"]["name"]) <= 253
    assert DNS_SUBDOMAIN.fullmatch(ev["metadata"]["name"]), ev["metadata"]["name"]
