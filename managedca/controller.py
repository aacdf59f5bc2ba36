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
  source's own re-read against a stalled watch), not every few seconds.
- Every read is a quorum GET (no cache): a decision is taken on the newest state, and
  every write carries the resourceVersion read (`409 Conflict`, or `404` for a Secret
  deleted between the read and the write → decide again). The
  bootstrap is a create: of two replicas racing, one gets `409 AlreadyExists` and adopts
  the other's CA on its next step.
- A bootstrap with ClusterTrustBundles for the signer already published (a deleted
  Secret, or a move from file mode) keeps their anchors as previous roots until
  swap time + the longest leaf + margin: leaves they signed stay trusted.
- After each write the new Secret is handed to `on_written` (the process's material
  source), so this replica does not wait for its own watch.
- An Event on the Secret for each step (reason `ManagedCA<Step>`), a log line, metrics.
  Notes name fingerprints and times, never a key.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge, Histogram

from kube.client import ApiError, Client, is_already_exists, is_conflict, is_not_found, path_segment
from kube.controller import Loop, Requeue
from kube.events import ObjectRef
from kube.times import format_time
from kube.workqueue import RateLimitingQueue
from managedca import decide as d
from managedca.codec import Stored, ca_info, decode, encode, split_pem
from managedca.material import anchors_of
from managedca.report import list_reports, parse_report

log = logging.getLogger(__name__)

KEY = "managed-ca"
QUEUE_NAME = "managed_ca"
REPORT_GC_AFTER = timedelta(hours=1)
POLL_WHILE_WAITING = 1.0

MakeCa = Callable[[datetime], tuple[bytes, bytes]]
"""`make_ca(now) -> (key PEM, certificate PEM)`: a new self-signed root."""


class Recorder(Protocol):
    """What the controller needs of `kube.events.EventRecorder`."""

    def normal(
        self, regarding: ObjectRef, reason: str, note: str, action: str, related: Any = None
    ) -> None: ...


class ManagedCAMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        prefix = "service_serving_ca_controller_managed_ca"
        self.phase = Gauge(
            f"{prefix}_phase",
            "1 for the managed CA's current phase (on the leader).",
            ["phase"],
            registry=registry,
        )
        for phase in d.PHASES:
            self.phase.labels(phase)
        self.expiry = Gauge(
            f"{prefix}_expiry_timestamp_seconds",
            "notAfter of the managed CAs, by role (current, next).",
            ["role"],
            registry=registry,
        )
        self.phase_since = Gauge(
            f"{prefix}_phase_since_timestamp_seconds",
            "When the managed CA entered its current phase.",
            registry=registry,
        )
        self.rotation_due = Gauge(
            f"{prefix}_rotation_due_timestamp_seconds",
            "When the current CA's rotation is due (stage at that point of its life).",
            registry=registry,
        )
        self.step = Histogram(
            f"{prefix}_step_duration_seconds",
            "Time a rotation step took: swap (stage → swap), retire (swap → retire).",
            ["step"],
            buckets=(1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 60 * 86400),
            registry=registry,
        )

    def show(self, state: d.State | None, config: d.Config) -> None:
        for phase in d.PHASES:
            self.phase.labels(phase).set(1 if state is not None and state.phase == phase else 0)
        if state is None:
            return
        self.expiry.labels("current").set(state.current.not_after.timestamp())
        if state.next is not None:
            self.expiry.labels("next").set(state.next.not_after.timestamp())
        else:
            with contextlib.suppress(KeyError):
                self.expiry.remove("next")
        since = state.staged_at if state.next is not None else state.swapped_at
        since = since or state.confirmed_at or state.current.not_before
        self.phase_since.set(since.timestamp())
        self.rotation_due.set(d.rotation_due(state.current, config).timestamp())


