"""The waiting index: every way a PodCertificateRequest waits, in one place.

A request waits on a Service or its Pod (below), or on new signing material (its
signing certificate expires too soon to issue: `wait_for_material`, re-driven by
`material_changed`); and while it waits its Pod's wait is timed across the requests
kubelet makes for it (`signer.podwaits`, fed from here). `forget` ends all of them.

A request whose Services are missing or do not select its Pod is neither issued nor
refused (docs/reference.md §5.2 step 6): it *waits*, and is re-driven only when something
it depends on changes — a Service it names is added or updated, or its Pod's labels
change. This module decides which requests such an event wakes, and nothing else. A
Service event costs time proportional to the requests waiting on *that* Service, never to
all requests (docs/reference.md §5.4, bench "wake-up"); the only periodic work is the
controller's slow resync of the waiting requests (`waiting_keys`), a safety net against a
missed event.

Keys are strings: `namespace/name` for Services and Pods, and the work-queue key
(`namespace/name`) for requests. Each request has at most one entry: `wait()` replaces
whatever it waited on before, and `forget()` (request deleted, or it reached a terminal
state) removes it, so PCRs deleted by the 15-minute cleaner leave nothing behind.

The index also answers the two gauges: how many requests wait, and since when the
oldest has been waiting (the request's creation time, when known — that is the age an
operator cares about, as kubelet's clock started then).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from signer.podwaits import PodWaits


@dataclass(frozen=True)
class _Entry:
    pod: str
    services: frozenset[str]
    since: float


class WaitingIndex:
    """Thread-safe Service→requests and Pod→requests multimap with a reverse map."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._by_service: dict[str, set[str]] = {}
        self._by_pod: dict[str, set[str]] = {}
        self._on_material: set[str] = set()
        self.pod_waits = PodWaits(clock)

    def wait(
        self,
        pcr_key: str,
        pod_key: str,
        service_keys: Iterable[str],
        since: float | None = None,
        *,
        pod_uid: str | None = None,
        namespace: str = "",
    ) -> None:
        """Record that `pcr_key` waits on `service_keys` and on its Pod, replacing what
        it waited on before. `since` (unix seconds; default now) is kept from the first
        call so the age does not restart on every re-drive. With `pod_uid`, the Pod's
        wait is timed from `since` too (`signer.podwaits`)."""
        services = frozenset(service_keys)
        if pod_uid is not None:
            self.pod_waits.waiting(
                pod_uid, namespace, pcr_key, since if since is not None else self._clock()
            )
        with self._lock:
            previous = self._entries.get(pcr_key)
            if previous is not None:
                self._unlink(pcr_key, previous)
                started = previous.since
            else:
                started = since if since is not None else self._clock()
            entry = _Entry(pod_key, services, started)
            self._entries[pcr_key] = entry
            self._by_pod.setdefault(pod_key, set()).add(pcr_key)
            for service in services:
                self._by_service.setdefault(service, set()).add(pcr_key)

    def forget(self, pcr_key: str, *, gone: bool = False) -> bool:
        """`pcr_key` waits no more, on anything: answered (by us or another replica), or
        `gone` (deleted, usually by the cleaner). Its Pod's wait ends with an answer;
        after a deletion the Pod still waits for kubelet's next request
        (`PodWaits.released`). True if it waited on a Service or Pod."""
        if gone:
            self.pod_waits.released(pcr_key)
        else:
            self.pod_waits.resolved(pcr_key)
        with self._lock:
            self._on_material.discard(pcr_key)
            entry = self._entries.pop(pcr_key, None)
            if entry is None:
                return False
            self._unlink(pcr_key, entry)
            return True

    def wait_for_material(self, pcr_key: str) -> None:
        """`pcr_key` cannot be issued with the signing material in use (it expires too
        soon); `material_changed` hands it back."""
        with self._lock:
            self._on_material.add(pcr_key)

    def material_changed(self) -> list[str]:
        """The requests that waited on new signing material; they wait on it no more."""
        with self._lock:
            keys, self._on_material = list(self._on_material), set()
        return keys

    def pod_deleted(self, pod_uid: str) -> None:
        """The Pod is gone: its wait ends now (`PodWaits.pod_deleted`)."""
        self.pod_waits.pod_deleted(pod_uid)

    def waiting_on_service(self, service_key: str) -> set[str]:
        with self._lock:
            return set(self._by_service.get(service_key, ()))

    def waiting_on_pod(self, pod_key: str) -> set[str]:
        with self._lock:
            return set(self._by_pod.get(pod_key, ()))

    def is_waiting(self, pcr_key: str) -> bool:
        with self._lock:
            return pcr_key in self._entries

    def services_of(self, pcr_key: str) -> frozenset[str]:
        """What `pcr_key` waits on (empty if it does not wait)."""
        with self._lock:
            entry = self._entries.get(pcr_key)
            return entry.services if entry is not None else frozenset()

    def waiting_keys(self) -> list[str]:
        """Every waiting request (for the periodic resync)."""
        with self._lock:
            return list(self._entries)

    def pending(self) -> int:
        with self._lock:
            return len(self._entries)

    def oldest_since(self) -> float | None:
        """Unix time the oldest waiting request started waiting, or None."""
        with self._lock:
            if not self._entries:
                return None
            return min(entry.since for entry in self._entries.values())

    def oldest_age(self) -> float:
        """Seconds the oldest waiting request has waited; 0 when none waits."""
        oldest = self.oldest_since()
        return 0.0 if oldest is None else max(0.0, self._clock() - oldest)

    def sizes(self) -> tuple[int, int, int]:
        """(requests, Services, Pods) with entries — for tests and leak checks."""
        with self._lock:
            return len(self._entries), len(self._by_service), len(self._by_pod)

    def _unlink(self, pcr_key: str, entry: _Entry) -> None:
        _discard(self._by_pod, entry.pod, pcr_key)
        for service in entry.services:
            _discard(self._by_service, service, pcr_key)


def _discard(mapping: dict[str, set[str]], key: str, member: str) -> None:
    members = mapping.get(key)
    if members is None:
        return
    members.discard(member)
    if not members:
        del mapping[key]
