"""Kubernetes' wire forms of a time: metav1.Time (whole seconds) and MicroTime, both UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kube.times import (
    ServerClock,
    TimeError,
    format_time,
    micro_time,
    parse_time,
    read_time,
    relative,
    span,
)

AT = datetime(2026, 12, 4, 16, 30, 5, 123456, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "time", "micro"),
    [
        (AT, "2026-12-04T16:30:05Z", "2026-12-04T16:30:05.123456Z"),
        (
            AT.astimezone(timezone(timedelta(hours=2))),
            "2026-12-04T16:30:05Z",
            "2026-12-04T16:30:05.123456Z",
        ),
        (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00Z", "0001-01-01T00:00:00.000000Z"),
    ],
    ids=["utc", "another-offset-in-utc", "padded"],
)
def test_times_are_written_in_utc_in_both_wire_forms(
    value: datetime, time: str, micro: str
) -> None:
    assert (format_time(value), micro_time(value)) == (time, micro)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("2026-12-04T16:30:05Z", AT.replace(microsecond=0)),
        ("2026-12-04T16:30:05.123456Z", AT),
        ("2026-12-04T18:30:05+02:00", AT.replace(microsecond=0)),
        (None, None),
        ("", None),
        ("yesterday", None),
    ],
)
def test_a_time_is_read_back_or_none(text: str | None, parsed: datetime | None) -> None:
    assert parse_time(text) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-04",
        "2026-12-04T16:30:05",  # no offset: never a naive result
        "20261204T163005Z",
        "2026-12-04 16:30:05Z",
        "2026-13-04T16:30:05Z",
        "0000-01-01T00:00:00Z",
        "9999-12-31T23:59:59-23:59",
        "2026-12-04T16:30:05Z\n",
        "\uff12\uff10\uff12\uff16-12-04T16:30:05Z",  # full-width digits
        12,
    ],
)
def test_only_an_rfc_3339_date_time_is_read(text: object) -> None:
    assert parse_time(text) is None
    with pytest.raises(TimeError):
        read_time(text)


def test_a_read_time_is_utc_and_nanoseconds_are_cut_to_micro() -> None:
    parsed = read_time("2026-12-04T18:30:05.123456789+02:00")
    assert parsed == AT and parsed.tzinfo is UTC
    assert read_time("2026-12-04t16:30:05z") == AT.replace(microsecond=0)


@given(st.datetimes(timezones=st.just(UTC)))
def test_both_wire_forms_read_back(value: datetime) -> None:
    assert read_time(micro_time(value)) == value
    assert read_time(format_time(value)) == value.replace(microsecond=0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (7199, "119m"),
        (7500, "2h05m"),
        (172799, "47h59m"),
        (172800, "2d"),
    ],
)
def test_a_duration_is_said_one_way(seconds: int, text: str) -> None:
    assert span(timedelta(seconds=seconds)) == text


def test_a_time_is_said_relative_to_now() -> None:
    assert relative(AT - timedelta(minutes=4), AT) == "2026-12-04T16:26:05Z, 4m ago"
    assert relative(AT + timedelta(hours=2, minutes=5), AT) == "2026-12-04T18:35:05Z, in 2h05m"


def test_the_server_clock_is_the_newest_date_header_advanced_by_the_monotonic_clock() -> None:
    """`ServerClock`: the API server's time from its answers' `Date` headers, moved on by
    this process's monotonic clock since the answer arrived; None before any Date, and a
    header it cannot read changes nothing."""
    mono = [100.0]
    clock = ServerClock(lambda: mono[0])
    assert clock.now() is None
    clock.saw(None)
    clock.saw("not a date")
    assert clock.now() is None
    clock.saw("Fri, 04 Dec 2026 16:30:05 GMT")
    mono[0] += 2.5
    whole = AT.replace(microsecond=0)
    assert clock.now() == whole + timedelta(seconds=2.5)
    clock.saw("yesterday")
    clock.saw("Fri, 04 Dec 2026 16:30:00 GMT")  # the newest answer, even if it dates earlier
    assert clock.now() == whole - timedelta(seconds=5)
