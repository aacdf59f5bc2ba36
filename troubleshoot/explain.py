"""`explain pod|pcr NAME`: what will happen to a Pod's certificate requests, and why.

What it decides, read-only (no status, no Event, no index):

* **The signer's decision**, from the signer's own decision (`signer.decide.Decider`, the
  code the running signer uses) over stores that read live from the API server instead
  of informer caches — so explain cannot drift from the
  signer: a wait it reports is the wait the signer is in.
* **Whether anything will act on it** (`troubleshoot.leasehealth`): a pending request is only
  decided while a signer replica holds and renews the leader Lease; a request of another
  signer name is not ours to decide; a decision the signer should have written within
  seconds but has not after `STUCK_AFTER` means the leader is not acting on it. Any of
  those is the verdict "nothing will act" (exit 5), whatever the decision would be.
  Without a renewing Lease holder, the **presence report** decides (every signer
  process renews it, leader election on or off: `troubleshoot.leasehealth`): live with
  leader election off, a signer acts; expired, or missing together with the leader
  Lease, none runs — whatever the request's age. Only when the presence cannot say
  (unreadable, or missing beside a leader Lease: a signer older than the report) does
  explain look for **traces of a signer acting**: a decision this signer name wrote on a
  request in the namespace (an Issued, Denied or Failed condition's time) or an Event it
  recorded about one, within `ACTIVE_WITHIN` or since the request was created. A trace
  means a signer acts. No trace on a request older than `STUCK_AFTER` means none does (a
  running signer decides, or records the wait, within seconds). No trace on a younger
  request, with no Lease at all and no readable presence, is `unknown`.
* **Its clock**: kube-controller-manager's PodCertificateRequest cleaner deletes every
  request `CLEANUP_AFTER` (15 min) after creation, at passes `CLEANUP_PERIOD` (5 min)
  apart; kubelet then makes a new request. A waiting request is shown with that time.
* **Advice** (`troubleshoot.advice`): the value that would pass and where to write it (the
  owner's Pod template, followed through ReplicaSet → Deployment and Job → CronJob).
* **Issued**: the DNS names, `notAfter` and `beginRefreshAt` of the certificate.

Permissions: everything it needs in the Pod's namespace comes with namespace `view` plus
the aggregated `service-serving-signer-view` ClusterRole (config/rbac). The signer's
Lease and ClusterTrustBundles are read when allowed; a refusal there is shown as the
missing permission and the health as unknown, never as a failure. A refusal of something
the answer needs (the request, the Pod) is an error naming (verb, resource, namespace).

Exit status (the `Outcome` values): 0 issued or would be issued by a running signer, 2 it
waits, 3 it is (or would be) Denied or Failed, 4 the Pod has no request for this signer,
5 nothing will act on it; 1 an error. For a Pod with several requests the most severe
wins: deny, nothing acts, wait, no request, issue.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509

from kube.client import ApiError, Client, is_not_found, path_segment
from kube.events import REPORTING_CONTROLLER
from kube.presence import PresenceVerdict
from kube.times import format_time, parse_time, span
from kube.types import JSON
from signer import policy
from signer import presence as signer_presence
from signer.decide import Decider, Terminal, Wait
from signer.lookups import PCR_GROUP, ApiLookups
from signer.records import (
    PCRRecord,
    PodRecord,
    ServiceRecord,
    pcr_record,
    pod_record,
    service_record,
    terminal_condition,
)
from troubleshoot import advice, mldsa
from troubleshoot.access import denied_or_raise
from troubleshoot.leasehealth import Health, Leader

CLEANUP_AFTER = timedelta(minutes=15)  # kube-controller-manager: NewPCRCleanerController
CLEANUP_PERIOD = timedelta(minutes=5)
# A renewing leader decides a request within seconds; a backlog of thousands (a large
# rollout at the signer's write rate) drains within a few minutes. Past this, the leader
# is not acting on the request.
STUCK_AFTER = timedelta(minutes=5)
# How recent a trace of the signer acting (a decision written, an Event recorded) must
# be to count when no Lease holder renews.
ACTIVE_WITHIN = timedelta(minutes=5)


class Outcome(enum.IntEnum):
    ISSUE = 0
    WAIT = 2
    DENY = 3
    NO_REQUEST = 4
    NOTHING_ACTS = 5

    @property
    def label(self) -> str:
        return {
            Outcome.ISSUE: "issue",
            Outcome.WAIT: "wait",
            Outcome.DENY: "deny",
            Outcome.NO_REQUEST: "no request",
            Outcome.NOTHING_ACTS: "nothing will act",
        }[self]


SEVERITY = (Outcome.DENY, Outcome.NOTHING_ACTS, Outcome.WAIT, Outcome.NO_REQUEST, Outcome.ISSUE)


class ExplainError(RuntimeError):
    """The object could not be read; the message is one line."""


@dataclass(frozen=True)
class Blocking:
    service: str
    reason: str
    message: str
    fix: str
    # key → (the Service's selector value, the Pod's label value or None)
    differing_keys: Mapping[str, tuple[str, str | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestReport:
    name: str
    created: datetime | None
    outcome: Outcome
    summary: str
    signer_name: str = ""
    reason: str | None = None
    message: str | None = None
    fix: str | None = None
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()  # an issued leaf's IP SANs (--cluster-ip-sans)
    key_type: str | None = None  # kubelet's keyType spelling, from the request's key
    blocking: tuple[Blocking, ...] = ()
    already: str | None = None  # the terminal condition written, if any
    not_after: datetime | None = None
    begin_refresh_at: datetime | None = None
    why_nothing_acts: str | None = None
    cleanup: str | None = None  # when kube-controller-manager deletes it
    # Without a renewing Lease holder: the trace that shows a signer acting anyway, or
    # why explain cannot tell whether one does.
    acting: str | None = None
    acting_unknown: str | None = None

    def age(self, now: datetime) -> timedelta | None:
        return now - self.created if self.created else None


@dataclass(frozen=True)
class Explanation:
    """What `explain` found for one Pod (or one request's Pod): each request, the signer's
    health, and who owns the Pod."""

    namespace: str
    pod: str
    signer_name: str
    requests: tuple[RequestReport, ...]
    note: str | None = None
    owner: advice.Owner | None = None
    health: Health | None = None
    other_signers: tuple[str, ...] = ()

    @property
    def outcome(self) -> Outcome:
        outcomes = {r.outcome for r in self.requests} or {Outcome.NO_REQUEST}
        return next(o for o in SEVERITY if o in outcomes)


# live stores: the decision's store protocol, answered by the API server ----------------


class _LiveStore:
    def __init__(self, client: Client, plural: str, transform: Callable[[JSON], Any]) -> None:
        self._client = client
        self._plural = plural
        self._transform = transform
        self.seen: dict[str, Any] = {}
        self.raw: dict[str, JSON | None] = {}

    def get(self, key: str) -> Any:
        if key not in self.seen:
            obj = self.get_raw(key)
            self.seen[key] = None if obj is None else self._transform(obj)
        return self.seen[key]

    def get_raw(self, key: str) -> JSON | None:
        """The object as served (read once per run), or None if it does not exist."""
        if key in self.raw:
            return self.raw[key]
        namespace, _, name = key.partition("/")
        try:
            obj = self._client.get(
                f"/api/v1/namespaces/{path_segment(namespace)}/{self._plural}/{path_segment(name)}"
            )
        except ApiError as err:
            if not is_not_found(err):
                raise denied_or_raise(err, "get", self._plural, "", namespace, name) from None
            found = None
        else:
            found = obj
        self.raw[key] = found
        return found


class Explainer:
    def __init__(
        self,
        client: Client,
        *,
        signer_name: str,
        domain: str,
        pcr_version: str,
        health: Health | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.signer_name = signer_name
        self.pcr_version = pcr_version
        self.health = health
        self.now = now
        self._pods = _LiveStore(client, "pods", pod_record)
        self._services = _LiveStore(client, "services", service_record)
        self.decider = Decider(
            self._pods, self._services, ApiLookups(client), domain=domain, pcr_version=pcr_version
        )
        self._owners: dict[tuple[str, str, str], advice.Owner] = {}
        self._traces: dict[str, Trace | None] = {}

    def pcr_base(self, namespace: str | None) -> str:
        scope = f"/namespaces/{path_segment(namespace)}" if namespace else ""
        return f"/apis/{PCR_GROUP}/{self.pcr_version}{scope}/podcertificaterequests"

    def _read(self, path: str, what: str, resource: str, group: str, ns: str, name: str) -> JSON:
        try:
            return self.client.get(path)
        except ApiError as err:
            if is_not_found(err):
                raise ExplainError(f"{what} not found") from None
            raise denied_or_raise(err, "get", resource, group, ns, name) from None

    def pod_raw(self, namespace: str, name: str) -> JSON | None:
        """The Pod as served, read once per run (the decision reads the same copy)."""
        return self._pods.get_raw(f"{namespace}/{name}")

    def explain_pcr(self, namespace: str, name: str) -> Explanation:
        what = f"PodCertificateRequest {namespace}/{name}"
        raw = self._read(
            f"{self.pcr_base(namespace)}/{path_segment(name)}",
            what,
            "podcertificaterequests",
            PCR_GROUP,
            namespace,
            name,
        )
        pcr = pcr_record(raw)
        pod_raw = self.pod_raw(namespace, pcr.pod_name)
        if pod_raw is not None and (pod_raw.get("metadata") or {}).get("uid") != pcr.pod_uid:
            pod_raw = None
        owner = self.owner_of(namespace, pcr.pod_name, pod_raw)
        request = self.request(pcr, raw, pod_raw, owner)
        return Explanation(
            namespace, pcr.pod_name, self.signer_name, (request,), owner=owner, health=self.health
        )

    def explain_pod(self, namespace: str, name: str) -> Explanation:
        pod_raw = self.pod_raw(namespace, name)
        if pod_raw is None:
            raise ExplainError(f"Pod {namespace}/{name} not found")
        uid = (pod_raw.get("metadata") or {}).get("uid")
        try:
            listed = self.client.get(
                self.pcr_base(namespace), {"fieldSelector": f"spec.podName={name}"}
            )
        except ApiError as err:
            raise denied_or_raise(
                err, "list", "podcertificaterequests", PCR_GROUP, namespace
            ) from None
        raws = [
            item
            for item in listed.get("items") or []
            if (item.get("spec") or {}).get("podUID") == uid
        ]
        raws.sort(key=lambda item: (item.get("metadata") or {}).get("creationTimestamp") or "")
        ours = [r for r in raws if (r.get("spec") or {}).get("signerName") == self.signer_name]
        others = sorted(
            {str((r.get("spec") or {}).get("signerName")) for r in raws if r not in ours}
        )
        owner = self.owner_of(namespace, name, pod_raw)
        reports = tuple(self.request(pcr_record(raw), raw, pod_raw, owner) for raw in ours)
        note = None
        if not reports:
            projects = projected_volume(pod_raw, self.signer_name) is not None
            # An unbound Pod asking for ML-DSA: say which of its requirements is missing.
            unplaced = mldsa.placement(self.client, pod_raw, self.signer_name)
            note = (
                unplaced.note()
                if unplaced is not None
                else "kubelet has not created a request yet (it does once the Pod is bound "
                "to a node and its volumes are set up)"
                if projects
                else f"the Pod projects no podCertificate volume for {self.signer_name}"
            )
        return Explanation(
            namespace,
            name,
            self.signer_name,
            reports,
            note,
            owner=owner,
            health=self.health,
            other_signers=tuple(others),
        )

    # owners ------------------------------------------------------------------------------

    def owner_of(self, namespace: str, pod_name: str, pod_raw: JSON | None) -> advice.Owner:
        """The controller whose Pod template makes this Pod (ReplicaSet → Deployment,
        Job → CronJob). A read that is refused stops at what is known."""
        ref = _controller_ref(pod_raw)
        if ref is None:
            return advice.owner("Pod", pod_name)
        if (namespace, *ref) not in self._owners:
            self._owners[(namespace, *ref)] = self._top_owner(namespace, *ref)
        return self._owners[(namespace, *ref)]

    def _top_owner(self, namespace: str, kind: str, name: str) -> advice.Owner:
        parents = {"ReplicaSet": ("apps/v1", "replicasets"), "Job": ("batch/v1", "jobs")}
        if kind in parents:
            group_version, plural = parents[kind]
            try:
                obj: JSON | None = self.client.get(
                    f"/apis/{group_version}/namespaces/{path_segment(namespace)}/{plural}/"
                    f"{path_segment(name)}"
                )
            except ApiError:
                obj = None
            parent = _controller_ref(obj)
            if parent is not None and parent[0] in ("Deployment", "CronJob"):
                kind, name = parent
        return advice.owner(kind, name)

    # one request -------------------------------------------------------------------------

    def request(
        self, pcr: PCRRecord, raw: JSON, pod_raw: JSON | None, owner: advice.Owner
    ) -> RequestReport:
        report = self._decided(pcr, raw, pod_raw, owner)
        if report.already is None:
            report = self._will_anything_act(report, pcr.namespace)
        return report

    def _context(self, pcr: PCRRecord, pod_raw: JSON | None, owner: advice.Owner) -> advice.Context:
        labels = ((pod_raw or {}).get("metadata") or {}).get("labels") or {}
        return advice.Context(
            namespace=pcr.namespace,
            owner=owner,
            volume=projected_volume(pod_raw or {}, pcr.signer_name) or "",
            annotations=dict(pcr.annotations),
            pod_labels=dict(labels),
        )

    def _decided(
        self, pcr: PCRRecord, raw: JSON, pod_raw: JSON | None, owner: advice.Owner
    ) -> RequestReport:
        ctx = self._context(pcr, pod_raw, owner)
        report = functools.partial(
            RequestReport,
            name=pcr.name,
            created=pcr.created,
            signer_name=pcr.signer_name,
            key_type=request_key_type(raw),
        )
        if pcr.signer_name != self.signer_name:
            return report(
                outcome=Outcome.NOTHING_ACTS,
                summary=f"is for signer {pcr.signer_name}",
                why_nothing_acts=(
                    f"this signer serves {self.signer_name}, not {pcr.signer_name}; "
                    "only that signer's controller decides it"
                ),
            )
        status = raw.get("status") or {}
        terminal = terminal_condition(status)
        if terminal == "Issued":
            return report(
                outcome=Outcome.ISSUE,
                summary="Issued",
                dns_names=chain_dns_names(status.get("certificateChain")),
                ip_addresses=chain_ip_addresses(status.get("certificateChain")),
                not_after=parse_time(status.get("notAfter")),
                begin_refresh_at=parse_time(status.get("beginRefreshAt")),
                already=terminal,
            )
        if terminal is not None:
            condition = _condition(raw, terminal)
            reason = str(condition.get("reason") or "")
            return report(
                outcome=Outcome.DENY,
                summary=terminal,
                reason=reason,
                message=condition.get("message"),
                fix=advice.for_denial(reason, ctx) or None,
                already=terminal,
            )
        decision = self.decider.decide(pcr)
        if isinstance(decision, Terminal):
            return report(
                outcome=Outcome.DENY,
                summary=f"would be {decision.condition} ({decision.reason})",
                reason=decision.reason,
                message=decision.message,
                fix=advice.for_denial(decision.reason, ctx) or None,
            )
        if isinstance(decision, Wait):
            ctx = replace(ctx, pod_labels=dict(decision.pod.labels))
            blocking = tuple(self._blocking(b, decision.pod, ctx) for b in decision.blockers)
            return report(
                outcome=Outcome.WAIT,
                summary=f"waits on {len(blocking)} Service(s)",
                blocking=blocking,
            )
        return report(
            outcome=Outcome.ISSUE,
            summary="would be issued now",
            dns_names=decision.dns_names,
        )

    def _blocking(self, blocker: Any, pod: PodRecord, ctx: advice.Context) -> Blocking:
        service: ServiceRecord | None = self._services.get(blocker.service_key)
        name = blocker.service_key.partition("/")[2]
        selector = dict(service.selector) if service is not None else None
        return Blocking(
            service=blocker.service_key,
            reason=blocker.reason,
            message=blocker.message,
            fix=advice.for_blocker(blocker.reason, name, ctx, selector),
            differing_keys=(
                _differing_keys(service, pod) if blocker.reason == "ServiceSelectorMismatch" else {}
            ),
        )

    def _will_anything_act(self, report: RequestReport, namespace: str) -> RequestReport:
        """A pending request of ours: is a signer there to act, and how long is left."""
        if report.outcome is Outcome.NOTHING_ACTS:
            return report
        now = self.now()
        age = report.age(now)
        cleanup = None
        if report.created is not None and age is not None:
            deadline = report.created + CLEANUP_AFTER
            if age >= CLEANUP_AFTER:
                cleanup = (
                    f"older than {span(CLEANUP_AFTER)}: kube-controller-manager's "
                    f"PodCertificateRequest cleaner deletes it at its next pass (every "
                    f"{span(CLEANUP_PERIOD)}); kubelet then makes a new request"
                )
            else:
                cleanup = (
                    f"kube-controller-manager deletes it {span(deadline - now)} from now "
                    f"(at {format_time(deadline)}) unless it is decided first; kubelet then "
                    "makes a new request"
                )
        report = replace(report, cleanup=cleanup)
        health = self.health
        if health is None:
            return report
        report = paused_by_managed_ca(report, health, now)
        lease = health.lease
        if lease.acting:
            return _stuck(report, age, f"while {lease.renewal.holder} holds the Lease")
        acting = health.acting
        if acting and health.presence is not None and health.presence.presence is not None:
            by = health.presence.presence.renewal.holder
            return _stuck(report, age, f"while signer {by} runs without leader election")
        if acting is False and not health.presence_missing:
            # The presence is readable and says no signer acts: no trace can say otherwise
            # (a killed signer's last decisions are traces of a signer that is gone).
            return replace(
                report, outcome=Outcome.NOTHING_ACTS, why_nothing_acts=not_acting_text(health)
            )
        # No renewing holder and no live presence, or one we may not read: look for
        # traces of a signer acting anyway (one older than the presence report).
        trace = self._trace(namespace)
        since = now - ACTIVE_WITHIN
        if report.created is not None:
            since = min(since, report.created)
        if trace is not None and trace.at >= since:
            acting_text = (
                f"{trace.what} {span(now - trace.at)} ago, without holding Lease "
                f"{lease.namespace}/{lease.name}: a signer runs without leader election "
                "(--leader-elect=false) or on another Lease"
            )
            report = replace(report, acting=acting_text)
            return _stuck(report, age, f"(the last trace of the signer: {trace.what})")
        if acting is False:
            return replace(
                report, outcome=Outcome.NOTHING_ACTS, why_nothing_acts=not_acting_text(health)
            )
        if lease.acting is None:
            return report
        why = no_leader_text(lease.leader, lease.namespace, lease.name)
        if age is not None and age >= STUCK_AFTER:
            return replace(
                report,
                outcome=Outcome.NOTHING_ACTS,
                why_nothing_acts=(
                    f"{why}; and no trace of signer {self.signer_name} acting in namespace "
                    f"{namespace} since this request was created {span(age)} ago"
                ),
            )
        if lease.leader is Leader.MISSING:
            return replace(
                report,
                acting_unknown=(
                    f"{why}; and no trace of signer {self.signer_name} acting in namespace "
                    f"{namespace} in the last {span(ACTIVE_WITHIN)}. A signer run with "
                    "--leader-elect=false that has had nothing to decide leaves none either: "
                    "ask again in a few seconds (it decides a request within seconds)"
                ),
            )
        return replace(report, outcome=Outcome.NOTHING_ACTS, why_nothing_acts=why)

    def _trace(self, namespace: str) -> Trace | None:
        """The newest trace of this signer name acting in `namespace` (read once per run):
        a decision written on one of its requests, or an Event it recorded about one.
        What we may not read is no trace."""
        if namespace not in self._traces:
            self._traces[namespace] = self._read_trace(namespace)
        return self._traces[namespace]

    def _read_trace(self, namespace: str) -> Trace | None:
        traces: list[Trace] = []
        try:
            listed = self.client.get(
                self.pcr_base(namespace), {"fieldSelector": f"spec.signerName={self.signer_name}"}
            )
        except ApiError as err:
            if err.status != 403:
                raise
            listed = {}
        ours: set[str] = set()
        for item in listed.get("items") or []:
            name = str((item.get("metadata") or {}).get("name") or "")
            ours.add(name)
            for condition in (item.get("status") or {}).get("conditions") or []:
                at = parse_time(condition.get("lastTransitionTime"))
                kind = str(condition.get("type") or "")
                if at is not None and kind in ("Issued", "Denied", "Failed"):
                    what = f"signer {self.signer_name} {kind.lower()} PodCertificateRequest"
                    traces.append(Trace(at, f"{what} {namespace}/{name}"))
        try:
            events = self.client.get(
                f"/apis/events.k8s.io/v1/namespaces/{path_segment(namespace)}/events"
            )
        except ApiError as err:
            if err.status != 403:
                raise
            events = {}
        for event in events.get("items") or []:
            related = event.get("related") or {}
            if (
                event.get("reportingController") != REPORTING_CONTROLLER
                or related.get("kind") != "PodCertificateRequest"
                or related.get("name") not in ours
            ):
                continue
            at = (
                parse_time((event.get("series") or {}).get("lastObservedTime"))
                or parse_time(event.get("eventTime"))
                or parse_time(event.get("deprecatedLastTimestamp"))
            )
            if at is not None:
                about = f"PodCertificateRequest {namespace}/{related.get('name')}"
                traces.append(Trace(at, f"signer recorded {event.get('reason')} about {about}"))
        return max(traces, key=lambda t: t.at, default=None)


@dataclass(frozen=True)
class Trace:
    """A sign of the signer acting: when, and what it did, in words."""

    at: datetime
    what: str


def _stuck(report: RequestReport, age: timedelta | None, acting: str) -> RequestReport:
    """A request a running signer would decide at once, pending past `STUCK_AFTER`:
    nothing is acting on it after all."""
    decided_now = report.outcome in (Outcome.ISSUE, Outcome.DENY)
    if decided_now and age is not None and age >= STUCK_AFTER:
        return replace(
            report,
            outcome=Outcome.NOTHING_ACTS,
            why_nothing_acts=(
                f"the signer would decide this at once, yet it has been pending for "
                f"{span(age)} {acting}: the signer is not acting on it, or far behind "
                "(its logs, its RBAC, its --signer-name, "
                'workqueue_depth{name="service_serving_signer"})'
            ),
        )
    return report


MANAGED_CA_PAUSED = "ManagedCAPaused"


def paused_by_managed_ca(report: RequestReport, health: Health, now: datetime) -> RequestReport:
    """A request that would be issued waits while the managed CA signs nothing (a CA not
    confirmed yet, a revoked one): the signer holds it until then. Pure."""
    ca = health.managed_ca
    if report.outcome is not Outcome.ISSUE or ca is None or ca.paused is None:
        return report
    until = ""
    if ca.paused_until is not None:
        left = ca.paused_until - now
        until = f" until {format_time(ca.paused_until)}" + (
            f" (in {span(left)})" if left > timedelta(0) else ""
        )
    return replace(
        report,
        outcome=Outcome.WAIT,
        summary=f"issuance paused by the managed CA{until}: {ca.paused}",
        reason=MANAGED_CA_PAUSED,
        message=ca.paused,
        fix="service-serving-signer ca status (what the managed CA waits for)",
    )


def not_acting_text(health: Health) -> str:
    """Why no signer acts, from the leader Lease and the presence report (`Health.acting`
    is False)."""
    lease, state = health.lease, health.presence
    found = state.presence if state is not None else None
    if state is None or found is None:
        return no_leader_text(lease.leader, lease.namespace, lease.name)
    where = f"presence Lease {found.namespace}/{found.name}"
    if found.alive and not state.serves_us:
        served = found.annotations.get(signer_presence.SIGNER_NAME, "?")
        return (
            f"the signer renewing {where} serves {served}, not {health.signer_name}: no "
            f"signer of that name runs there (--signer-name, --signer-namespace)"
        )
    if found.alive:
        ago = span(timedelta(seconds=found.renewal.age_seconds or 0))
        return (
            f"a signer process renewed {where} {ago} ago ({found.renewal.holder}), yet none leads: "
            + no_leader_text(lease.leader, lease.namespace, lease.name)
        )
    if found.state is PresenceVerdict.EXPIRED:
        last = ""
        if found.renewal.renew_time is not None:
            ago = span(timedelta(seconds=found.renewal.age_seconds or 0))
            last = f" since {format_time(found.renewal.renew_time)} ({ago} ago)"
        return (
            f"no signer runs: no signer process has renewed {where}{last}; the last was "
            f"{found.renewal.holder or 'unknown'}"
        )
    if lease.leader is not Leader.MISSING:
        # A leader Lease without a presence: a signer older than the presence report ran.
        return no_leader_text(lease.leader, lease.namespace, lease.name)
    return (
        f"no signer runs: neither Lease {lease.namespace}/{lease.name} nor {where} exists "
        "(--signer-namespace/--lease-name if it was installed elsewhere)"
    )


def no_leader_text(leader: Leader, namespace: str, name: str) -> str:
    lease = f"Lease {namespace}/{name}"
    return {
        Leader.RELEASED: f"no signer holds {lease} (released, holderIdentity empty): "
        "no replica of the signer is running",
        Leader.EXPIRED: f"the holder of {lease} stopped renewing it: the signer is down or "
        "cut off from the API server",
        Leader.MISSING: f"{lease} does not exist: no signer runs with that Lease "
        "(--signer-namespace/--lease-name if it was installed elsewhere)",
    }.get(leader, "")


def request_key_type(raw: JSON) -> str | None:
    """The key type (`ECDSAP256`, `MLDSA65`, …) of the key a request carries, or None when
    the signer would not accept it (the denial then says which key it was)."""
    spec = raw.get("spec") or {}
    key = policy.public_key_from_request(spec.get("stubPKCS10Request"), spec.get("pkixPublicKey"))
    return None if isinstance(key, policy.Denial) else policy.key_type_of(key)


def _leaf_sans(chain: Any) -> x509.SubjectAlternativeName | None:
    """The SubjectAlternativeName of an issued chain's leaf (None: no chain, or none)."""
    if not chain:
        return None
    try:
        leaf = x509.load_pem_x509_certificates(str(chain).encode())[0]
        return leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, IndexError, x509.ExtensionNotFound):
        return None


