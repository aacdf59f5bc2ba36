"""An events.k8s.io/v1 event recorder that aggregates repeats and never blocks callers.

What it decides:

* **Shape.** One Event per (regarding object, type, reason, note): `regarding`/`related`
  object references, `reason` and `action` (≤ 128 bytes), `note` (≤ 1 KiB, cut on a
  UTF-8 boundary), `type` Normal/Warning, `reportingController`/`reportingInstance`,
  `eventTime` as RFC 3339 with microseconds (`…Z`). It lives in the regarding object's
  namespace (`default` for cluster-scoped objects).
* **Names.** `<regarding name>.<hex nanoseconds>` as client-go does, strictly increasing
  within the process (so two events in one clock tick do not collide), with the name
  part cut so the whole stays ≤ 253 characters (and a `-` or `.` the cut leaves at its
  end dropped, so the whole stays a DNS subdomain).
* **Aggregation** — client-go's events library (`tools/events`), so a repeat costs no API
  write of its own. The same (regarding, related, type, reason, note, action) seen
  again while cached: the first repeat PATCHes `series: {count: 2, lastObservedTime}`
  onto the existing Event; later repeats only count in memory. Every `refresh`
  (30 min) the counts that grew are PATCHed; every `finish` period (6 min) a series
  not observed for `finish` gets its final count written and leaves the cache, and a
  singleton older than `finish` leaves it (its next occurrence creates a new Event).
  A PATCH answered 404 (the Event expired, kube-apiserver's `--event-ttl` is 1 h, or
  was deleted) creates a new Event and the series starts over. Unlike client-go the
  note is part of the key: our notes name the Service and request, and folding two
  different notes into one Event would hide one. The cache is bounded (LRU,
  `cache_size`).
* **Asynchrony.** `warning()`/`normal()` only enqueue (bounded; when full the event is
  dropped with a log line). One daemon thread does the API calls; every failure is
  logged, never raised. `stop()` drains what is queued (bounded by a timeout) and ends
  the thread, after writing the counts of series that grew since their last write;
  `flush()` waits for the queue to empty (for tests and shutdown).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from kube.client import ApiError, Client, is_already_exists, is_not_found, path_segment
from kube.times import micro_time
from kube.types import JSON

log = logging.getLogger(__name__)

NOTE_LIMIT = 1024  # bytes, events.k8s.io validation
REASON_LIMIT = 128
ACTION_LIMIT = 128
NAME_LIMIT = 253
FINISH_SECONDS = 6 * 60.0  # client-go tools/events finishTime
REFRESH_SECONDS = 30 * 60.0  # client-go tools/events refreshTime
TICK_SECONDS = 5.0  # how often the sender thread looks at the two periods
REPORTING_CONTROLLER = "service-serving-signer"
"""The `reportingController` of the Events this project records (the process's recorder)
and the one `explain` looks for; like `kube.client`'s user agent, the one name of ours
here."""


@dataclass(frozen=True)
class ObjectRef:
    """The object an event is about (`regarding`) or mentions (`related`)."""

    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str = "v1"

    def to_json(self) -> JSON:
        ref: JSON = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass(frozen=True)
class _Pending:
    type: str
    regarding: ObjectRef
    related: ObjectRef | None
    reason: str
    note: str
    action: str
    at: datetime


_Key = tuple[str, str, str, str, str, str, str, str]


@dataclass
class _Seen:
    namespace: str
    name: str
    count: int  # occurrences so far
    written: int  # the count the API server has (1: no series yet)
    first_seen: float  # monotonic
    last_seen: float  # monotonic
    last_observed: datetime  # wall clock, for series.lastObservedTime


def truncate_utf8(text: str, limit: int) -> str:
    """At most `limit` UTF-8 bytes, never splitting a character."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[:limit].decode(errors="ignore")


class Recorder(Protocol):
    """What a controller needs of an Event recorder: `EventRecorder`, or a test's fake
    (tests/unit/fakes.py). Its method is spelled like `EventRecorder`'s below on
    purpose: a Protocol restates the signature it checks callers against."""

    def warning(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None: ...


class StepRecorder(Recorder, Protocol):
    """A `Recorder` that also records a controller's steps as Normal events (the managed
    CA's rotation steps)."""

    def normal(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None: ...


_STOP = object()
_TICK = object()
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class EventRecorder:
    """Record events asynchronously (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        reporting_controller: str,
        reporting_instance: str,
        *,
        queue_size: int = 1000,
        finish: float = FINISH_SECONDS,
        refresh: float = REFRESH_SECONDS,
        cache_size: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance
        self.finish = finish
        self.refresh = refresh
        self.cache_size = cache_size
        self._clock = clock
        self._now = now
        self._queue: queue.Queue[_Pending | object] = queue.Queue(maxsize=queue_size)
        self._seen: OrderedDict[_Key, _Seen] = OrderedDict()
        self._last_ns = 0
        self._stopped = False
        started = clock()
        self._next_finish = started + finish
        self._next_refresh = started + refresh
        self._thread = threading.Thread(target=self._loop, name="event-recorder", daemon=True)
        self._thread.start()

    # recording (any thread, never blocks) -----------------------------------------------
    # warning/normal/event share one parameter list but stay three public entries, so that
    # mypy checks each caller by name (a partialmethod would hide them).

    def warning(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None:
        self.event("Warning", regarding, reason, note, action, related)

    def normal(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None:
        self.event("Normal", regarding, reason, note, action, related)

    def event(
        self,
        type_: str,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None:
        if self._stopped:
            return
        pending = _Pending(
            type=type_,
            regarding=regarding,
            related=related,
            reason=truncate_utf8(reason, REASON_LIMIT),
            note=truncate_utf8(note, NOTE_LIMIT),
            action=truncate_utf8(action, ACTION_LIMIT),
            at=self._now(),
        )
        try:
            self._queue.put_nowait(pending)
        except queue.Full:
            log.warning(
                "event queue full; dropping %s event %s on %s/%s",
                type_,
                reason,
                regarding.namespace,
                regarding.name,
            )

    # lifecycle ------------------------------------------------------------------------

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything queued so far has been sent (or failed). False on timeout."""
        deadline = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def tick(self) -> None:
        """Run the periodic refresh/finish check now (it also runs every few seconds)."""
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_TICK)

    def stop(self, timeout: float = 2.0) -> None:
        """Send what is queued and the counts series gained since their last write
        (within `timeout`), then end the thread."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            log.warning("event recorder: queue still full at stop; abandoning it")
            return
        self._thread.join(timeout)

    # the sender thread -----------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=TICK_SECONDS)
            except queue.Empty:
                self._guarded(self._periodic)
                continue
            try:
                if item is _STOP:
                    self._guarded(self._write_grown_series)
                    return
                if item is _TICK:
                    self._periodic()
                else:
                    assert isinstance(item, _Pending)
                    self._send(item)
            except ApiError as err:
                log.warning("could not record event: %s", err)
            except Exception:
                log.exception("could not record event")
            finally:
                self._queue.task_done()

    @staticmethod
    def _guarded(fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("event recorder: periodic work failed")

    def _send(self, ev: _Pending) -> None:
        ref = ev.regarding
        rel = ev.related
        key: _Key = (
            ref.uid,
            ref.namespace,
            ref.name,
            rel.uid if rel else "",
            ev.type,
            ev.reason,
            ev.note,
            ev.action,
        )
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            seen.count += 1
            seen.last_seen = now
            seen.last_observed = ev.at
            if seen.written > 1:
                return  # a running series: counted here, written by `_periodic`
            if self._write_series(seen):
                return
            del self._seen[key]  # expired or deleted: start over with a new Event
        namespace, name = self._create(ev)
        self._seen[key] = _Seen(namespace, name, 1, 1, now, now, ev.at)
        while len(self._seen) > self.cache_size:
            self._seen.popitem(last=False)

    def _write_series(self, seen: _Seen) -> bool:
        """PATCH the series count; False if the Event is gone (404)."""
        try:
            self.client.patch(
                f"/apis/events.k8s.io/v1/namespaces/{path_segment(seen.namespace)}"
                f"/events/{path_segment(seen.name)}",
                {
                    "series": {
                        "count": seen.count,
                        "lastObservedTime": micro_time(seen.last_observed),
                    }
                },
            )
        except ApiError as err:
            if not is_not_found(err):
                raise
            return False
        seen.written = seen.count
        return True

    def _periodic(self) -> None:
        now = self._clock()
        if now >= self._next_refresh:
            self._next_refresh = now + self.refresh
            self._write_grown_series()
        if now >= self._next_finish:
            self._next_finish = now + self.finish
            self._finish_series(now)

    def _write_grown_series(self) -> None:
        """client-go's refreshExistingEventSeries: write every count that grew."""
        for key, seen in list(self._seen.items()):
            if seen.count > seen.written and not self._write_series(seen):
                del self._seen[key]

    def _finish_series(self, now: float) -> None:
        """client-go's finishSeries: a series quiet for `finish` gets its final count and
        leaves the cache; so does a singleton older than `finish`."""
        for key, seen in list(self._seen.items()):
            if seen.written > 1 or seen.count > 1:
                if now - seen.last_seen > self.finish:
                    if seen.count > seen.written:
                        self._write_series(seen)
                    del self._seen[key]
            elif now - seen.first_seen > self.finish:
                del self._seen[key]

    def _create(self, ev: _Pending) -> tuple[str, str]:
        namespace = ev.regarding.namespace or "default"
        path = f"/apis/events.k8s.io/v1/namespaces/{path_segment(namespace)}/events"
        body: JSON = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"namespace": namespace},
            "eventTime": micro_time(ev.at),
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": ev.action,
            "reason": ev.reason,
            "note": ev.note,
            "type": ev.type,
            "regarding": ev.regarding.to_json(),
        }
        if ev.related is not None:
            body["related"] = ev.related.to_json()
        for _ in range(3):
            name = self._event_name(ev.regarding.name, ev.at)
            body["metadata"]["name"] = name
            try:
                self.client.create(path, body)
                return namespace, name
            except ApiError as err:
                if not is_already_exists(err):
                    raise
        raise ApiError(409, "AlreadyExists", {"message": "no free event name"})

    def _event_name(self, regarding_name: str, at: datetime) -> str:
        stamp = (at - _EPOCH) // timedelta(microseconds=1) * 1000
        self._last_ns = max(stamp, self._last_ns + 1)
        suffix = f".{self._last_ns:x}"
        # A cut can end on a `-` or `.`, which must not precede the suffix's dot (the
        # name would not be a DNS subdomain: 422, and the Event would be lost).
        return regarding_name[: NAME_LIMIT - len(suffix)].rstrip("-.") + suffix
