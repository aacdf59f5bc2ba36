"""Kubernetes' wire forms of a time: metav1.Time (whole seconds) and MicroTime, both UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kube.times import format_time, micro_time, parse_time

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