@dataclass(frozen=True)
class Observed:
    stored: Stored | None
    secret: Mapping[str, Any] | None
    observations: d.Observations
    published_pems: tuple[str, ...]


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
        recorder: Recorder | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        resync_period: float = 60.0,
        on_written: Callable[[Mapping[str, Any]], object] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.secret_name = secret_name
        self.signer_name = signer_name
        self.config = config
        self.make_ca = make_ca
        self.recorder = recorder
        self.clock = clock
        self.resync_period = resync_period
        self.on_written = on_written
        self.secrets_path = f"/api/v1/namespaces/{path_segment(namespace)}/secrets"
        self.secret_path = f"{self.secrets_path}/{path_segment(secret_name)}"
        self.ctb_path = f"/apis/certificates.k8s.io/{ctb_version}/clustertrustbundles"
        self.metrics = ManagedCAMetrics(registry)
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.loop = Loop(
            self.name,
            self.sync,
            self.queue,
            registry=registry,
            resync_period=resync_period,
            resync_keys=lambda: (KEY,),
        )
        self.last_action: d.Action | None = None

    # lifecycle --------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return True  # no cache: every step reads the API

    def run(self, stop: threading.Event) -> None:
        self.queue.add(KEY)
        self.loop.run(stop)

    def trigger(self, *_: object) -> None:
        self.queue.add(KEY)

    # one step -----------------------------------------------------------------------------

    def observe(self, *, collect: bool = True) -> Observed:
        """Read the Secret, the published bundles and the reports (quorum reads). With
        `collect`, delete reports expired for over `REPORT_GC_AFTER`."""
        try:
            secret: Mapping[str, Any] | None = self.client.get(self.secret_path)
        except ApiError as err:
            if not is_not_found(err):
                raise
            secret = None
        stored = decode(secret) if secret is not None else None
        listed = self.client.get(
            self.ctb_path, {"fieldSelector": f"spec.signerName={self.signer_name}"}
        )
        pems = tuple(
            str((i.get("spec") or {}).get("trustBundle", "")) for i in listed.get("items") or []
        )
        published: frozenset[str] = frozenset().union(*(anchors_of(p) for p in pems))
        now = self.clock()
        reports = []
        for lease in list_reports(self.client, self.namespace, self.secret_name):
            report = parse_report(lease)
            if report is None:
                continue
            if now > report.renewed_at + report.duration + REPORT_GC_AFTER:
                if collect:
                    self._collect(lease)
                continue
            reports.append(report)
        return Observed(stored, secret, d.Observations(published, tuple(reports)), pems)

    def sync_once(self) -> d.Action:
        """Read, decide, act once; returns the action taken (or the Wait)."""
        seen = self.observe()
        now = self.clock()
        state = seen.stored.state if seen.stored is not None else None
        action = d.decide(state, seen.observations, now, self.config)
        self.last_action = action
        if isinstance(action, d.Wait):
            self.metrics.show(state, self.config)
            return action
        if isinstance(action, d.Bootstrap):
            self._bootstrap(seen, now)
        else:
            assert seen.stored is not None and seen.secret is not None
            self._step(seen.stored, seen.secret, action, now)
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
            raise
        if isinstance(action, d.Wait):
            if action.until is None:
                # Waiting for the publisher or a replica: look again soon (three small
                # reads, on the leader, only while a rotation or bootstrap is under way).
                return Requeue(after=POLL_WHILE_WAITING)
            wait = (action.until - self.clock()).total_seconds()
            return Requeue(after=min(max(wait, 0.05), self.resync_period))
        return Requeue(after=0.0)

    # acting -------------------------------------------------------------------------------

    def _bootstrap(self, seen: Observed, now: datetime) -> None:
        key, cert = self.make_ca(now)
        info = ca_info(cert)
        certs = {info.fingerprint: cert}
        previous = []
        for pem in sorted(
            {p for bundle in seen.published_pems for p in split_pem(bundle.encode())}
        ):
            old = ca_info(pem)
            if old.fingerprint in certs or old.not_after <= now:
                continue
            certs[old.fingerprint] = pem
            # No retire time yet: like a swapped-out root, it is scheduled once the
            # Secret is read back (ScheduleRetire), so a create that lands late (a paused
            # bootstrap) cannot shorten how long the roots already trusted stay.
            previous.append(d.Previous(old, now, None))
        state = d.State(current=info, previous=tuple(previous))
        body = encode(self.namespace, self.secret_name, state, certs, key, None)
        try:
            created = self.client.create(self.secrets_path, body)
        except ApiError as err:
            if is_already_exists(err):
                log.info("managed CA: another replica created the CA first; adopting it")
            raise
        self._written(
            created,
            "ManagedCACreated",
            f"created the managed CA {info.fingerprint} (expires {format_time(info.not_after)})"
            + (
                f"; kept {len(previous)} root(s) already published until the longest leaf "
                "lifetime + the margin after this is read back"
                if previous
                else ""
            ),
        )

    def _step(
        self, stored: Stored, secret: Mapping[str, Any], action: d.Action, now: datetime
    ) -> None:
        state = stored.state
        certs = dict(stored.certs)
        current_key, next_key = stored.current_key, stored.next_key
        if isinstance(action, d.Confirm):
            new = d.confirmed(state, action.at)
            reason, note = (
                "ManagedCAConfirmed",
                f"the ClusterTrustBundle holds CA {state.current.fingerprint}; signing with it",
            )
        elif isinstance(action, d.Stage):
            next_key, cert = self.make_ca(now)
            info = ca_info(cert)
            certs[info.fingerprint] = cert
            new = d.staged(state, info, now)
            why = "on request (ca rotate)" if action.requested else "at the rotation point"
            reason, note = (
                "ManagedCAStaged",
                f"staged the next CA {info.fingerprint} (expires {format_time(info.not_after)}) "
                f"{why}; publishing old + new",
            )
        elif isinstance(action, d.MarkPublished):
            new = d.marked_published(state, action.at, action.swap_not_before)
            until = action.swap_not_before
            reason, note = (
                "ManagedCAPublished",
                f"the ClusterTrustBundle holds both CAs; swap not before {format_time(until)}",
            )
        elif isinstance(action, d.Swap):
            assert state.next is not None and next_key is not None
            new = d.swapped(state, action.at)
            current_key, next_key = next_key, None
            reason, note = (
                "ManagedCASwapped",
                f"signing with CA {state.next.fingerprint}; the previous root "
                f"{state.current.fingerprint} stays published for the longest leaf lifetime "
                "+ the margin after this swap is read back",
            )
        elif isinstance(action, d.ScheduleRetire):
            new = d.retire_scheduled(state, action.retire_at)
            reason, note = (
                "ManagedCARetireScheduled",
                f"the swap is read back; the previous root(s) leave the bundle at "
                f"{format_time(action.retire_at)}",
            )
        elif isinstance(action, d.Retire):
            new = d.retired(state, action.fingerprints)
            reason, note = (
                "ManagedCARetired",
                f"removed from the bundle: {', '.join(sorted(action.fingerprints))}",
            )
        else:
            raise TypeError(f"unexpected action {action!r}")
        body = encode(
            self.namespace,
            self.secret_name,
            new,
            certs,
            current_key,
            next_key,
            stored.resource_version,
            existing=secret.get("metadata") or {},
        )
        written = self.client.replace(self.secret_path, body)
        self._observe_durations(state, action, now)
        self._written(written, reason, note)

    def _observe_durations(self, state: d.State, action: d.Action, now: datetime) -> None:
        start = None
        step = ""
        if isinstance(action, d.Swap):
            start, step = state.staged_at, "swap"
        elif isinstance(action, d.Retire):
            start, step = state.swapped_at, "retire"
        if start is not None:
            self.metrics.step.labels(step).observe(max(0.0, (now - start).total_seconds()))

    def _written(self, secret: Mapping[str, Any], reason: str, note: str) -> None:
        stored = decode(secret)
        self.metrics.show(stored.state, self.config)
        meta = secret.get("metadata") or {}
        log.info(
            "managed CA: " + note,
            extra={
                "reason": reason,
                "phase": stored.state.phase,
                "secret": f"{self.namespace}/{self.secret_name}",
            },
        )
        if self.recorder is not None:
            ref = ObjectRef("Secret", self.namespace, self.secret_name, str(meta.get("uid", "")))
            self.recorder.normal(ref, reason, note, "Rotate")
        if self.on_written is not None:
            self.on_written(secret)

    def _collect(self, lease: Mapping[str, Any]) -> None:
        name = (lease.get("metadata") or {}).get("name", "")
        try:
            self.client.delete(
                f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(self.namespace)}/leases/{path_segment(name)}"
            )
        except ApiError as err:
            if not is_not_found(err):
                log.warning(
                    "managed CA: could not delete a stale report",
                    extra={"lease": name, "err": str(err)},
                )
