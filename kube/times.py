"""Kubernetes' two wire forms of a time, written and read in one place.

- `format_time`: `metav1.Time`, RFC 3339 in whole seconds, UTC (`2026-12-04T16:30:00Z`):
  conditions, a request's notBefore/notAfter, our annotations.
- `micro_time`: `metav1.MicroTime`, RFC 3339 with microseconds, UTC: Lease renew times,
  an Event's eventTime, a replica's report.
- `parse_time`: either form (and any RFC 3339 offset) back to an aware datetime; None for
  an absent or unreadable value, as a reader of someone else's object wants.
"""

from __future__ import annotations

from datetime import UTC, datetime


def format_time(value: datetime) -> str:
    """`metav1.Time`: RFC 3339 in whole seconds, UTC. A naive `value` is taken as UTC."""
    return _seconds(_utc(value)) + "Z"


def micro_time(value: datetime) -> str:
    """`metav1.MicroTime`: RFC 3339 with microseconds, UTC."""
    v = _utc(value)
    return f"{_seconds(v)}.{v.microsecond:06d}Z"


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is None or value.tzinfo is UTC else value.astimezone(UTC)


def _seconds(v: datetime) -> str:
    # Not strftime: its %Y does not pad years below 1000 on every platform.
    return f"{v.year:04d}-{v.month:02d}-{v.day:02d}T{v.hour:02d}:{v.minute:02d}:{v.second:02d}"


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it; None when absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
