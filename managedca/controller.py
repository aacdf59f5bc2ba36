"""The managed-CA controller: reads the CA Secret, the published ClusterTrustBundles and
the replicas' reports, asks `managedca.decide` for one action, and performs it (it acts,
it does not decide). Runs only on the leader.

- One queue key; a sync is one step. After a write the key is requeued at once, so a
  whole bootstrap (create → confirm) or a stage → mark-published takes as long as the
  API and the publisher take, not a resync period; a `Wait` with a time is requeued for
  then (at most `resync_period`, 60 s, later); a `Wait` for the publisher or a replica
  (the bundle and the reports change without telling us) every second. Any change of
  the Secret (`ca rotate`, a delete) triggers a step through the material source's
  watch, so a Stable leader reads the API once a minute (the same bound as the
  source's own re-read against a stalled watch), not every few seconds; a dead replica's
  report is looked at again when its duration has passed, so it is collected then.
- Every read is a quorum GET (no cache): a decision is taken on the newest state, and
  every write carries the resourceVersion read (`409 Conflict`, or `404` for a Secret
  deleted between the read and the write → decide again). The
  bootstrap is a create: of two replicas racing, one gets `409 AlreadyExists` and adopts
  the other's CA on its next step.
- A bootstrap with ClusterTrustBundles for the signer already published (a deleted
  Secret, or a move from file mode) keeps their anchors as previous roots until
  swap time + the longest leaf + margin: leaves they signed stay trusted. On a move from
  file mode it adopts the file-mode CA as its confirmed current CA when it can
  (`managedca.adopt`): signing goes on with no gap.
- After each write the new Secret is handed to `on_written` (the process's material
  source), so this replica does not wait for its own watch.
- An Event on the Secret for each step (reason `ManagedCA<Step>`), a log line, metrics.
  Notes name fingerprints and times, never a key.

One step (`sync_once`) reads as: observe (`managedca.observe`) → decide
(`managedca.decide`) → the step, making a key only when the action needs one
(`managedca.step`: the new state, keys, Event text and durations, pure but for the key)
→ encode and write (`managedca.store`) → what operators see (`managedca.narrator`:
metrics, Events, the `status.Decision` for `ca status`). Any exception in a step is
`sync-failing` there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client, is_already_exists, is_conflict, is_not_found
from kube.controller import Loop, Requeue, SyncFailed
from kube.events import ObjectRef, StepRecorder
from kube.workqueue import RateLimitingQueue
from managedca import adopt, step
from managedca import decide as d
from managedca.codec import StoreError
from managedca.metrics import ManagedCAMetrics
from managedca.narrator import Narrator
from managedca.observe import Observed, Observer
from managedca.status import Decision
from managedca.step import MakeCa
from managedca.store import SecretStore

log = logging.getLogger(__name__)

KEY = "managed-ca"
QUEUE_NAME = "managed_ca"
POLL_WHILE_WAITING = 1.0


class ManagedCAController:
    """See the module docstring. `sync_once()` is one step (tests, `ca status`)."""

    name = "managed-ca"

    def __init__(
        self,
        client: Client,
        *,
        namespace: str,
        secret_name: str,
        signer_name: str,
        ctb_version: str,
        config: d.Config,
        make_ca: MakeCa,
        recorder: StepRecorder | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        resync_period: float = 60.0,
        on_written: Callable[[Mapping[str, Any]], object] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        on_decision: Callable[[Mapping[str, Any] | None], object] | None = None,
        injector_report: str | None = None,
        revoked: Callable[[], frozenset[str]] = frozenset,
        file_ca: Callable[[], adopt.FileCa | None] | None = None,
        unlinked_bundle: str | None = None,
        server_clock: Callable[[], datetime | None] | None = None,
    ) -> None:
        self.config = config
        self.file_ca = file_ca  # the file-mode CA a first bootstrap adopts (managedca.adopt)
        self.make_ca = make_ca
        self.clock = clock
        self.resync_period = resync_period
        self.observer = Observer(
            client,
            namespace=namespace,
            secret_name=secret_name,
            signer_name=signer_name,
            ctb_version=ctb_version,
            recorder=recorder,
            clock=clock,
            monotonic=monotonic,
            injector_report=injector_report,
            revoked=revoked,
            unlinked_bundle=unlinked_bundle,
            server_clock=server_clock,
        )
        self.store = SecretStore(client, namespace, secret_name)
        self.metrics = ManagedCAMetrics(registry)
        self.narrator = Narrator(
            self.metrics,
            config,
            ObjectRef("Secret", namespace, secret_name, ""),
            recorder=recorder,
            on_written=on_written,
            on_decision=on_decision,
        )
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.loop = Loop(
            self.name,
            self.sync,
            self.queue,
            registry=registry,
            resync_period=resync_period,
            resync_keys=lambda: (KEY,),
        )

    # lifecycle --------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return True  # no cache: every step reads the API

    def run(self, stop: threading.Event) -> None:
        self.queue.add(KEY)
        self.loop.run(stop)
        self.narrator.stopped()

    def trigger(self, *_: object) -> None:
        self.queue.add(KEY)

    @property
    def decision(self) -> Decision | None:
        """The last decision, as `ca status` shows it."""
        return self.narrator.decision

    def observe(self, *, collect: bool = True) -> Observed:
        return self.observer.observe(collect=collect)

    # one step -----------------------------------------------------------------------------

    def sync_once(self) -> d.Action:
        """Observe, decide, take the step (a key only when needed), write it, and say so;
        returns the action decided (a Wait writes nothing)."""
        seen = self.observer.observe()
        now = self.clock()
        action = d.decide(seen.state, seen.observations, now, self.config)
        make, file_ca = self.make_ca, None
        if isinstance(action, d.Bootstrap):  # a move from file mode adopts its CA
            make, file_ca = adopt.maker(self.file_ca, seen.observations, now, self.config, make)
        taken = step.take(seen.stored, action, seen.published_pems, make, now)
        if file_ca is not None and taken is not None:
            taken = adopt.confirmed(taken, file_ca, now)
        written = self.store.write(taken, seen.secret)
        self.narrator.record(seen, action, taken, written, now)
        return action

    def sync(self, _key: str = KEY) -> Requeue | None:
        try:
            action = self.sync_once()
        except ApiError as err:
            # 404: the Secret was deleted between our read and our conditional update
            # (kube-apiserver answers NotFound, not Conflict); the next step bootstraps.
            if is_conflict(err) or is_already_exists(err) or is_not_found(err):
                log.info("managed CA: the Secret changed under us; deciding again")
                return Requeue(after=0.1)
            self._failed(str(err))
            raise
        except StoreError as err:
            # A Secret edited into something we cannot read: nothing is written over it.
            # Said once per distinct problem (Event, log); looked at again at the next
            # resync (or at once when the Secret changes); the loop counts the error.
            self._failed(str(err), event="ManagedCASecretUnreadable")
            raise SyncFailed(str(err), after=self.resync_period) from None
        except Exception as err:
            # Anything else (a bug, a value no check foresaw): the same visibility — the
            # waiting reason, `ca status`, the SyncFailing alert — and the loop logs the
            # traceback and backs off.
            self._failed(f"{type(err).__name__}: {err}", event="ManagedCASyncFailed")
            raise
        if isinstance(action, d.Wait):
            if action.until is None:
                # Waiting for the publisher or a replica: look again soon (three small
                # reads, on the leader, only while a rotation or bootstrap is under way).
                return Requeue(after=POLL_WHILE_WAITING)
            wait = (action.until - self.clock()).total_seconds()
            collect_in = self.observer.collect_in  # a dead replica's report to collect
            if collect_in is not None:
                wait = min(wait, collect_in)
            return Requeue(after=min(max(wait, 0.05), self.resync_period))
        return Requeue(after=0.0)

    def _failed(self, why: str, *, event: str | None = None) -> None:
        self.narrator.failed(self.observer.last_state, why, self.clock(), event=event)
