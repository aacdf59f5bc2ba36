"""A list-watch informer with a local cache, in the manner of client-go's reflector +
shared informer, over our JSON `kube.client.Client`.

What it decides:

* **Listing.** By default a streaming list (`watch_list=True`, KEP-3157, what client-go
  informers do since 1.35): one WATCH with `sendInitialEvents=true`,
  `resourceVersionMatch=NotOlderThan`, whose ADDED events up to the
  `k8s.io/initial-events-end` BOOKMARK are the list, applied as one replace; the same
  stream then goes on as the watch. A server that refuses it (422: WatchList off or
  kube-apiserver < 1.34; 400/501) gets paginated LISTs from then on (`kube.pager`:
  `limit`/`continue`, `page_size` per page, the next page read ahead; a 410 on a
  continue token falls back to one unpaged LIST, as client-go's pager does), and a
  stream that ends before its initial events do gets one. `has_synced()` turns true once
  the first list is in and its handlers have run.
* **Relisting.** Every later list (after 410 Gone) is diffed against the cache: new keys
  fire `on_add`, keys whose record changed (`!=`: a transform keeps what callers read,
  so a new resourceVersion that changed nothing they read is no change) fire
  `on_update(old, new)`, keys gone fire `on_delete(last cached record)`; unchanged
  objects fire nothing and keep their cached record instance. Only the changed records
  are held while listing (plus a set of the cached keys), so a relist never holds two
  copies of a big cache. No resourceVersion is kept per object: at 150,000 Pods that map
  was a measurable share of the cache (bench/README.md, "Memory"), to save one transform
  per object on a rare relist.
* **Watching.** WATCH from the last resourceVersion with `allowWatchBookmarks=true` and a
  server `timeoutSeconds` drawn from [min_watch_timeout, max_watch_timeout]; BOOKMARKs
  and every event advance the resourceVersion. When the server ends a watch normally we
  re-watch at once from where we were (unless it ended at once with no events: then
  we back off, as on an error).
* **Errors.** 410 Gone (an HTTP 410 or an ERROR event with code 410) → relist. Any other
  error (HTTP status, transport failure, a watch silent past `read_timeout`, an ERROR
  event) → jittered exponential backoff (0.8 s doubling to 30 s, jitter up to +100%,
  capped; back to 0.8 s after `backoff_reset` seconds without errors; at least any
  `Retry-After`), then re-watch from the last resourceVersion (a LIST only if we never
  listed or the server says 410). Unlike client-go we do not relist after every watch
  error: a re-watch from a still-valid resourceVersion loses nothing, and one that is
  too old gets 410.
* **Read timeout.** A watch that has been silent for `read_timeout` (default
  `WATCH_READ_TIMEOUT` = 1.25 times the API server's bookmark interval) is dead: we ask
  for BOOKMARKs, and kube-apiserver's watch cache sends one to such watchers about
  once a minute (`defaultBookmarkFrequency`, `k8s.io/apiserver/pkg/storage/cacher`)
  even when nothing changes, so 75 s of silence means a connection that no longer
  delivers — a NAT or load balancer that dropped it, a partitioned server — and the
  watch is re-established (from the last resourceVersion; nothing is lost). Against a
  server that sends no bookmarks (watch cache off) a quiet watch is merely renewed
  every 75 s. TCP keepalive (`kube.client`) catches a dead peer whose kernel is gone;
  this catches one whose kernel still answers.
* **Stopping.** `run(stop)` returns promptly after `stop` is set, whatever the read
  timeout: a small helper thread waits on `stop` and then shuts down the socket of the
  watch in flight (`kube.transport.StreamCanceller`), so the blocked read ends at once —
  also while the watch is in its TLS handshake or awaits its answer's head (the socket
  is handed over as soon as it is connected; only a TCP connect to a black-holed
  address waits out the 10 s connect timeout, and behind an HTTP proxy the hand-over
  comes with the head). A LIST page in flight is bounded by the client's request
  timeout.
* **Records.** `transform(raw) -> T` keeps only what callers read; the cache key
  (`namespace/name`, or `name` when cluster-scoped) is computed from the raw metadata
  before transforming. `key(record)`, when given, must return that same key from the
  record: the cache then stores the record's own string as its key (one string per
  object instead of two: it matters at 150,000 Pods). Indexers map a record to index
  values (`by_index`).
* **Handlers** run on the informer thread, outside the cache lock, and must be cheap
  (enqueue a key). A handler that raises is logged; the informer carries on.

The cache is guarded by an RLock; readers get the stored records (treat them as
read-only).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from kube import memory, pager
from kube.client import ApiError, Client
from kube.transport import StreamCanceller
from kube.types import JSON

log = logging.getLogger(__name__)

T = TypeVar("T")

# A LIST at least this big is followed by `memory.release_free_memory()` and leaves its
# records in the garbage collector's permanent generation (`memory.freeze_after_lists`).
TRIM_AFTER_LIST = 1000

Indexer = Callable[[T], list[str]]


# A streaming list's last initial event is a BOOKMARK with this annotation (KEP-3157).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# How a server without streaming lists answers `sendInitialEvents` (422: the WatchList
# feature gate is off; 400/501: a server or proxy that does not know the parameter).
WATCH_LIST_REFUSED = (400, 422, 501)

# kube-apiserver's watch cache sends watchers that allow bookmarks one about every minute.
BOOKMARK_INTERVAL = 60.0
WATCH_READ_TIMEOUT = 1.25 * BOOKMARK_INTERVAL


class _Gone(Exception):
    """The resourceVersion we watch from is too old: relist."""


def object_key(raw: JSON) -> str:
    """client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or `name` if cluster-scoped."""
    meta = raw.get("metadata") or {}
    name = str(meta.get("name", ""))
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def key_namespace(key: str) -> str:
    """The namespace of an `object_key` (`""` for a cluster-scoped key): a work queue's
    flow when namespaces are to be served fairly (`kube.workqueue`)."""
    namespace, sep, _ = key.partition("/")
    return namespace if sep else ""


def _rv(raw: JSON) -> str:
    return str((raw.get("metadata") or {}).get("resourceVersion", ""))


def _identity(raw: JSON) -> Any:
    return raw


@dataclass
class _Handler(Generic[T]):
    on_add: Callable[[T], None] | None
    on_update: Callable[[T, T], None] | None
    on_delete: Callable[[T], None] | None


class Backoff:
    """client-go's reflector backoff: exponential with jitter, reset after a quiet spell."""

    def __init__(
        self,
        initial: float = 0.8,
        maximum: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng or random.Random()
        self._clock = clock
        self._current = 0.0
        self._last: float | None = None

    def next(self) -> float:
        now = self._clock()
        if self._last is not None and now - self._last > self.reset_after:
            self._current = 0.0
        if self._current == 0.0:
            self._current = self.initial
        else:
            self._current = min(self._current * self.factor, self.maximum)
        self._last = now
        return min(self._current * (1.0 + self._rng.random() * self.jitter), self.maximum)


class Informer(Generic[T]):
    """List-watch one collection into a cache of `T` records (see the module docstring)."""

    def __init__(
        self,
        client: Client,
        list_path: str,
        *,
        name: str,
        field_selector: str | None = None,
        label_selector: str | None = None,
        transform: Callable[[JSON], T] | None = None,
        key: Callable[[T], str] | None = None,
        indexers: dict[str, Indexer[T]] | None = None,
        page_size: int = 500,
        watch_list: bool = True,
        read_timeout: float | None = None,
        # The watch's timeouts and backoff, by name, so that a caller can tune them here.
        min_watch_timeout: int = 300,
        max_watch_timeout: int = 600,
        backoff_initial: float = 0.8,
        backoff_max: float = 30.0,
        backoff_reset: float = 120.0,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.list_path = list_path
        self.name = name
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_list = watch_list
        self.read_timeout = read_timeout
        self.min_watch_timeout = min_watch_timeout
        self.max_watch_timeout = max(min_watch_timeout, max_watch_timeout)
        self._transform: Callable[[JSON], T] = transform or cast(Callable[[JSON], T], _identity)
        self._key_of = key
        self._indexers: dict[str, Indexer[T]] = dict(indexers or {})
        self._rng = rng or random.Random()
        self._backoff = Backoff(
            backoff_initial, backoff_max, reset_after=backoff_reset, rng=self._rng
        )
        self._lock = threading.RLock()
        self._items: dict[str, T] = {}
        self._index: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}
        self._index_values: dict[str, dict[str, tuple[str, ...]]] = {n: {} for n in self._indexers}
        self._handlers: list[_Handler[T]] = []
        self._synced = threading.Event()
        self._resource_version = ""

    # handlers and reads ------------------------------------------------------------------

    def add_handler(
        self,
        on_add: Callable[[T], None] | None = None,
        on_update: Callable[[T, T], None] | None = None,
        on_delete: Callable[[T], None] | None = None,
    ) -> None:
        """Register callbacks. Objects already cached are replayed to `on_add` (as
        client-go does for late handlers)."""
        handler = _Handler(on_add, on_update, on_delete)
        with self._lock:
            self._handlers.append(handler)
            existing = list(self._items.values())
        if on_add is not None:
            for obj in existing:
                self._call(on_add, obj)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    def wait_for_sync(self, stop: threading.Event, timeout: float | None = None) -> bool:
        """Block until synced (True), or until `stop` is set or `timeout` passes (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not stop.is_set():
            wait = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if wait <= 0:
                return self.has_synced()
            if self._synced.wait(wait):
                return True
        return self.has_synced()

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._items.get(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._items)

    def by_index(self, index_name: str, value: str) -> list[T]:
        """Records whose indexer `index_name` returned `value`. KeyError if no such index."""
        with self._lock:
            keys = self._index[index_name].get(value, set())
            return [self._items[k] for k in sorted(keys)]

    @property
    def resource_version(self) -> str:
        """The resourceVersion the cache reflects (last LIST, event or BOOKMARK)."""
        with self._lock:
            return self._resource_version

    # the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """List, then watch, until `stop` is set. Blocks; call it in a thread."""
        canceller = StreamCanceller()

        def cancel_on_stop() -> None:
            stop.wait()
            canceller.cancel()

        threading.Thread(
            target=cancel_on_stop, name=f"informer-{self.name}-stop", daemon=True
        ).start()
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    if self.watch_list:
                        self._watch_list(canceller, stop)
                    else:
                        with memory.collector_paused():
                            self._list_and_replace(stop)
                    need_list = False
                    continue
                started = time.monotonic()
                if self._watch(canceller) > 0 or time.monotonic() - started >= 1.0:
                    continue
                # An empty watch that ended at once is a misbehaving server or proxy:
                # back off rather than spin.
                log.debug("informer %s: watch closed at once with no events", self.name)
                retry_after = None
            except _Gone as gone:
                need_list = True
                log.info("informer %s: %s; relisting", self.name, gone)
                retry_after = None
            except ApiError as err:
                if err.status == 410:
                    need_list = True
                    log.info("informer %s: resourceVersion gone; relisting", self.name)
                elif not stop.is_set():
                    log.warning(
                        "informer %s: %s failed: %s",
                        self.name,
                        "list" if need_list else "watch",
                        err,
                    )
                retry_after = err.retry_after
            except Exception:
                log.exception("informer %s: unexpected error", self.name)
                retry_after = None
            if stop.is_set():
                break
            delay = self._backoff.next()
            if retry_after:
                delay = max(delay, retry_after)
            stop.wait(delay)
        log.debug("informer %s: stopped", self.name)

    def _watch_list(self, canceller: StreamCanceller, stop: threading.Event) -> None:
        """Sync by a streaming list (see the module docstring), then go on watching on the
        same stream until it ends. Falls back to a paged LIST, for good if the server
        refuses streaming lists, for this once if a stream ends before its initial
        events do."""
        timeout_seconds = self._rng.randint(self.min_watch_timeout, self.max_watch_timeout)
        params: dict[str, Any] = {
            "sendInitialEvents": True,
            "resourceVersionMatch": "NotOlderThan",
            "resourceVersion": "",
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
            "fieldSelector": self.field_selector,
            "labelSelector": self.label_selector,
        }
        events = self.client.watch(
            self.list_path,
            params,
            read_timeout=self.read_timeout or WATCH_READ_TIMEOUT,
            canceller=canceller,
        )
        try:
            try:
                with memory.collector_paused():
                    synced = self._initial_events(events, stop)
            except ApiError as err:
                if err.status not in WATCH_LIST_REFUSED:
                    raise
                log.info(
                    "informer %s: the server refuses streaming lists (%s); paged LISTs from now",
                    self.name,
                    err,
                )
                self.watch_list = False
                synced = False
            if stop.is_set():
                return
            if not synced:
                if self.watch_list:
                    log.warning(
                        "informer %s: streaming list ended before its initial events did; "
                        "listing in pages",
                        self.name,
                    )
                with memory.collector_paused():
                    self._list_and_replace(stop)
                return
            for ev in events:
                self._apply(ev)
        finally:
            events.close()

    def _initial_events(self, events: Iterator[JSON], stop: threading.Event) -> bool:
        """Read a streaming list's initial events up to the `k8s.io/initial-events-end`
        BOOKMARK and apply them as one replace (True); False if the stream ended first
        or `stop` was set. Like a paged relist, only changed records are held."""
        changed: dict[str, T] = {}
        with self._lock:
            unseen = set(self._items)
        cached = self._items  # only this thread writes it: reads need no lock
        listed = 0
        for ev in events:
            if stop.is_set():
                return False
            kind = ev.get("type")
            raw = ev.get("object") or {}
            if kind == "ERROR":
                self._apply(ev)  # raises
            if kind == "BOOKMARK":
                meta = raw.get("metadata") or {}
                if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                    self._replace(changed, unseen, _rv(raw))
                    self._after_list(listed)
                    return True
                continue
            key = object_key(raw)
            if kind == "DELETED":  # not sent among initial events; handled all the same
                changed.pop(key, None)
                if key in cached:
                    unseen.add(key)
                continue
            listed += 1
            changed.pop(key, None)
            self._collect(key, raw, unseen, changed)
        return False

    def _list_and_replace(self, stop: threading.Event) -> None:
        """Page through a LIST, then apply it as one replace. Only what changed is held
        while paging: an object whose record equals the cached one keeps the cached
        instance, so a relist of a big, mostly unchanged cache costs one page and a set
        of keys, not a second copy of the cache."""
        params: dict[str, Any] = {
            "limit": self.page_size,
            "fieldSelector": self.field_selector,
            "labelSelector": self.label_selector,
        }
        changed: dict[str, T] = {}
        with self._lock:
            unseen = set(self._items)
        resource_version = ""
        listed = 0
        for page in pager.pages(self.client, self.list_path, params, stop, name=self.name):
            if page is pager.RESTART:  # one unpaged LIST replaces the pages read so far
                changed.clear()
                listed = 0
                with self._lock:
                    unseen = set(self._items)
                continue
            for raw in page.get("items") or []:
                listed += 1
                self._collect(object_key(raw), raw, unseen, changed)
            resource_version = str((page.get("metadata") or {}).get("resourceVersion", ""))
            del page  # the parsed page goes before the next one is decoded
        if stop.is_set():
            return
        self._replace(changed, unseen, resource_version)
        self._after_list(listed)

    def _collect(self, key: str, raw: JSON, unseen: set[str], changed: dict[str, T]) -> None:
        """One listed object: into `changed` unless its record equals the cached one
        (which then stays as it is); either way it is no longer `unseen`. Only the
        informer thread writes the cache, so reading it here needs no lock."""
        record = self._safe_transform(raw)
        if key in unseen:
            unseen.discard(key)
            if record is not None and self._items.get(key) == record:
                return
        if record is not None:
            changed[self._stored_key(key, record)] = record

    def _after_list(self, listed: int) -> None:
        if listed >= TRIM_AFTER_LIST:
            memory.release_free_memory()  # the list's garbage, back to the system
            memory.freeze_after_lists()

    def _replace(
        self,
        changed: dict[str, T],
        gone: set[str],
        resource_version: str,
    ) -> None:
        """Apply a LIST: `changed` records are new or differ from the cached ones, keys in
        `gone` were cached but not listed; every other cached record stays as it is."""
        added: list[T] = []
        updated: list[tuple[T, T]] = []
        deleted: list[T] = []
        with self._lock:
            for key, record in changed.items():
                old = self._items.get(key)
                if old is None:
                    added.append(record)
                else:
                    updated.append((old, record))
                self._store(key, record)
            for key in gone:
                if key in self._items:
                    deleted.append(self._items[key])
                    self._remove(key)
            self._resource_version = resource_version
            handlers = list(self._handlers)
            count = len(self._items)
        changed.clear()
        for h in handlers:
            for obj in added:
                if h.on_add:
                    self._call(h.on_add, obj)
            for old, new in updated:
                if h.on_update:
                    self._call(h.on_update, old, new)
            for obj in deleted:
                if h.on_delete:
                    self._call(h.on_delete, obj)
        if not self._synced.is_set():
            log.info("informer %s: synced %d objects", self.name, count)
            self._synced.set()

    def _watch(self, canceller: StreamCanceller) -> int:
        """One watch request, applied event by event; returns how many events came."""
        timeout_seconds = self._rng.randint(self.min_watch_timeout, self.max_watch_timeout)
        read_timeout = self.read_timeout or min(timeout_seconds + 30.0, WATCH_READ_TIMEOUT)
        params: dict[str, Any] = {
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
            "fieldSelector": self.field_selector,
            "labelSelector": self.label_selector,
        }
        count = 0
        for ev in self.client.watch(
            self.list_path, params, read_timeout=read_timeout, canceller=canceller
        ):
            count += 1
            self._apply(ev)
        return count

    def _apply(self, ev: JSON) -> None:
        kind = ev.get("type")
        raw = ev.get("object") or {}
        if kind == "ERROR":
            code = int(raw.get("code") or 0)
            if code == 410:
                raise _Gone(raw.get("message") or "watch ERROR 410")
            raise ApiError(code, str(raw.get("reason", "")), raw)
        rv = _rv(raw)
        if kind == "BOOKMARK":
            with self._lock:
                self._resource_version = rv or self._resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("informer %s: ignoring watch event of type %r", self.name, kind)
            return
        key = object_key(raw)
        record = self._safe_transform(raw)
        with self._lock:
            old = self._items.get(key)
            if kind == "DELETED":
                self._remove(key)
            elif record is not None:
                self._store(self._stored_key(key, record), record)
            if rv:
                self._resource_version = rv
            handlers = list(self._handlers)
        if kind == "DELETED":
            final = record if record is not None else old
            if final is not None:
                for h in handlers:
                    if h.on_delete:
                        self._call(h.on_delete, final)
        elif record is not None:
            for h in handlers:
                if old is None and h.on_add:
                    self._call(h.on_add, record)
                elif old is not None and h.on_update:
                    self._call(h.on_update, old, record)

    # cache internals (call with the lock held) ---------------------------------------------

    def _store(self, key: str, record: T) -> None:
        if key in self._items:
            self._unindex(key)
            # Re-insert rather than overwrite: a dict keeps its old key object on
            # overwrite, which would pin the replaced record's key string.
            del self._items[key]
        self._items[key] = record
        for name, fn in self._indexers.items():
            try:
                values = tuple(fn(record))
            except Exception:
                log.exception("informer %s: indexer %s failed on %s", self.name, name, key)
                values = ()
            self._index_values[name][key] = values
            for value in values:
                self._index[name].setdefault(value, set()).add(key)

    def _remove(self, key: str) -> None:
        if key in self._items:
            self._unindex(key)
            del self._items[key]

    def _unindex(self, key: str) -> None:
        for name in self._indexers:
            for value in self._index_values[name].pop(key, ()):
                keys = self._index[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._index[name][value]

    # helpers -------------------------------------------------------------------------------

    def _stored_key(self, key: str, record: T) -> str:
        """The record's own key string when it has one equal to `key` (else `key`)."""
        if self._key_of is not None:
            own = self._key_of(record)
            if own == key:
                return own
        return key

    def _safe_transform(self, raw: JSON) -> T | None:
        try:
            return self._transform(raw)
        except Exception:
            log.exception("informer %s: transform failed on %s", self.name, object_key(raw))
            return None

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("informer %s: handler failed", self.name)

    # Last in the class: from here on `list` in class-scope annotations means this method.
    def list(self) -> list[T]:
        """Every cached record."""
        with self._lock:
            return list(self._items.values())


def index_values(values: Iterable[str | None]) -> list[str]:
    """Helper for indexers: drop empty values."""
    return [v for v in values if v]
