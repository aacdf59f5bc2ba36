"""The injector's side of the convergence report: per-object states counted for the
metrics, and `Progress`, which knows what has been synced since when. What the report
says and how it is read is the contract in `trust.convergence` (docs/reference.md §11).
Pure: records and counters; no client.

What it decides:

* **One state per annotated object** (`trust.convergence.ObjectConvergence.state`), from
  the last sync's decision: `current` (its output is the resolved bundle), `stale` (it is
  not, and a write is due or failed), `empty` (the selection matches no bundle; the old
  value is kept), `invalid` (bad annotation, or the object cannot carry a bundle),
  `conflicting` (another server-side apply manager owns the field; nothing is written).
* **Which anchors it selects and holds** (`trust.bundle.fingerprint` of each anchor).
  `holding` is known without parsing the object's content: a current object holds its
  selection; any other holds what the annotation `targets.INJECTED_ANNOTATION`, written
  beside our last write, lists — when the content's digest still equals the one that
  annotation records (else nothing known).
* **Blocked** (`blocked`, the reason): the object cannot be written for a reason its
  owner owns (immutable ConfigMap or another not-applicable shape with a valid selection,
  another Apply manager, the API refusing the write). It has a Warning Event.
* **Since when** (`Progress`): the report is `complete` once every managed object has
  been synced since this leader started leading, and a bundle's anchors are observed
  once every object that may select its current version has been synced since the
  injector saw that version. A sync counts from the moment it *started*: one that began
  before an event may have read the cache before it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable

from trust.convergence import ObjectConvergence

NOT_LEADING = "(not leading)"
"""What `Progress.pending` names before this replica started leading."""

COUNTED = ("managed", "stale", "empty", "invalid", "conflicting")


def counts(
    statuses: Iterable[ObjectConvergence], kinds: Iterable[str]
) -> dict[str, dict[str, int]]:
    """Per kind: managed (every annotated object) and how many are in each state that is
    not `current` (the `cabundle_injector_objects` gauge)."""
    out = {kind: dict.fromkeys(COUNTED, 0) for kind in kinds}
    for status in statuses:
        row = out.setdefault(status.kind, dict.fromkeys(COUNTED, 0))
        row["managed"] += 1
        if status.state in row:
            row[status.state] += 1
    return out


class Progress:
    """What has been synced since when, on a logical clock (ticks). Thread-safe.

    The controller calls `begin()` when it starts leading, takes `next(ticks)` as a sync
    begins and calls `synced(key, tick)` when it returned (with `gone`: the object is no
    more, forget it), and `saw_bundle(name, version)` *before* enqueuing what a bundle
    event concerns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ticks = itertools.count(1)  # next() is atomic: a sync takes one unlocked
        self._since: int | None = None
        self._synced: dict[str, int] = {}  # key -> when its last finished sync started
        self._bundles: dict[str, tuple[str, int]] = {}  # name -> (version, when seen)

    def _tick(self) -> int:
        return next(self.ticks)

    def begin(self) -> None:
        """This replica starts leading: nothing synced before counts."""
        tick = self._tick()
        with self._lock:
            self._since = tick

    def started(self) -> int:
        return self._tick()

    def synced(self, key: str, started: int, *, gone: bool = False) -> None:
        with self._lock:
            if gone:
                self._synced.pop(key, None)
            else:
                self._synced[key] = max(started, self._synced.get(key, 0))

    def saw_bundle(self, name: str, version: str) -> None:
        tick = self._tick()
        with self._lock:
            self._bundles[name] = (version, tick)

    def forget_bundle(self, name: str) -> None:
        with self._lock:
            self._bundles.pop(name, None)

    def complete(self, keys: Iterable[str]) -> bool:
        """Every one of `keys` synced since `begin()`."""
        with self._lock:
            since = self._since
            return since is not None and all(self._synced.get(k, 0) > since for k in keys)

    def pending(self, keys: Iterable[str], limit: int) -> tuple[str, ...]:
        """The first `limit` of `keys` (sorted) not synced since `begin()` — what keeps
        the report incomplete; before `begin()`, a placeholder ("(not leading)")."""
        with self._lock:
            since = self._since
            if since is None:
                return (NOT_LEADING,)
            late = [k for k in keys if self._synced.get(k, 0) <= since]
        return tuple(sorted(late)[:limit])

    def observed(self, name: str, version: str, keys: Iterable[str]) -> bool:
        """The bundle `name` at `version` has been seen, and every one of `keys` synced
        since (and since `begin()`)."""
        with self._lock:
            seen = self._bundles.get(name)
            if seen is None or seen[0] != version or self._since is None:
                return False
            after = max(seen[1], self._since)
            return all(self._synced.get(k, 0) > after for k in keys)
