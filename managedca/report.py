"""Each replica's report of the managed CA material it has loaded: a Lease of its own
in the signer's namespace, read by the leader before a swap.

Why a Lease: the leader must read what every running replica holds, and a metric on
another Pod cannot be read without scraping it; a Pod annotation needs `patch` on Pods
and the Pod's name. A Lease is the API's own "I am alive, and here is my state" object:
`renewTime` + `leaseDurationSeconds` tell the leader whether the report is live (a
replica that died stops renewing, and after `duration` its report no longer holds a
swap back), and annotations carry what it has loaded:
`service-serving-signer/loaded-anchors` (the sha256 fingerprints of the trust bundle's
anchors, comma-separated), `service-serving-signer/signing-ca` (the signing CA's) and
`service-serving-signer/ready-to-sign` (the staged next CA's, once this replica has
validated it as a signing set: key matches, valid now and for the lead time, a probe
leaf verifies; empty while it rejects it).

Liveness is judged on the leader's own monotonic clock (`Liveness`, client-go leader
election's method): a report is live while its `renewTime` keeps changing, i.e. for
`leaseDurationSeconds` after the leader last saw it change. The replica's clock is never
compared with the leader's: a replica 30 s behind is not ignored, one ahead cannot make
a dead report look live.

The Lease is named after the CA Secret and a hash of the replica's identity (unique per
process), labelled `service-serving-signer/managed-ca-report=<secret name>`; it is
renewed every `period` and at once after the material changes, and deleted on a clean
stop. The leader deletes a report (a replica killed without a clean stop) once it has
seen it unchanged for its duration and its `renewTime` is over an hour old, with the
resourceVersion it judged as a precondition: a report renewed meanwhile is kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kube.client import ApiError, Client
from kube.leases import LeaseRef, leases_path, write_report
from kube.times import read_time
from managedca.decide import InjectorView, ReplicaView
from managedca.layout import ANNOTATION_PREFIX
from managedca.material import Loaded
from trust import convergence
from trust.bundle import is_fingerprint

log = logging.getLogger(__name__)

REPORT_LABEL = ANNOTATION_PREFIX + "managed-ca-report"
LOADED_ANCHORS = ANNOTATION_PREFIX + "loaded-anchors"
SIGNING_CA = ANNOTATION_PREFIX + "signing-ca"
READY_TO_SIGN = ANNOTATION_PREFIX + "ready-to-sign"
MAX_LIFETIME = ANNOTATION_PREFIX + "max-certificate-lifetime"  # seconds: what it may issue
DECISION = ANNOTATION_PREFIX + "managed-ca-decision"
"""On the leader's report only: its last decision, JSON (`managedca.controller.
decision_record`), so `ca status` needs no access to the CA Secret."""
DEFAULT_PERIOD = 10.0
DEFAULT_DURATION = 30


def report_name(secret_name: str, identity: str) -> str:
    return f"{secret_name}-replica-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class ReplicaReport:
    """One replica's report Lease as read: what it says, and what liveness and collection
    need. The leader judges it into a `managedca.decide.ReplicaView`."""

    name: str
    replica: str
    loaded: Loaded
    renew_time: str  # as written: compared for change, never with our clock
    renewed_at: datetime  # the replica's clock: shown, and bounds collection
    duration: timedelta
    resource_version: str
    decision: Mapping[str, Any] | None = None
    max_lifetime: timedelta | None = None


class ReplicaReportError(ValueError):
    """A report Lease that does not read as one, or says something out of bounds. Any
    writer of Leases in the namespace can write one: it is ignored (the leader says so
    in a Warning Event), never trusted and never a crash."""


MAX_DURATION = timedelta(minutes=5)
"""The longest `leaseDurationSeconds` a report may give (the replicas write 30 s). A
longer one would keep a dead (or forged) report live, holding every rotation."""
MAX_REPORTED_LIFETIME = timedelta(days=100 * 365)
"""A bound on `max-certificate-lifetime` at parse time, so no sum with it overflows; the
leader also ignores a report whose lifetime exceeds its CA's (no leaf outlives its CA)."""
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
"""`renewTime` outside these is not a clock, it is a forgery (or a bug); inside them any
replica clock is accepted: liveness never compares it with the leader's."""
MAX_ANCHORS = 64


def read_report(lease: Mapping[str, Any]) -> ReplicaReport:
    """The report `lease` says, every value bounded (`ReplicaReportError` otherwise)."""
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        renew_time = str(spec["renewTime"])
        renewed = read_time(renew_time)
        seconds = int(spec["leaseDurationSeconds"])
    except (KeyError, ValueError, TypeError, OverflowError) as err:
        raise ReplicaReportError(
            f"no renewTime or leaseDurationSeconds ({type(err).__name__})"
        ) from None
    if not EARLIEST <= renewed < LATEST:
        raise ReplicaReportError(f"renewTime {renew_time} is not a time a clock gives")
    if not 0 < seconds <= MAX_DURATION.total_seconds():
        raise ReplicaReportError(
            f"leaseDurationSeconds {seconds} is outside 1..{int(MAX_DURATION.total_seconds())}"
        )
    anchors = tuple(a for a in str(annotations.get(LOADED_ANCHORS, "")).split(",") if a)
    if len(anchors) > MAX_ANCHORS:
        raise ReplicaReportError(f"{len(anchors)} loaded anchors (at most {MAX_ANCHORS})")
    signing = str(annotations.get(SIGNING_CA) or "") or None
    ready = str(annotations.get(READY_TO_SIGN) or "") or None
    for fp in (*anchors, signing, ready):
        if fp is not None and not is_fingerprint(fp):
            raise ReplicaReportError(f"{fp[:80]!r} is not a sha256 fingerprint")
    name = str(meta.get("name", "?"))
    try:
        decision = json.loads(annotations[DECISION]) if annotations.get(DECISION) else None
    except (ValueError, RecursionError):
        decision = None
    return ReplicaReport(
        name,
        str(spec.get("holderIdentity") or name),
        Loaded(anchors, signing, ready),
        renew_time,
        renewed,
        timedelta(seconds=seconds),
        str(meta.get("resourceVersion", "")),
        decision if isinstance(decision, dict) else None,
        _lifetime(annotations.get(MAX_LIFETIME)),
    )


def parse_report(lease: Mapping[str, Any]) -> ReplicaReport | None:
    """`read_report`, or None for a Lease that is not a readable report."""
    try:
        return read_report(lease)
    except ReplicaReportError:
        return None


def leading_decision(
    reports: Iterable[ReplicaReport], holder: str | None
) -> tuple[ReplicaReport | None, bool]:
    """The report whose decision to show: the leader's (`holder`, the leader-election
    Lease's holder), else the most recently renewed one that carries a decision (a
    leader that has just lost its Lease). The flag says whether it is the leader's."""
    with_decision = [r for r in reports if r.decision]
    by_leader = [r for r in with_decision if holder and r.replica == holder]
    chosen = (by_leader or sorted(with_decision, key=lambda r: r.renewed_at))[-1:]
    return (chosen[0] if chosen else None), bool(by_leader)


def _lifetime(value: object) -> timedelta | None:
    if value in (None, ""):
        return None
    try:
        seconds = int(str(value))
    except ValueError:
        raise ReplicaReportError(
            f"max-certificate-lifetime {str(value)[:40]!r} is not seconds"
        ) from None
    if not 0 < seconds <= MAX_REPORTED_LIFETIME.total_seconds():
        raise ReplicaReportError(f"max-certificate-lifetime {str(value)[:40]} s is out of range")
    return timedelta(seconds=seconds)


class Liveness:
    """Whether each report is live, on this process's monotonic clock: a report is live
    for `duration` after its `renewTime` was last seen to change (first sighting counts as
    a change: a new leader holds a swap back for one duration rather than ignore a live
    replica). The leader keeps one for as long as it leads."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._seen: dict[str, tuple[str, float]] = {}

    def unchanged_for(self, lease: ReplicaReport) -> float:
        """Seconds (our clock) since `lease`'s renewTime was last seen to change."""
        return self.unchanged(lease.name, lease.renew_time)

    def unchanged(self, key: str, renew_time: str) -> float:
        """Seconds (our clock) since the renewTime known as `key` was last seen to change."""
        now = self._monotonic()
        last = self._seen.get(key)
        if last is None or last[0] != renew_time:
            self._seen[key] = (renew_time, now)
            return 0.0
        return now - last[1]

    def report(self, lease: ReplicaReport) -> ReplicaView:
        live = self.unchanged_for(lease) < lease.duration.total_seconds()
        got = lease.loaded
        return ReplicaView(
            lease.replica, frozenset(got.anchors), got.signing, got.ready, live, lease.max_lifetime
        )

    def forget_all_but(self, names: Iterable[str]) -> None:
        keep = {*names, *(n for n in self._seen if n.startswith("injector/"))}
        for name in [n for n in self._seen if n not in keep]:
            del self._seen[name]


def list_reports(client: Client, namespace: str, secret_name: str) -> list[Mapping[str, Any]]:
    listed = client.get(leases_path(namespace), {"labelSelector": f"{REPORT_LABEL}={secret_name}"})
    return list(listed.get("items") or [])


class LoadedReporter:
    """Keeps this replica's report Lease current. `loaded()` says what this replica has
    loaded, e.g. `managedca.material.ApiMaterialSource.loaded`."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        secret_name: str,
        identity: str,
        loaded: Callable[[], Loaded],
        *,
        period: float = DEFAULT_PERIOD,
        duration: int = DEFAULT_DURATION,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_lifetime: timedelta | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.secret_name = secret_name
        self.identity = identity
        self.name = report_name(secret_name, identity)
        self.lease = LeaseRef(namespace, self.name)
        self.path = self.lease.path
        self.period = period
        self.duration = duration
        self._loaded = loaded
        self._clock = clock
        self._wake = threading.Event()
        self._decision: str | None = None
        self.max_lifetime = max_lifetime  # its --max-certificate-lifetime, reported

    def trigger(self, *_: object) -> None:
        """Report now (the material changed)."""
        self._wake.set()

    def set_decision(self, decision: Mapping[str, Any] | None) -> None:
        """Carry the leader's decision (None: not leading any more) from the next report
        on, which is now."""
        self._decision = json.dumps(decision, sort_keys=True) if decision is not None else None
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Report every `period` and on `trigger()` until `stop`; then delete the report."""
        while not stop.is_set():
            self._wake.clear()
            try:
                self.report()
            except ApiError as err:
                log.warning("managed CA: reporting loaded material failed", extra={"err": str(err)})
            deadline = time.monotonic() + self.period
            while not (stop.is_set() or self._wake.is_set()) and time.monotonic() < deadline:
                self._wake.wait(0.2)
        with contextlib.suppress(ApiError):  # else it expires; the leader collects it
            self.client.delete(self.path)

    def report(self) -> None:
        loaded = self._loaded()
        annotations = {
            LOADED_ANCHORS: ",".join(loaded.anchors),
            SIGNING_CA: loaded.signing or "",
            READY_TO_SIGN: loaded.ready or "",
        }
        if self._decision is not None:
            annotations[DECISION] = self._decision
        if self.max_lifetime is not None:
            annotations[MAX_LIFETIME] = str(int(self.max_lifetime.total_seconds()))
        # A conflict (someone else wrote it, never expected): the next period retries.
        write_report(
            self.client,
            self.lease,
            holder=self.identity,
            duration_seconds=self.duration,
            now=self._clock(),
            annotations=annotations,
            labels={REPORT_LABEL: self.secret_name},
        )


def injector_view(lease: Mapping[str, Any], liveness: Liveness) -> InjectorView:
    """The injector's convergence report Lease as the swap gate reads it
    (`trust.convergence`): live while its renewTime keeps changing (our clock, for the
    Lease's `leaseDurationSeconds` within the contract's bounds,
    `trust.convergence.lease_duration`), the anchors it says have converged
    (`trust.convergence.converged`) and the objects it names as lagging. A report that is
    unreadable or out of bounds converges nothing, and `ignored` says why."""
    spec = lease.get("spec") or {}
    meta = lease.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    name = str(meta.get("name", ""))
    renewed = liveness.unchanged(f"injector/{name}", str(spec.get("renewTime")))
    # Shipped empty (config/injector/leases.yaml, the chart): never written yet.
    reported = bool(spec.get("renewTime")) or bool(annotations.get(convergence.REPORT_ANNOTATION))
    live = renewed < convergence.DURATION_SECONDS  # until the Lease's own duration is read
    if not reported:
        return InjectorView(live, frozenset(), reported=False)
    try:
        live = renewed < convergence.lease_duration(spec.get("leaseDurationSeconds"))
        report = convergence.parse(annotations.get(convergence.REPORT_ANNOTATION))
    except convergence.ReportError as err:
        log.warning("the injector's convergence report is ignored", extra={"err": str(err)})
        return InjectorView(live, frozenset(), ignored=str(err))
    done = frozenset(fp for fp in report.observed if convergence.converged(report, fp))
    if not report.complete:
        # The keys the injector still waits on (`pending`, from writers that name them:
        # read tolerantly), e.g. "ConfigMap/tenant/web-ca".
        pending = tuple(str(k) for k in getattr(report, "pending", ()) or ())
        named = tuple(_kind_name(k) for k in pending[: convergence.MAX_LAGGING])
        waiting = "(the injector has not synced every object since it started leading)"
        if named:
            waiting = (
                "(the injector has not synced these since it started leading: "
                + ", ".join(f"{kind} {name}" for kind, name in named)
                + ")"
            )
        return InjectorView(live, done, lagging=(waiting,), holding=named)
    # Only what holds the swap: a tenant's (namespaced) blocked object is excused, and a
    # wait must not blame it.
    holding = report.holding()[: convergence.MAX_LAGGING]
    lagging = tuple(
        f"{kind} {lag.name}" + (f" (blocked: {lag.reason})" if lag.reason is not None else "")
        for kind, lag in holding
    )
    return InjectorView(
        live, done, lagging=lagging, holding=tuple((kind, lag.name) for kind, lag in holding)
    )


def _kind_name(key: str) -> tuple[str, str]:
    """("ConfigMap", "ns/name") of a report's key "ConfigMap/ns/name"."""
    kind, _, name = key.partition("/")
    return kind, name
