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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Gauge, Histogram

from kube.client import ApiError, Client, is_already_exists, is_conflict, is_not_found, path_segment
from kube.controller import Loop, Requeue, SyncFailed
from kube.events import ObjectRef
from kube.times import format_time
from kube.workqueue import RateLimitingQueue
from managedca import decide as d
from managedca import revocations
from managedca.codec import Stored, StoreError, ca_info, decode, encode
from managedca.layout import split_pem
from managedca.material import anchors_of
from managedca.report import (
    Liveness,
    ReportError,
    ReportLease,
    injector_view,
    leases_path,
    list_reports,
    read_report,
)
from trust.bundle import stable_bundle_name

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

    def warning(
        self, regarding: ObjectRef, reason: str, note: str, action: str, related: Any = None
    ) -> None: ...


HELD = frozenset(d.WAIT_REASONS) - {
    "rotation-point",
    "retire-time",
    "propagation-delay",
    "bundle-not-published",
}
"""Waits that last until something is mended (a replica, the injector): each start is a
Warning Event `ManagedCAWaiting`. The calendar, the delay and the publisher's second
are not."""
SYNC_FAILING = "sync-failing"
"""The waiting reason while the leader's steps fail (an API error, an unreadable Secret)."""


class ManagedCAMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.registry = registry
        prefix = "service_serving_ca_controller_managed_ca"
        self.waiting = Gauge(
            f"{prefix}_waiting",
            "1 for what the managed CA waits for now, by reason (docs/managed-ca.md); "
            "sync-failing while its steps fail.",
            ["reason"],
            registry=registry,
        )
        for reason in (*d.WAIT_REASONS, SYNC_FAILING):
            self.waiting.labels(reason)
        self.waiting_since = Gauge(
            f"{prefix}_waiting_since_timestamp_seconds",
            "Since when the managed CA waits for its current reason (0: not waiting).",
            registry=registry,
        )
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

    def wait(self, reason: str | None, since: datetime | None) -> None:
        for known in (*d.WAIT_REASONS, SYNC_FAILING):
            self.waiting.labels(known).set(1 if known == reason else 0)
        self.waiting_since.set(since.timestamp() if reason and since else 0)

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
    secret: Mapping[str, Any] | None = field(repr=False)  # holds the key
    observations: d.Observations
    published_pems: Mapping[str, bytes]  # fingerprint -> PEM of each published root
    stable: Mapping[str, Any] | None = None  # the stable ClusterTrustBundle, as listed


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
        monotonic: Callable[[], float] = time.monotonic,
        on_decision: Callable[[Mapping[str, Any] | None], object] | None = None,
        injector_report: str | None = None,
        revoked: Callable[[], frozenset[str]] = frozenset,
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
        self.stable_name = stable_bundle_name(signer_name)
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
        self.last_state: d.State | None = None  # as last read: metrics survive failures
        self.decision: dict[str, Any] | None = None  # what `ca status` reads
        self.on_decision = on_decision
        self.injector_report = injector_report  # the convergence Lease's name, or None
        self.revoked = revoked  # what this process has seen revoked (its material source)
        self._waiting: tuple[str, datetime] | None = None  # (reason, since)
        self.monotonic = monotonic
        self.liveness = Liveness(monotonic)
        self._published_since: tuple[frozenset[str], float] | None = None
        self._collect_in: float | None = None  # seconds until a dead report can be collected
        self._bad_reports: dict[str, str] = {}  # report Lease -> why it is ignored

    # lifecycle --------------------------------------------------------------------------

    def has_synced(self) -> bool:
        return True  # no cache: every step reads the API

    def run(self, stop: threading.Event) -> None:
        self.queue.add(KEY)
        self.loop.run(stop)
        if self.on_decision is not None:
            self.on_decision(None)  # not leading: the next leader publishes its own

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
        self.last_state = stored.state if stored is not None else None
        listed = self.client.get(
            self.ctb_path, {"fieldSelector": f"spec.signerName={self.signer_name}"}
        )
        items = list(listed.get("items") or [])
        pems = tuple(str((i.get("spec") or {}).get("trustBundle", "")) for i in items)
        stable = next(
            (i for i in items if (i.get("metadata") or {}).get("name") == self.stable_name),
            None,
        )
        ca_pems = self._published_roots(pems)
        published = frozenset(ca_pems)
        now = self.clock()
        reports = []
        leases = self._readable_reports(stored.state if stored is not None else None)
        self.liveness.forget_all_but(p.name for p in leases)
        self._collect_in = None
        for parsed in leases:
            report = self.liveness.report(parsed)
            if collect and self._old(parsed, now):
                # Dead once unchanged for its duration on our clock: collect it then.
                left = parsed.duration.total_seconds() - self.liveness.unchanged_for(parsed)
                if left <= 0:
                    self._collect(parsed.name, parsed.resource_version)
                    continue
                self._collect_in = left if self._collect_in is None else min(left, self._collect_in)
            reports.append(report)
        observations = d.Observations(
            published,
            tuple(reports),
            published_cas=tuple(sorted(ca_info(p) for p in ca_pems.values())),
            published_for=self._published_for(stored.state if stored else None, published),
            injector=self._injector(),
            revoked=self.revoked()
            | revocations.of(stable)
            | (stored.state.revoked if stored else frozenset()),
        )
        return Observed(stored, secret, observations, ca_pems, stable)

    def _readable_reports(self, state: d.State | None) -> list[ReportLease]:
        """The reports that read as reports and say nothing out of bounds (a leaf
        lifetime beyond the current CA's included); each other one is ignored, with a
        Warning Event on its Lease once per distinct problem."""
        out = []
        bad: dict[str, str] = {}
        for lease in list_reports(self.client, self.namespace, self.secret_name):
            try:
                parsed = read_report(lease)
                limit = state.current.lifetime if state is not None else None
                if parsed.max_lifetime is not None and limit and parsed.max_lifetime > limit:
                    raise ReportError(
                        f"max-certificate-lifetime {parsed.max_lifetime} outlives the CA ({limit})"
                    )
            except ReportError as err:
                meta = lease.get("metadata") or {}
                name = str(meta.get("name", "?"))
                bad[name] = str(err)
                if self._bad_reports.get(name) != bad[name]:
                    self._ignored(
                        ObjectRef("Lease", self.namespace, name, str(meta.get("uid", ""))),
                        bad[name],
                    )
                continue
            out.append(parsed)
        self._bad_reports = bad
        return out

    def _ignored(self, lease: ObjectRef, why: str) -> None:
        log.warning("managed CA: ignoring a report", extra={"lease": lease.name, "err": why})
        if self.recorder is not None:
            self.recorder.warning(
                lease,
                "ManagedCAReportIgnored",
                f"not counted by the rotation's gates: {why}"[:1000],
                "Rotate",
            )

    def _remember_revoked(self, seen: Observed) -> None:
        """Every root the state revoked is on the stable bundle's annotation too, where a
        restore of the Secret does not erase it (`managedca.revocations`)."""
        state = seen.stored.state if seen.stored is not None else None
        if state is None or seen.stable is None:
            return  # nothing revoked yet, or the publisher has not created it yet
        missing = state.revoked - revocations.of(seen.stable)
        if missing:
            revocations.remember(self.client, self.ctb_path, seen.stable, missing)
            log.info(
                "managed CA: revocation remembered on the stable ClusterTrustBundle",
                extra={"revoked": sorted(missing), "bundle": self.stable_name},
            )

    def _injector(self) -> d.InjectorView | None:
        """The injector's convergence report (None: no such Lease, or not configured)."""
        if self.injector_report is None:
            return None
        try:
            lease = self.client.get(
                f"{leases_path(self.namespace)}/{path_segment(self.injector_report)}"
            )
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        return injector_view(lease, self.liveness)

    @staticmethod
    def _published_roots(pems: tuple[str, ...]) -> dict[str, bytes]:
        """fingerprint -> PEM of every root in the signer's ClusterTrustBundles."""
        roots: dict[str, bytes] = {}
        for bundle in pems:
            if not anchors_of(bundle):
                continue  # unparseable: publishes nothing we can count on
            for pem in split_pem(bundle.encode()):
                roots[ca_info(pem).fingerprint] = pem
        return roots

    def _published_for(self, state: d.State | None, published: frozenset[str]) -> timedelta:
        """How long (this process's monotonic clock) the read-back has held every root
        the state is moving to (current + next; an unconfirmed current)."""
        if state is None:
            self._published_since = None
            return timedelta(0)
        needed = frozenset(a.fingerprint for a in state.anchors()) - {
            p.ca.fingerprint for p in state.previous
        }
        mono = self.monotonic()
        if not needed <= published:
            self._published_since = None
            return timedelta(0)
        if self._published_since is None or self._published_since[0] != needed:
            self._published_since = (needed, mono)
        return timedelta(seconds=mono - self._published_since[1])

    def sync_once(self) -> d.Action:
        """Read, decide, act once; returns the action taken (or the Wait)."""
        seen = self.observe()
        self._remember_revoked(seen)
        now = self.clock()
        state = seen.stored.state if seen.stored is not None else None
        action = d.decide(state, seen.observations, now, self.config)
        self.last_action = action
        self._decided(state, seen.observations, action, now)
        if isinstance(action, d.Wait):
            self.metrics.show(state, self.config)
            return action
        if isinstance(action, d.Bootstrap):
            self._bootstrap(seen, action)
        elif seen.stored is not None and seen.secret is not None:
            self._step(seen.stored, seen.secret, action, now, seen.published_pems)
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
            if self._collect_in is not None:  # a dead replica's report to collect
                wait = min(wait, self._collect_in)
            return Requeue(after=min(max(wait, 0.05), self.resync_period))
        return Requeue(after=0.0)

    # what operators see -------------------------------------------------------------------

    def _decided(
        self, state: d.State | None, obs: d.Observations, action: d.Action, now: datetime
    ) -> None:
        reason = action.reason if isinstance(action, d.Wait) else None
        if reason is None:
            self._waiting = None
        elif self._waiting is None or self._waiting[0] != reason:
            self._waiting = (reason, now)
            if reason in HELD and self.recorder is not None and isinstance(action, d.Wait):
                # A gate that holds a rotation until something is mended: said once.
                ref = ObjectRef("Secret", self.namespace, self.secret_name, "")
                self.recorder.warning(ref, "ManagedCAWaiting", f"[{reason}] {action.why}", "Rotate")
        since = self._waiting[1] if self._waiting else None
        self.metrics.wait(reason, since)
        decision = decision_record(state, obs, action, now, since, self.config)
        self._publish(decision)

    def _failed(self, why: str, *, event: str | None = None) -> None:
        self.metrics.show(self.last_state, self.config)
        now = self.clock()
        if self._waiting is None or self._waiting[0] != SYNC_FAILING:
            self._waiting = (SYNC_FAILING, now)
            if event and self.recorder is not None:
                ref = ObjectRef("Secret", self.namespace, self.secret_name, "")
                self.recorder.warning(ref, event, why[:1000], "Rotate")
            log.error("managed CA: sync failed", extra={"err": why})
        self.metrics.wait(SYNC_FAILING, self._waiting[1])
        empty = d.Observations(frozenset())
        record = decision_record(self.last_state, empty, None, now, None, self.config)
        record.update(reason=SYNC_FAILING, why=why, since=format_time(self._waiting[1]))
        self._publish(record)

    def _publish(self, decision: dict[str, Any]) -> None:
        changed = _without_at(decision) != _without_at(self.decision)
        self.decision = decision
        if changed and self.on_decision is not None:
            self.on_decision(decision)

    # acting -------------------------------------------------------------------------------

    def _bootstrap(self, seen: Observed, action: d.Bootstrap) -> None:
        key, cert = self.make_ca(action.at)
        info = ca_info(cert)
        state = d.apply(None, action, info)
        assert state is not None
        certs = {info.fingerprint: cert}
        # Adopted roots (no retire time yet: like a swapped-out root, scheduled once the
        # new CA signs everywhere, so a create that lands late cannot shorten how long
        # the roots already trusted stay).
        for prev in state.previous:
            certs[prev.ca.fingerprint] = seen.published_pems[prev.ca.fingerprint]
        body = encode(self.namespace, self.secret_name, state, certs, key, None)
        try:
            created = self.client.create(self.secrets_path, body)
        except ApiError as err:
            if is_already_exists(err):
                log.info("managed CA: another replica created the CA first; adopting it")
            raise
        adopted = len(state.previous)
        self._written(
            created,
            "ManagedCACreated",
            f"created the managed CA {info.fingerprint} (expires {format_time(info.not_after)})"
            + (
                f"; kept {adopted} root(s) already published; it signs only after the "
                "propagation delay, like a swap"
                if adopted
                else ""
            ),
        )

    def _step(
        self,
        stored: Stored,
        secret: Mapping[str, Any],
        action: d.Action,
        now: datetime,
        published: Mapping[str, bytes],
    ) -> None:
        state = stored.state
        certs = dict(stored.certs)
        current_key, next_key = stored.current_key, stored.next_key
        made = None
        if isinstance(action, d.Adopt):
            for ca in action.roots:
                certs[ca.fingerprint] = published[ca.fingerprint]
        if isinstance(action, d.Stage) or (
            isinstance(action, d.Emergency) and action.replaces(state)
        ):
            key, cert = self.make_ca(action.at)
            made = ca_info(cert)
            certs[made.fingerprint] = cert
            if isinstance(action, d.Emergency):
                current_key, next_key = key, None
            else:
                next_key = key
        new = d.apply(state, action, made)
        assert new is not None
        if isinstance(action, d.Swap):
            if next_key is None:
                raise StoreError(
                    f"secret {self.namespace}/{self.secret_name}: key next.crt without "
                    "next.key; the swap is held until it is mended (or `ca rotate --emergency`)"
                )
            current_key, next_key = next_key, None
        reason, note = self._describe(state, new, action)
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

    @staticmethod
    def _describe(state: d.State, new: d.State, action: d.Action) -> tuple[str, str]:
        """The Event's reason and note for a step (fingerprints and times, never a key)."""
        if isinstance(action, d.Confirm):
            return (
                "ManagedCAConfirmed",
                f"the ClusterTrustBundle holds CA {state.current.fingerprint}; signing with it",
            )
        if isinstance(action, d.Stage):
            assert new.next is not None
            why = "on request (ca rotate)" if action.requested else "at the rotation point"
            return (
                "ManagedCAStaged",
                f"staged the next CA {new.next.fingerprint} (expires "
                f"{format_time(new.next.not_after)}) {why}; publishing old + new",
            )
        if isinstance(action, d.Adopt):
            return (
                "ManagedCARootsAdopted",
                f"published roots the Secret lacks (restored from an older backup, or "
                f"edited?) kept as previous roots: {', '.join(c.fingerprint for c in action.roots)}"
                + (
                    "; the current CA is not published: it signs again only after the "
                    "propagation delay, like a swap"
                    if action.unconfirm
                    else ""
                ),
            )
        if isinstance(action, d.Emergency) and not action.replaces(state):
            return (
                "ManagedCARevoked",
                f"revoked {', '.join(sorted(action.revoke))}: no longer published; the "
                f"current CA {state.current.fingerprint} signs on",
            )
        if isinstance(action, d.Emergency):
            return (
                "ManagedCAEmergencyRotation",
                f"revoked {', '.join(sorted(action.revoke))}: no longer signed with nor "
                f"published; signing with the new CA {new.current.fingerprint} as soon as "
                "the ClusterTrustBundle holds it",
            )
        if isinstance(action, d.RecordLifetime):
            return (
                "ManagedCALifetimeRecorded",
                f"leaves of up to {action.lifetime} may be signed with CA "
                f"{state.current.fingerprint}: it stays published that long after it is "
                "swapped out, whatever --max-certificate-lifetime is then",
            )
        if isinstance(action, d.MarkPublished):
            return (
                "ManagedCAPublished",
                f"the ClusterTrustBundle holds the new CA; signing with it not before "
                f"{format_time(action.swap_not_before)}",
            )
        if isinstance(action, d.Swap):
            return (
                "ManagedCASwapped",
                f"signing with CA {new.current.fingerprint}; the previous root "
                f"{state.current.fingerprint} stays published until every replica signs "
                "with the new CA, plus the longest leaf lifetime and the margin",
            )
        if isinstance(action, d.ScheduleRetire):
            return (
                "ManagedCARetireScheduled",
                f"every replica signs with the current CA; the previous root(s) leave the "
                f"bundle at {format_time(action.retire_at)}",
            )
        if isinstance(action, d.Retire):
            return (
                "ManagedCARetired",
                f"removed from the bundle: {', '.join(sorted(action.fingerprints))}",
            )
        raise TypeError(f"unexpected action {action!r}")

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

    @staticmethod
    def _old(lease: ReportLease, now: datetime) -> bool:
        """A report that says it was last renewed over `REPORT_GC_AFTER` ago (the replica's
        clock: a bound, never the judgement of liveness). It is collected (a replica
        killed without a clean stop) once it has also not changed for its duration on our
        clock."""
        return now > lease.renewed_at + lease.duration + REPORT_GC_AFTER

    def _collect(self, name: str, resource_version: str) -> None:
        """Delete a dead replica's report, only as it was judged (a precondition on its
        resourceVersion: a replica that renewed it meanwhile keeps it)."""
        path = f"{leases_path(self.namespace)}/{path_segment(name)}"
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": resource_version},
        }
        try:
            self.client.delete(path, body)
        except ApiError as err:
            if not (is_not_found(err) or is_conflict(err)):
                log.warning(
                    "managed CA: could not delete a stale report",
                    extra={"lease": name, "err": str(err)},
                )


