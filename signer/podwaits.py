"""How long each Pod has waited for a certificate, across the requests kubelet makes for it.

kube-controller-manager's cleaner deletes every PodCertificateRequest 15-20 minutes after
its creation, waiting or not, and kubelet then makes a new one for the same Pod. A
request's age therefore restarts about every 16 minutes while the Pod it serves goes on
waiting, and an alert on the oldest *request* fires, clears at the replacement and fires
again. This module keeps the wait per Pod (by UID, so a StatefulSet Pod
recreated under the same name starts afresh):

- `waiting(pod_uid, namespace, request, since)`: the request waits; the Pod's wait
  started at the earliest `since` of its requests (the request's creation time).
- `resolved(request)`: the request was answered (issued, Denied or Failed): when none of
  the Pod's requests waits any more, the Pod stops waiting at once.
- `released(request)`: the request was deleted while waiting (the cleaner): the Pod
  still waits, and its next request continues the same wait if it comes within
  `RELEASE_GRACE`; otherwise (the Pod was deleted too) the Pod is forgotten then — at the
  next release or scrape, oldest release first, so memory stays bounded by the Pods
  released within the grace even when nothing scrapes the metrics.
- `pod_deleted(pod_uid)`: the Pod itself is gone: its wait ends at once (its requests'
  deletion, which follows, finds nothing).

`oldest_by_namespace()` is what the gauge exports: for each namespace with a waiting Pod,
the longest wait, so the series are bounded by the namespaces that have one. Only the
leader syncs requests, so only it reports; a new leader starts from the requests'
creation times (a Pod's earlier, deleted requests are not known to it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

RELEASE_GRACE = 10 * 60.0
"""How long a Pod whose waiting request was deleted is remembered without a new one.
kubelet replaces a request the cleaner deleted within about a minute (it is past its own
10-15 minute abandon threshold by then); ten minutes covers that with room to spare."""


@dataclass
class _Pod:
    namespace: str
    since: float
    requests: set[str] = field(default_factory=set)
    released_at: float | None = None


class PodWaits:
    """Thread-safe: the signer's workers and its informer handlers call it."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._pods: dict[str, _Pod] = {}
        self._pod_of: dict[str, str] = {}  # request key -> Pod UID
        self._released: dict[str, None] = {}  # Pod UIDs without a request, oldest first

    def waiting(self, pod_uid: str, namespace: str, request: str, since: float) -> None:
        with self._lock:
            pod = self._pods.get(pod_uid)
            if pod is None:
                pod = self._pods[pod_uid] = _Pod(namespace, since)
            pod.since = min(pod.since, since)
            pod.requests.add(request)
            pod.released_at = None
            self._released.pop(pod_uid, None)
            self._pod_of[request] = pod_uid

    def resolved(self, request: str) -> None:
        with self._lock:
            found = self._detach(request)
            if found is not None and not found[1].requests:
                del self._pods[found[0]]

    def released(self, request: str) -> None:
        with self._lock:
            now = self._clock()
            found = self._detach(request)
            if found is not None and not found[1].requests:
                found[1].released_at = now
                self._released.pop(found[0], None)
                self._released[found[0]] = None
            self._expire(now)

    def pod_deleted(self, pod_uid: str) -> None:
        with self._lock:
            pod = self._pods.pop(pod_uid, None)
            self._released.pop(pod_uid, None)
            for request in pod.requests if pod is not None else ():
                self._pod_of.pop(request, None)

    def _detach(self, request: str) -> tuple[str, _Pod] | None:
        """Drop `request` from its Pod; (uid, Pod) or None if it did not wait."""
        pod_uid = self._pod_of.pop(request, None)
        pod = self._pods.get(pod_uid) if pod_uid is not None else None
        if pod_uid is None or pod is None:
            return None
        pod.requests.discard(request)
        return pod_uid, pod

    def _expire(self, now: float) -> None:
        """Forget the released Pods whose grace has run out (caller holds the lock)."""
        while self._released:
            uid = next(iter(self._released))
            released_at = self._pods[uid].released_at
            if released_at is not None and now - released_at <= RELEASE_GRACE:
                return
            del self._released[uid], self._pods[uid]

    def oldest_by_namespace(self) -> dict[str, float]:
        """{namespace: seconds its longest-waiting Pod has waited}; expires released
        Pods whose grace has run out."""
        now = self._clock()
        out: dict[str, float] = {}
        with self._lock:
            self._expire(now)
            for pod in self._pods.values():
                age = max(0.0, now - pod.since)
                out[pod.namespace] = max(out.get(pod.namespace, 0.0), age)
        return out

    def size(self) -> int:
        """Pods remembered (tests and leak checks)."""
        with self._lock:
            return len(self._pods)
