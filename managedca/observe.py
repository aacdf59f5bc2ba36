"""What one step of the managed CA reads (quorum reads, no cache): the CA Secret, the
signer's published ClusterTrustBundles, the replicas' reports and the injector's
convergence report, into `decide.Observations`.

It also keeps two things the reading itself owns:

- **Reports**: each is bounded (`managedca.report.read_report`); one that says something
  out of bounds is ignored, with a Warning Event `ManagedCAReportIgnored` on its Lease once
  per distinct problem. Liveness is judged on this process's monotonic clock
  (`report.Liveness`); a dead replica's report is collected (deleted, with the
  resourceVersion judged as a precondition) once it says it was renewed over
  `REPORT_GC_AFTER` ago and has not changed for its duration on our clock.
- **Revocations**: the roots revoked are the Secret's, this process's (its material
  source) and those the stable ClusterTrustBundle remembers (`managedca.revocations`);
  when the Secret revokes one the bundle does not list yet, it is written there now.
- **The propagation delay on our clock**: how long this process has seen the read-back
  hold every root the state is moving to (in the signer's bundles and, when the publisher
  publishes it, the unlinked bundle too), and the injector's report say the CA it is
  moving to has converged; how long it has led (a retire needs it), and the API server's
  clock (the `Date` of its answers: a retire needs it too).
- **What it has seen**: the injector's report Lease, once seen, is remembered (here and,
  through `RecordInjectorSeen`, on the Secret), so a deleted one is a wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kube.client import ApiError, Client, is_conflict, is_not_found, path_segment
from kube.events import ObjectRef, Recorder
from kube.leases import LeaseRef
from managedca import decide as d
from managedca import revocations
from managedca.codec import Stored, ca_info, decode
from managedca.layout import split_pem
from managedca.report import (
    DEFAULT_DURATION,
    Liveness,
    ReplicaReport,
    ReplicaReportError,
    injector_view,
    list_reports,
    read_report,
)
from trust.bundle import stable_bundle_name
from trust.clustertrustbundles import anchors_of, bundles_path, pem_of, signer_bundles
from trust.convergence import report_lease

log = logging.getLogger(__name__)

REPORT_GC_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class Observed:
    stored: Stored | None
    secret: Mapping[str, Any] | None = field(repr=False)  # holds the key
    observations: d.Observations
    published_pems: Mapping[str, bytes]  # fingerprint -> PEM of each published root
    stable: Mapping[str, Any] | None = None  # the stable ClusterTrustBundle, as listed

    @property
    def state(self) -> d.State | None:
        return self.stored.state if self.stored is not None else None


class Observer:
    """Reads what a step decides on (see the module docstring). One per leader: it keeps
    the report liveness and the delay measured on this process's clock."""

    def __init__(
        self,
        client: Client,
        *,
        namespace: str,
        secret_name: str,
        signer_name: str,
        ctb_version: str,
        recorder: Recorder | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        injector_report: str | None = None,
        revoked: Callable[[], frozenset[str]] = frozenset,
        unlinked_bundle: str | None = None,
        server_clock: Callable[[], datetime | None] | None = None,
    ) -> None:
        self.client = client
        # The unlinked ClusterTrustBundle's name when it is published (the delay then runs
        # only while it holds the roots too: Pods may project it by name), else None.
        self.unlinked_bundle = unlinked_bundle
        # The API server's clock: the client's (`kube.client.Client.server_now`) unless
        # given; a stand-in client without one leaves it untracked.
        self.server_clock = server_clock or getattr(client, "server_now", None)
        self.namespace = namespace
        self.secret_name = secret_name
        self.signer_name = signer_name
        self.recorder = recorder
        self.clock = clock
        self.monotonic = monotonic
        self.secrets_path = f"/api/v1/namespaces/{path_segment(namespace)}/secrets"
        self.secret_path = f"{self.secrets_path}/{path_segment(secret_name)}"
        self.ctb_version = ctb_version
        self.ctb_path = bundles_path(ctb_version)
        self.stable_name = stable_bundle_name(signer_name)
        self.injector_report = injector_report  # the convergence Lease's name, or None
        self.revoked = revoked  # what this process has seen revoked (its material source)
        self.liveness = Liveness(monotonic)
        self.last_state: d.State | None = None  # as last read: metrics survive failures
        self.collect_in: float | None = None  # seconds until a dead report can be collected
        self._published_since: tuple[frozenset[str], float] | None = None
        self._converged_since: tuple[str, float] | None = None
        self._not_held_current: str | None = None  # a restored confirmed current CA
        self._led_since: tuple[datetime, float] | None = None  # (wall, monotonic) at start
        self.injector_seen = False  # this leader has seen the injector's report Lease
        self._bad_reports: dict[str, str] = {}  # report Lease -> why it is ignored
        # report Lease -> (its last live view, its renewTime, its duration in seconds)
        self._last_live: dict[str, tuple[d.ReplicaView, str, float]] = {}
        self._injector_ignored: str | None = None  # why the injector's report is, if it is

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
        before, self.last_state = self.last_state, stored.state if stored is not None else None
        items = signer_bundles(self.client, self.ctb_version, self.signer_name)
        pems = tuple(pem_of(item) for item in items)
        stable = next(
            (i for i in items if (i.get("metadata") or {}).get("name") == self.stable_name),
            None,
        )
        ca_pems = self._published_roots(pems)
        published = frozenset(ca_pems)
        now = self.clock()
        reports: list[d.ReplicaView] = []
        leases, unreadable = self._readable_reports(stored.state if stored is not None else None)
        vanished = self._vanished({p.name for p in leases} | {v.replica for v in unreadable})
        self.liveness.forget_all_but(
            [*(p.name for p in leases), *(v.replica for v in unreadable), *vanished]
        )
        reports += unreadable
        reports += [view for view, _, _ in vanished.values()]
        self.collect_in = None
        for parsed in leases:
            report = self.liveness.report(parsed)
            if collect and self._old(parsed, now):
                # Dead once unchanged for its duration on our clock: collect it then.
                left = parsed.duration.total_seconds() - self.liveness.unchanged_for(parsed)
                if left <= 0:
                    self._collect(parsed.name, parsed.resource_version)
                    continue
                self.collect_in = left if self.collect_in is None else min(left, self.collect_in)
            reports.append(report)
            if report.live:
                self._last_live[parsed.name] = (
                    report,
                    parsed.renew_time,
                    parsed.duration.total_seconds(),
                )
            else:
                self._last_live.pop(parsed.name, None)
        if self._led_since is None:
            self._led_since = (now, self.monotonic())
        state = stored.state if stored is not None else None
        injector = self._injector()
        self.injector_seen |= injector is not None or revocations.injector_seen(stable)
        observations = d.Observations(
            published,
            tuple(reports),
            published_cas=tuple(sorted(ca_info(p) for p in ca_pems.values())),
            published_for=self._published_for(state, published & self._unlinked(published)),
            injector=injector,
            injector_seen=self.injector_seen,
            converged_for=self._converged_for(state, injector),
            led_for=timedelta(seconds=self.monotonic() - self._led_since[1]),
            led_since=self._led_since[0],
            server_now=self._server_now(),
            current_not_held_before=self._current_not_held_before(before, state, now),
            revoked=self.revoked()
            | revocations.of(stable)
            | (stored.state.revoked if stored else frozenset()),
        )
        seen = Observed(stored, secret, observations, ca_pems, stable)
        self._remember_revoked(seen)
        return seen

    def _server_now(self) -> datetime | None:
        """The API server's clock after this step's reads; `SERVER_CLOCK_UNKNOWN` when
        none of its answers carried a Date (a retire then waits)."""
        if self.server_clock is None:
            return None
        return self.server_clock() or d.SERVER_CLOCK_UNKNOWN

    def _vanished(self, present: set[str]) -> dict[str, tuple[d.ReplicaView, str, float]]:
        """Reports this leader saw live that are gone (deleted by someone, or a clean
        stop): counted as last seen until their duration has passed on our clock, so a
        deleted report never hides a lagging replica from the gates (a running replica
        writes it again within its period)."""
        kept = {}
        for name, (view, renew, duration) in list(self._last_live.items()):
            if name in present:
                continue
            if self.liveness.unchanged(name, renew) < duration:
                kept[name] = (view, renew, duration)
            else:
                del self._last_live[name]
        return kept

    def _readable_reports(
        self, state: d.State | None
    ) -> tuple[list[ReplicaReport], list[d.ReplicaView]]:
        """The reports that read as reports and say nothing out of bounds (a leaf
        lifetime beyond the current CA's included); each other one is ignored, with a
        Warning Event on its Lease once per distinct problem — and, while its renewTime
        keeps changing (a replica is writing it), it counts as a live replica that has
        loaded nothing: a report nobody can read holds the gates, it does not hide a
        replica from them."""
        out = []
        unreadable: list[d.ReplicaView] = []
        bad: dict[str, str] = {}
        for lease in list_reports(self.client, self.namespace, self.secret_name):
            try:
                parsed = read_report(lease)
                limit = state.current.lifetime if state is not None else None
                if parsed.max_lifetime is not None and limit and parsed.max_lifetime > limit:
                    raise ReplicaReportError(
                        f"max-certificate-lifetime {parsed.max_lifetime} outlives the CA ({limit})"
                    )
            except ReplicaReportError as err:
                meta = lease.get("metadata") or {}
                name = str(meta.get("name", "?"))
                bad[name] = str(err)
                if self._bad_reports.get(name) != bad[name]:
                    self._ignored(
                        ObjectRef("Lease", self.namespace, name, str(meta.get("uid", ""))),
                        bad[name],
                    )
                renew = str((lease.get("spec") or {}).get("renewTime"))
                live = self.liveness.unchanged(name, renew) < DEFAULT_DURATION
                unreadable.append(d.ReplicaView(f"{name} (unreadable)", frozenset(), live=live))
                continue
            out.append(parsed)
        self._bad_reports = bad
        return out, unreadable

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
        restore of the Secret does not erase it (`managedca.revocations`); so is that a
        leader saw the injector's report (a Secret deleted or restored from before it
        was seen, with the report Lease deleted too, still waits for the injector)."""
        state = seen.stored.state if seen.stored is not None else None
        if seen.stable is None:
            return  # the publisher has not created it yet
        missing = revocations.wanted(state) - revocations.of(seen.stable) if state else set()
        seen_injector = self.injector_seen and not revocations.injector_seen(seen.stable)
        if missing or seen_injector:
            revocations.remember(
                self.client, self.ctb_path, seen.stable, missing, seen_injector=seen_injector
            )
            log.info(
                "managed CA: remembered on the stable ClusterTrustBundle",
                extra={
                    "revoked": sorted(missing),
                    "injectorSeen": seen_injector,
                    "bundle": self.stable_name,
                },
            )

    def _injector(self) -> d.InjectorView | None:
        """The injector's convergence report (None: no such Lease, or not configured)."""
        if self.injector_report is None:
            return None
        try:
            lease = self.client.get(report_lease(self.namespace, self.injector_report).path)
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        view = injector_view(lease, self.liveness)
        if view.ignored is not None and view.ignored != self._injector_ignored:
            meta = lease.get("metadata") or {}
            name, uid = str(meta.get("name", "")), str(meta.get("uid", ""))
            self._ignored(ObjectRef("Lease", self.namespace, name, uid), view.ignored)
        self._injector_ignored = view.ignored
        return view

    def _unlinked(self, published: frozenset[str]) -> frozenset[str]:
        """The roots the unlinked bundle holds (`published` when it is not published)."""
        if self.unlinked_bundle is None:
            return published
        try:
            bundle = self.client.get(f"{self.ctb_path}/{path_segment(self.unlinked_bundle)}")
        except ApiError as err:
            if not is_not_found(err):
                raise
            return frozenset()
        return anchors_of(pem_of(bundle))

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

    def _current_not_held_before(
        self, before: d.State | None, state: d.State | None, now: datetime
    ) -> bool:
        """Whether the confirmed current CA of `state` is one the state read `before` did
        not hold (`decide.held_by`): remembered until that CA is unconfirmed or replaced,
        so a failed write does not forget it (the read-back holds it again by then)."""
        if state is None or state.confirmed_at is None:
            self._not_held_current = None
            return False
        if before is not None and not d.held_by(before, state.current, now):
            self._not_held_current = state.current.fingerprint
        return self._not_held_current == state.current.fingerprint

    def _converged_for(self, state: d.State | None, view: d.InjectorView | None) -> timedelta:
        """How long (this process's monotonic clock) the injector's report has said the CA
        the state is moving to (the staged one, or an unconfirmed current one) converged;
        0 while it does not."""
        target = None
        if state is not None:
            if state.next is not None:
                target = state.next.fingerprint
            elif state.confirmed_at is None:
                target = state.current.fingerprint
        if target is None or view is None or target not in view.converged:
            self._converged_since = None
            return timedelta(0)
        mono = self.monotonic()
        if self._converged_since is None or self._converged_since[0] != target:
            self._converged_since = (target, mono)
        return timedelta(seconds=mono - self._converged_since[1])

    @staticmethod
    def _old(lease: ReplicaReport, now: datetime) -> bool:
        """A report that says it was last renewed over `REPORT_GC_AFTER` ago (the replica's
        clock: a bound, never the judgement of liveness). It is collected (a replica
        killed without a clean stop) once it has also not changed for its duration on our
        clock."""
        return now > lease.renewed_at + lease.duration + REPORT_GC_AFTER

    def _collect(self, name: str, resource_version: str) -> None:
        """Delete a dead replica's report, only as it was judged (a precondition on its
        resourceVersion: a replica that renewed it meanwhile keeps it)."""
        path = LeaseRef(self.namespace, name).path
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