def _without_at(decision: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (decision or {}).items() if k != "at"}


def decision_record(
    state: d.State | None,
    obs: d.Observations,
    action: d.Action | None,
    now: datetime,
    since: datetime | None,
    config: d.Config,
) -> dict[str, Any]:
    """The leader's decision as `ca status` shows it (published on the leader's report
    Lease): phase, the next step or what it waits for and since when, the CAs
    (fingerprints and validity, never a key), the times of the rotation under way only,
    and each replica's report. JSON-ready."""

    def ca(info: d.CaInfo, role: str, **extra: Any) -> dict[str, Any]:
        return {
            "role": role,
            "fingerprint": info.fingerprint,
            "notBefore": format_time(info.not_before),
            "notAfter": format_time(info.not_after),
            "published": info.fingerprint in obs.published,
            **extra,
        }

    out: dict[str, Any] = {"at": format_time(now), "phase": None, "cas": [], "times": {}}
    if state is not None:
        out["phase"] = state.phase
        out["cas"].append(ca(state.current, "current"))
        if state.next is not None:
            out["cas"].append(ca(state.next, "next"))
        for prev in state.previous:
            retire = format_time(prev.retire_at) if prev.retire_at else None
            out["cas"].append(ca(prev.ca, "previous", retireAt=retire))
        times: dict[str, datetime | None] = {}
        if state.confirmed_at is None:
            times = {"publishedAt": state.published_at, "signNotBefore": state.swap_not_before}
        elif state.next is not None:  # only the rotation under way
            times = {
                "stagedAt": state.staged_at,
                "publishedAt": state.published_at,
                "swapNotBefore": state.swap_not_before,
            }
        elif state.previous:
            times = {"swappedAt": state.swapped_at}
        else:
            times = {"rotationDue": d.rotation_due(state.current, config)}
        times["rotateRequestedAt"] = state.rotate_requested_at
        out["times"] = {k: format_time(v) for k, v in times.items() if v is not None}
    nxt = state.next if state is not None else None
    out["replicas"] = [
        {
            "replica": r.replica,
            "live": r.live,
            "loadedNext": nxt is not None and nxt.fingerprint in r.anchors,
            "signingCA": r.signing,
            "readyToSign": r.ready,
        }
        for r in obs.reports
    ]
    if isinstance(action, d.Wait):
        out.update(
            step="Wait",
            reason=action.reason,
            why=action.why,
            until=format_time(action.until) if action.until else None,
            since=format_time(since) if since else None,
        )
    elif action is not None:
        out.update(step=type(action).__name__, reason=None, why=None, until=None, since=None)
    return out