def chain_ip_addresses(chain: Any) -> tuple[str, ...]:
    """The IP SANs of an issued chain's leaf (none unless `--cluster-ip-sans`)."""
    sans = _leaf_sans(chain)
    return tuple(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)) if sans else ()


def chain_dns_names(chain: Any) -> tuple[str, ...]:
    sans = _leaf_sans(chain)
    return tuple(sans.get_values_for_type(x509.DNSName)) if sans else ()


def _controller_ref(obj: JSON | None) -> tuple[str, str] | None:
    for ref in ((obj or {}).get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return None


def _condition(raw: JSON, kind: str) -> Mapping[str, Any]:
    for condition in (raw.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            found: Mapping[str, Any] = condition
            return found
    return {}


def _differing_keys(
    service: ServiceRecord | None, pod: PodRecord
) -> dict[str, tuple[str, str | None]]:
    if service is None:
        return {}
    return {
        key: (value, pod.labels.get(key))
        for key, value in sorted(service.selector.items())
        if pod.labels.get(key) != value
    }


def projected_volume(pod: JSON, signer_name: str) -> str | None:
    """The name of the Pod's volume that projects a podCertificate for `signer_name`."""
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        for source in (volume.get("projected") or {}).get("sources") or ():
            if (source.get("podCertificate") or {}).get("signerName") == signer_name:
                return str(volume.get("name") or "")
    return None
