"""A presence Lease: "a process of this kind is alive", readable without access to
anything else.

What it decides:

* **One Lease for all the processes of a kind**, at a name known in advance (so RBAC can
  limit `get`/`update` to it by `resourceNames`, and a reader needs `get` on that one
  object only). Every process renews it every `period`: `holderIdentity` is the last
  renewer, `renewTime` when, `leaseDurationSeconds` how long a renewal counts. With or
  without leader election, while any process lives the Lease is fresh; after the last one
  dies it goes stale one duration later. A clean stop writes nothing: another process may
  still be alive, and the last one's presence ends with its duration.
* **Writes are plain**: read, then `update` with the read `resourceVersion` (create when
  absent). A 409 means another process renewed it between our read and our write — which
  is all a renewal is for — so it is not retried. Failures are logged and retried next
  period; presence never stops the process.
* **Annotations** carry what a reader shows beside "alive" (the writer chooses them: a
  name it serves, its version, whether it elects a leader); they are rewritten on every
  renewal, so the last renewer's are shown. `renewed_annotations()`, when given, is
  asked afresh at each renewal (what changed since the last one).
* **Judging** (`judge`, with `kube.leases.renewal`) compares `renewTime +
  leaseDurationSeconds` with the reader's clock: the duration (`DEFAULT_DURATION`, four
  periods) leaves room for a missed renewal and for clocks some seconds apart. A reader
  never reports a renewing process absent unless its clock runs a duration ahead of the
  writer's.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kube.client import ApiError, Client, is_already_exists, is_conflict, is_not_found
from kube.leases import API_VERSION, LeaseRef, Renewal, renewal
from kube.times import micro_time
from kube.types import JSON

log = logging.getLogger(__name__)

DEFAULT_PERIOD = 10.0
DEFAULT_DURATION = 40


class PresenceWriter:
    """Renews the presence Lease `namespace/name` as `identity` every `period`."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str,
        identity: str,
        *,
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        renewed_annotations: Callable[[], Mapping[str, str]] | None = None,
        period: float = DEFAULT_PERIOD,
        duration: int = DEFAULT_DURATION,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.annotations = dict(annotations or {})
        self.labels = dict(labels or {})
        self.renewed_annotations = renewed_annotations
        self.period = period
        self.duration = duration
        self._clock = clock

    def renew(self) -> bool:
        """One renewal; True when this process's write (or another's, racing it) stands."""
        lease = LeaseRef(self.namespace, self.name)
        try:
            try:
                found = self.client.get(lease.path)
            except ApiError as err:
                if not is_not_found(err):
                    raise
                self.client.create(lease.collection, self._object(None))
                return True
            self.client.replace(lease.path, self._object(found))
            return True
        except ApiError as err:
            if is_conflict(err) or is_already_exists(err):
                return True  # another process renewed it meanwhile
            log.warning(
                "presence Lease not renewed",
                extra={"lease": f"{self.namespace}/{self.name}", "error": str(err)},
            )
            return False

    def _object(self, lease: JSON | None) -> JSON:
        meta: dict[str, Any] = dict((lease or {}).get("metadata") or {})
        meta["name"] = self.name
        meta["namespace"] = self.namespace
        renewed = self.renewed_annotations() if self.renewed_annotations else {}
        meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations, **renewed}
        meta["labels"] = {**(meta.get("labels") or {}), **self.labels}
        spec = dict((lease or {}).get("spec") or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.duration,
            renewTime=micro_time(self._clock()),
        )
        return {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": meta,
            "spec": spec,
        }

    def run(self, stop: threading.Event) -> None:
        """Renew now and every `period` until `stop` is set."""
        while not stop.is_set():
            try:
                self.renew()
            except Exception:  # never let presence end the thread (a liveness check)
                log.exception("presence Lease renewal failed")
            stop.wait(self.period)


class PresenceVerdict(enum.Enum):
    """What a reader makes of a presence Lease (`judge`)."""

    ALIVE = "alive"
    EXPIRED = "expired"
    MISSING = "missing"


@dataclass(frozen=True)
class Presence:
    """A presence Lease as judged by a reader."""

    namespace: str
    name: str
    state: PresenceVerdict
    renewal: Renewal = field(default_factory=Renewal)  # by the reader's clock
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.state is PresenceVerdict.ALIVE


def judge(namespace: str, name: str, lease: JSON | None, now: datetime) -> Presence:
    """Classify a presence Lease (None: it does not exist). Pure."""
    if lease is None:
        return Presence(namespace, name, PresenceVerdict.MISSING)
    renewed = renewal(lease, now)
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    return Presence(
        namespace,
        name,
        PresenceVerdict.ALIVE if renewed.fresh else PresenceVerdict.EXPIRED,
        renewed,
        {str(k): str(v) for k, v in annotations.items()},
    )


def read(client: Client, namespace: str, name: str, now: datetime | None = None) -> Presence:
    """GET and judge the presence Lease; a 404 is `MISSING`, other errors propagate."""
    try:
        lease = client.get(LeaseRef(namespace, name).path)
    except ApiError as err:
        if not is_not_found(err):
            raise
        lease = None
    return judge(namespace, name, lease, now or datetime.now(UTC))
