"""Kubernetes' two wire forms of a time, written and read in one place, and how long ago
a time was, said one way.

- `format_time`: `metav1.Time`, RFC 3339 in whole seconds, UTC (`2026-12-04T16:30:00Z`):
  conditions, a request's notBefore/notAfter, our annotations.
- `micro_time`: `metav1.MicroTime`, RFC 3339 with microseconds, UTC: Lease renew times,
  an Event's eventTime, a replica's report.
- `parse_time`: either form (and any RFC 3339 offset) back to an aware UTC datetime; None
  for an absent or unreadable value, as a reader of someone else's object wants.
  `read_time` is the same parser for a value that must be there: it raises `TimeError`.
  Only RFC 3339 date-times are read (a date alone, a time without an offset, ISO 8601's
  other spellings are not), so a result is never naive.
- `span(delta)`: a duration for people (`45s`, `12m`, `2h05m`, `3d`); `relative(t, now)`:
  `<RFC 3339>, 2h05m ago` or `<RFC 3339>, in 4m`.
- `ServerClock`: the API server's clock as its answers' HTTP `Date` headers state it, a
  clock this process does not own (a check on its own wall clock).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})", re.ASCII
)


class TimeError(ValueError):
    """A value that is not an RFC 3339 date-time."""


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


def read_time(value: object) -> datetime:
    """An RFC 3339 date-time as the API server writes it, in UTC; `TimeError` otherwise."""
    text = value if isinstance(value, str) else ""
    if not _RFC3339.fullmatch(text):
        raise TimeError(f"not an RFC 3339 time: {str(value)[:40]!r}")
    fraction = re.search(r"\.(\d+)", text)
    if fraction is not None and len(fraction.group(1)) > 6:  # nanoseconds: keep micro
        text = text[: fraction.start()] + "." + fraction.group(1)[:6] + text[fraction.end() :]
    try:
        parsed = datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise TimeError(f"not an RFC 3339 time: {text[:40]!r}") from None


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 time as the API server writes it, in UTC; None when absent or
    unreadable."""
    try:
        return read_time(value)
    except TimeError:
        return None


def span(delta: timedelta) -> str:
    """A duration for people, never negative: `45s`, `12m`, `2h05m`, `3d`."""
    seconds = max(0, int(delta.total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d"


def relative(value: datetime, now: datetime) -> str:
    """`value` with how long ago or how soon: `<RFC 3339>, 2h05m ago`, `<…>, in 4m` (now
    is `0s ago`)."""
    delta = value - now
    if delta <= timedelta(0):
        return f"{format_time(value)}, {span(-delta)} ago"
    return f"{format_time(value)}, in {span(delta)}"


class ServerClock:
    """The API server's clock: the `Date` header (RFC 9110, whole seconds) of the newest
    answer, advanced by this process's monotonic clock since it arrived. The header is
    rounded down and was written before the answer left, so `now()` is never ahead of
    the server's clock by more than the two clocks' drift since; a header that cannot be
    read is ignored. Thread-safe."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._seen: tuple[datetime, float] | None = None  # (Date, monotonic on arrival)

    def saw(self, date: str | None) -> None:
        """An answer arrived now with this `Date` header (None: it had none)."""
        if not date:
            return
        try:
            parsed = parsedate_to_datetime(date)
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        if parsed.tzinfo is None:  # "-0000": UTC, as HTTP dates always are
            parsed = parsed.replace(tzinfo=UTC)
        with self._lock:
            self._seen = (parsed.astimezone(UTC), self._monotonic())

    def now(self) -> datetime | None:
        """The server's time now, as its newest answer dates it; None before any answer
        carried a `Date`."""
        with self._lock:
            seen = self._seen
        if seen is None:
            return None
        return seen[0] + timedelta(seconds=max(0.0, self._monotonic() - seen[1]))
