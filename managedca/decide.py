"""What the managed CA does next, from its persisted state, what the cluster has been
observed to hold, and the time (pure: no client, no clock, no key).

The state machine (docs/managed-ca.md), one action per call, checked in this order:

1. `Bootstrap` — no CA Secret exists: make a root and create the Secret (a conditional
   create: of two replicas racing, one wins and the other adopts its CA).
2. `Confirm` — the CA was just made. A first CA (nothing was published before) is
   confirmed once the ClusterTrustBundle read back holds it. A CA made while roots were
   already published (`Bootstrap.adopt`: a deleted Secret, a move from file mode) passes
   the same gates as a swap first (3). Nothing is signed with a CA before `Confirm`
   (the signing source refuses an unconfirmed CA).
3. *Staged* (a next CA exists) — `Swap` only when, at the same time (`_gated`):
   the bundle read back holds the current and the next CA; that was first seen at a
   recorded instant (`MarkPublished` records it, and the instant the propagation delay —
   kubelet's `clusterTrustBundle` projection refresh — ends, so a changed flag does not
   move a rotation under way); every replica whose report is live has loaded a bundle
   holding the next CA and is ready to sign with it (validated it as a signing set);
   that instant has passed, and this leader has itself seen the bundle hold both for
   the delay (its monotonic clock); and the next CA is valid now and outlives the
   longest leaf. Otherwise `Wait`, saying for what (`WAIT_REASONS`) and until when.
4. *Stable* — `ScheduleRetire` once the last swap is read back and every live replica
   reports the current CA as the one it signs with (its previous root has no retire
   time yet: that instant + the longest leaf lifetime issued + a margin); `Retire`
   previous roots whose retire time has passed, except the newest `keep_previous` that
   have not expired (a CA history); else `Stage` when `ca rotate` asked for it or the
   configured point of the current CA's life is reached; else `Wait` until the earliest
   of those instants.

What each action writes is `managedca.step.apply(state, action, made)`: the one
transition function, used by the controller (through `step.take`) and driven by the
property model.

Why the invariants hold (tests/unit/managedca/test_properties.py checks them over
crashes, leader changes, lost and stale writes, a deleted Secret, rejected signing sets,
consumer lag and clock skew; hack/knock-out-gates.py removes each gate in turn):

- *Never two next CAs*: `Stage` happens only with no next CA, and every write carries
  the resourceVersion it was decided on, so a stale decision cannot replace a next CA.
- *Nothing signed by a CA absent from the bundle*: a replica signs with the current CA
  of the state it has loaded and publishes that state's bundle, which always holds its
  current CA; a swapped-in CA was in the read-back bundle before the swap, and stays
  (as a previous root) after it.
- *No root retired while a leaf it signed can be valid*: a root leaves the bundle only
  at `retire_at` = the instant a decision read the swap back from the API + the longest
  lifetime + margin. Counting from the read-back, not from the decision to swap, keeps
  this true when the swap's write landed long after it was decided (a leader paused in
  between, with nobody else writing: the resourceVersion still matched); a delayed
  `ScheduleRetire` write only moves the retire time later. The margin covers a replica
  still signing with the old CA for a moment after the swap (its watch is behind) and
  clock steps; both must stay below it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

PHASE_BOOTSTRAPPING = "Bootstrapping"
PHASE_STABLE = "Stable"
PHASE_STAGED = "Staged"
PHASE_RETIRING = "Retiring"
PHASES = (PHASE_BOOTSTRAPPING, PHASE_STABLE, PHASE_STAGED, PHASE_RETIRING)


@dataclass(frozen=True, order=True)
class CaInfo:
    """What the decision needs of one CA certificate (never its key)."""

    fingerprint: str  # sha256 of the DER, lowercase hex
    not_before: datetime
    not_after: datetime

    @property
    def lifetime(self) -> timedelta:
        return self.not_after - self.not_before


@dataclass(frozen=True)
class Previous:
    """A root that signed before the last swap it took part in; in the bundle until
    `retire_at`. `retire_at` is None until a decision has read the swap back from the
    API (`ScheduleRetire`): a swap decided long before it was written (a leader paused
    between the two) must not count its leaves' lifetime from the decision."""

    ca: CaInfo
    swapped_at: datetime
    retire_at: datetime | None
    lifetime: timedelta | None = None  # the longest leaf lifetime it signed with


@dataclass(frozen=True)
class State:
    """The persisted state (the CA Secret), without keys or certificate bytes."""

    current: CaInfo
    confirmed_at: datetime | None = None  # first seen in the read-back bundle
    next: CaInfo | None = None
    staged_at: datetime | None = None
    published_at: datetime | None = None  # bundle read back first held current + next
    swap_not_before: datetime | None = None  # published_at + the propagation delay then
    previous: tuple[Previous, ...] = ()  # newest first
    rotate_requested_at: datetime | None = None  # `ca rotate`, not yet acted on
    swapped_at: datetime | None = None  # the last swap
    # `ca rotate --emergency`: roots to revoke, not yet acted on
    emergency_requested_at: datetime | None = None
    revoke: frozenset[str] = frozenset()
    revoked: frozenset[str] = frozenset()  # never adopted or published again
    emergency: bool = False  # the current CA was made in an emergency: no gates to sign
    # The longest leaf lifetime any replica was configured with while signing with the
    # current CA (`RecordLifetime`): its retire time counts this, not the leader's flag.
    issued_lifetime: timedelta | None = None
    # The roots retired lately (newest first, `RETIRED_KEPT`): a bundle still holding
    # one for a moment after its `Retire` is not a root to adopt back.
    retired: tuple[str, ...] = ()
    # `ca skip-consumers`: the swap to this next CA (its fingerprint) no
    # longer waits for the injector's report; who asked, for the record.
    consumers_skipped_for: str | None = None
    consumers_skipped_by: str | None = None
    # A leader has seen the injector's convergence report Lease (`RecordInjectorSeen`):
    # from then on a missing report is a wait (`injector-report-missing`), not "no
    # injector" — a deleted Lease never turns the gate off. Cleared only by an operator
    # (the injector's documented removal, docs/managed-ca.md).
    injector_seen: bool = False

    @property
    def phase(self) -> str:
        if self.confirmed_at is None:
            return PHASE_BOOTSTRAPPING
        if self.next is not None:
            return PHASE_STAGED
        if self.previous:
            return PHASE_RETIRING
        return PHASE_STABLE

    def anchors(self) -> tuple[CaInfo, ...]:
        """The roots this state publishes: current, next, then every previous root."""
        nxt = (self.next,) if self.next is not None else ()
        return (self.current, *nxt, *(p.ca for p in self.previous))


@dataclass(frozen=True)
class ReplicaView:
    """One replica's report (its Lease, `managedca.report.ReplicaReport`) as the leader
    judged it: the anchors of the bundle it has loaded, the CA it signs with, and the
    staged CA it has validated as a signing set ("ready to sign with": key matches, valid
    now and for the lead time, a probe leaf verifies). `live` is the leader's judgement
    (`managedca.report.Liveness`: renewals seen on its own monotonic clock), never a
    comparison of the replica's clock with the leader's."""

    replica: str
    anchors: frozenset[str]  # fingerprints
    signing: str | None = None
    ready: str | None = None
    live: bool = True
    max_lifetime: timedelta | None = None  # its --max-certificate-lifetime


@dataclass(frozen=True)
class InjectorView:
    """The injector's convergence report (docs/reference.md §11/§12), as the leader
    judged it: `live` (its renewTime seen changing on the leader's monotonic clock) and
    the anchors every managed object selecting them holds (selecting - holding - blocked
    == 0; objects blocked by their owner never hold a rotation)."""

    live: bool
    converged: frozenset[str]
    # False: the report Lease exists (shipped with the injector) but was never written.
    reported: bool = True
    # The first objects holding the gate, e.g. "ValidatingWebhookConfiguration hooks
    # (blocked: <the API's refusal>)", named in the wait's `why`.
    lagging: tuple[str, ...] = ()
    # The same objects as (kind, name), for `managed_ca_waiting_object`.
    holding: tuple[tuple[str, str], ...] = ()
    # Why the report is ignored (unreadable, or out of the contract's bounds), if it is.
    ignored: str | None = None


# `Observations.server_now` when the server's clock is tracked but unknown (no answer
# carried a Date): before every retire time, so nothing is retired on the leader's alone.
SERVER_CLOCK_UNKNOWN = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class Observations:
    published: frozenset[str]  # fingerprints of the anchors in the bundle read back
    reports: tuple[ReplicaView, ...] = ()
    published_cas: tuple[CaInfo, ...] = ()  # the same anchors, for an adopting bootstrap
    # How long this leader has seen the read-back hold every root the state publishes,
    # on its own monotonic clock (None: not tracked, e.g. `ca status`). The propagation
    # delay is also measured so: a successor whose clock runs ahead cannot cut it short.
    published_for: timedelta | None = None
    injector: InjectorView | None = None  # None: no convergence report exists
    revoked: frozenset[str] = frozenset()  # what this replica has seen revoked
    # This leader has seen the injector's report Lease since it started leading (its
    # memory; `State.injector_seen` is the persisted one).
    injector_seen: bool = False
    # How long this leader has seen the injector's report say the new CA converged (its
    # monotonic clock; None: not tracked). Pods read an injected ConfigMap through a
    # volume kubelet rewrites on its resync: the swap waits the propagation delay from
    # the later of the read-back and this.
    converged_for: timedelta | None = None
    # How long this leader has been taking steps (its monotonic clock), and its wall
    # clock when it started: a retire, which cannot be undone, needs both clocks to agree
    # that its time has come (None: not tracked).
    led_for: timedelta | None = None
    led_since: datetime | None = None
    # The API server's clock, as the `Date` of its answers to this leader says it (a clock
    # the leader does not own): a retire also needs it past the retire time, so a leader
    # elected with its wall clock already ahead does not retire early (None: not tracked;
    # `SERVER_CLOCK_UNKNOWN`: tracked, but no answer carried a Date).
    server_now: datetime | None = None
    # The Secret's confirmed current CA is not one the state this leader read before held
    # (`held_by`): the Secret moved backwards past it (a restore). The publisher puts
    # the restored roots back within milliseconds, so the read-back alone may not tell.
    current_not_held_before: bool = False


def held_by(served: State, ca: CaInfo, now: datetime) -> bool:
    """Whether `served` holds `ca` as a root signing may move to next: its current or
    staged CA, or a previous root not due to retire yet. A swap or a confirmation names
    a CA the state before it held so; a state restored over a newer one may name a root
    retired since, or due to retire."""
    if ca in (served.current, served.next):
        return True
    return any(p.ca == ca and (p.retire_at is None or now < p.retire_at) for p in served.previous)


@dataclass(frozen=True)
class Config:
    ca_lifetime: timedelta = timedelta(days=365)
    rotate_at: float = 0.5  # fraction of the CA's life after which a rotation starts
    propagation_delay: timedelta = timedelta(minutes=10)
    max_leaf_lifetime: timedelta = timedelta(hours=24)
    retire_margin: timedelta = timedelta(hours=1)
    keep_previous: int = 0
    # Gate on the injector's convergence report: "auto" when it exists, "true" always
    # (absent blocks), "false" never.
    wait_for_injector: str = "auto"

    def retire_at(self, swapped_at: datetime) -> datetime:
        return swapped_at + self.max_leaf_lifetime + self.retire_margin


# actions ------------------------------------------------------------------------------


# What `decide` returns: one small frozen record per outcome; the caller matches on the
# type, and mypy sees every field.
@dataclass(frozen=True)
class Bootstrap:
    """Make a root and create the Secret with it, keeping `adopt` (the roots already
    published for the signer, unexpired) as previous roots."""

    at: datetime
    adopt: tuple[CaInfo, ...] = ()
    revoked: frozenset[str] = frozenset()  # remembered by a replica: kept revoked


@dataclass(frozen=True)
class Confirm:
    at: datetime


@dataclass(frozen=True)
class Adopt:
    """Published roots of this signer that the state lacks, neither retired nor revoked:
    the Secret moved backwards (a restore, a re-applied copy, `previous.crt` edited
    away). They may still verify leaves in use, so they are kept as previous roots and
    retired like swapped-out ones. With `unconfirm`, the current CA is not published
    (the backup predates its retire): it signs only once it passes the gates again."""

    at: datetime
    roots: tuple[CaInfo, ...]
    unconfirm: bool = False


@dataclass(frozen=True)
class Stage:
    at: datetime
    requested: bool  # by `ca rotate` (else the point of the CA's life was reached)


@dataclass(frozen=True)
class Emergency:
    """`ca rotate --emergency`, or a state holding a root known to be revoked (a Secret
    restored from before an emergency): drop `revoke` from the state now, remembered as
    revoked. When it names the current CA, sign with a new CA as soon as the bundle read
    back holds it (no delay: the compromised root must stop at once); else no new CA."""

    at: datetime
    revoke: frozenset[str]

    def replaces(self, state: State) -> bool:
        """Whether a new CA is made (the current CA is revoked)."""
        return state.current.fingerprint in self.revoke


@dataclass(frozen=True)
class MarkPublished:
    at: datetime
    swap_not_before: datetime


@dataclass(frozen=True)
class RecordLifetime:
    """A replica signs (or may sign) with the current CA, or with a previous root whose
    retire is not scheduled yet, for longer leaves than recorded: record it on each, so
    their retire times count what was issued."""

    lifetime: timedelta


@dataclass(frozen=True)
class RecordInjectorSeen:
    """The injector's convergence report Lease exists: from now on its absence (a
    `kubectl delete lease`) holds a swap (`injector-report-missing`) instead of reading
    as "no injector"."""

    at: datetime


@dataclass(frozen=True)
class Swap:
    at: datetime


@dataclass(frozen=True)
class ScheduleRetire:
    """The swap is read back: replicas stop signing with the previous root within their
    watch's lag of this instant, so it may leave at `retire_at` (= `at` + the longest
    leaf lifetime + the margin)."""

    at: datetime
    retire_at: datetime


@dataclass(frozen=True)
class Retire:
    fingerprints: frozenset[str]


CALENDAR = "calendar"
"""A wait for a time the configuration sets: nothing to mend, never alerted on."""
PASSING = "passing"
"""A gate that opens by itself within seconds or the propagation delay: no Warning when
it starts; alerted on only if it lasts (the publisher, kubelet's refresh)."""
HELD = "held"
"""A gate held until something is mended (a replica, the injector, a clock, a CA): a
Warning Event `ManagedCAWaiting` when it starts, and alerted on when it lasts."""

WAIT_KINDS: dict[str, str] = {
    "bundle-not-published": PASSING,
    "no-replica-report": HELD,
    "replica-not-loaded": HELD,
    "replica-not-ready": HELD,
    "replica-not-signing": HELD,
    "injector-report-missing": HELD,
    "injector-report-stale": HELD,
    "injector-not-converged": HELD,
    "propagation-delay": PASSING,
    "next-not-valid-yet": HELD,
    "next-ca-expired": HELD,
    "rotation-point": CALENDAR,
    "retire-time": CALENDAR,
}
"""THE statement of which waits are held and which are the calendar: the narrator's
Warnings (`managedca.narrator`), the ManagedCAWaiting alert's regex
(config/prometheus/prometheus_rule.yaml, rendered by `alert_regex` and compared by a
test) and docs/managed-ca.md's reason table derive from it."""

WAIT_REASONS = tuple(WAIT_KINDS)
"""What a `Wait` can be for (`managed_ca_waiting{reason}`; docs/managed-ca.md lists each
with what to do)."""


def waits(kind: str) -> tuple[str, ...]:
    """The wait reasons of `kind` (CALENDAR, PASSING, HELD), in `WAIT_REASONS` order."""
    return tuple(r for r, k in WAIT_KINDS.items() if k == kind)


def alert_regex(also: tuple[str, ...] = ("sync-failing",)) -> str:
    """The reasons the ManagedCAWaiting alert never fires for: the calendar, and `also`
    (sync-failing has an alert of its own)."""
    return "|".join((*waits(CALENDAR), *also))


@dataclass(frozen=True)
class Wait:
    """Nothing to do before `until` (None: until something changes). `reason` is one of
    `WAIT_REASONS`; `why` says it in words, naming replicas or objects, for `ca status`,
    logs and Events; `objects` names the objects as (kind, name) for the metric (neither
    is part of equality: tables compare the reason)."""

    until: datetime | None
    reason: str
    why: str = field(default="", compare=False)
    # (kind, name) of each object named as holding it (at most the injector report's
    # first lagging names: `managed_ca_waiting_object`'s series are bounded by them).
    objects: tuple[tuple[str, str], ...] = field(default=(), compare=False)


Action = (
    Bootstrap
    | Adopt
    | Confirm
    | Emergency
    | RecordLifetime
    | RecordInjectorSeen
    | Stage
    | MarkPublished
    | Swap
    | ScheduleRetire
    | Retire
    | Wait
)


def rotation_due(current: CaInfo, config: Config) -> datetime:
    """The point of the current CA's life at which the next one is staged."""
    return current.not_before + current.lifetime * config.rotate_at


def decide(state: State | None, obs: Observations, now: datetime, config: Config) -> Action:
    if state is None:
        # Expired roots too: they verify nothing (and are retired at once), but that
        # anything was published means consumers hold a bundle without the new CA, so
        # it must be staged like a swap (the property model found a re-bootstrap after
        # the old root expired signing at once).
        adopt = tuple(sorted(c for c in obs.published_cas if c.fingerprint not in obs.revoked))
        return Bootstrap(now, adopt, obs.revoked)
    known = {a.fingerprint for a in state.anchors()}
    if state.emergency_requested_at is not None:
        # With any root this state holds that an earlier emergency revoked (a request
        # made on a restored Secret): it is dropped in the same write.
        asked = state.revoke or frozenset({state.current.fingerprint})
        return Emergency(now, asked | (known & obs.revoked))
    if known & obs.revoked:
        # A root revoked by an emergency this state predates (a restore): it is dropped
        # again now, and a revoked current CA is replaced as in the emergency.
        return Emergency(now, frozenset(known & obs.revoked))
    lost = tuple(
        sorted(
            c
            for c in obs.published_cas
            if c.fingerprint not in known | obs.revoked | set(state.retired) and now < c.not_after
        )
    )
    # A confirmed current CA the read-back lacks while other live roots of the signer
    # are published, or one the state this leader read before did not hold: the Secret
    # moved backwards past that CA's retire (a backup taken while a rotation was staged,
    # restored after it). Consumers dropped it: it signs again only through the gates of
    # a swap.
    unpublished = state.confirmed_at is not None and (
        obs.current_not_held_before
        or (
            state.current.fingerprint not in obs.published
            and bool(obs.published - obs.revoked - set(state.retired))
        )
    )
    if lost or unpublished:
        return Adopt(now, lost, unpublished)
    if state.confirmed_at is None:
        # A first CA (nothing before it to hand over from), or the CA an emergency made
        # (until it is confirmed: every later step clears the flag): signed with as soon
        # as the read-back holds it.
        if (not state.previous and state.next is None) or state.emergency:
            if state.current.fingerprint in obs.published:
                return Confirm(now)
            return Wait(
                None,
                "bundle-not-published",
                "the ClusterTrustBundle read back does not hold the new CA yet",
            )
        # Adopting roots already published (a deleted Secret, a move from file mode):
        # leaves signed with the new CA must verify for every consumer, so this is a
        # stage like any other: published, read back, the propagation delay, every
        # replica ready, and only then signing.
        return _gated(state, state.current, obs, now, config) or Confirm(now)
    # Every report, live or not: a replica that signed and died before this leader
    # looked still issued those leaves (its report stays until it is collected, an hour
    # on). No leaf outlives its CA (the signer caps notAfter at the CA's): a larger
    # reported lifetime says nothing more, and is not recorded.
    longest = min(
        max(
            [config.max_leaf_lifetime]
            + [r.max_lifetime for r in obs.reports if r.max_lifetime is not None]
        ),
        max(state.current.lifetime, config.max_leaf_lifetime),
    )
    # A previous root without a retire time may still sign too (a replica that has not
    # taken the swap up), and a report can land after its replica signed (it started
    # just before the swap, or its first write failed): its retire counts it as well.
    unscheduled = [p for p in state.previous if p.retire_at is None]
    if (
        state.issued_lifetime is None
        or state.issued_lifetime < longest
        or any(p.lifetime is None or p.lifetime < longest for p in unscheduled)
    ):
        return RecordLifetime(longest)
    if obs.injector is not None and not state.injector_seen and config.wait_for_injector != "false":
        return RecordInjectorSeen(now)
    if state.next is not None:
        return _staged(state, state.next, obs, now, config)
    if any(p.retire_at is None for p in state.previous):
        return _schedule_retire(state, obs, now, config)
    retired = retirable(state, now, config)
    if retired:
        held = _retire_unconfirmed(state, retired, obs, now, config)
        if held is not None:
            return held
        return Retire(retired)
    due = rotation_due(state.current, config)
    if state.rotate_requested_at is not None or now >= due:
        return Stage(now, requested=state.rotate_requested_at is not None and now < due)
    waits = [(due, "rotation-point", "the rotation point of the current CA's life")]
    waits += [
        (t, "retire-time", "the retire time of a previous root") for t in _retire_times(state, now)
    ]
    until, reason, why = min(waits)
    return Wait(until, reason, why)


def _staged(state: State, nxt: CaInfo, obs: Observations, now: datetime, config: Config) -> Action:
    return _gated(state, nxt, obs, now, config) or Swap(now)


def _gated(
    state: State, new: CaInfo, obs: Observations, now: datetime, config: Config
) -> Action | None:
    """What holds back signing with `new` (the staged CA, or a CA made by an adopting
    bootstrap), or None once every gate is open: the bundle read back holds every root
    of the state (recorded once, `MarkPublished`, with the instant the propagation
    delay ends); every live replica has loaded it and is ready to sign with `new`; the
    delay has passed; `new` is valid now and outlives the longest leaf."""
    anchors = {a.fingerprint for a in state.anchors()} - {p.ca.fingerprint for p in state.previous}
    if not anchors <= obs.published:
        return Wait(
            None,
            "bundle-not-published",
            "the ClusterTrustBundle read back does not hold both CAs yet",
        )
    if state.published_at is None or state.swap_not_before is None:
        # Rounded up: the Secret keeps whole seconds, and truncating would shorten it.
        return MarkPublished(now, _whole_second_up(now + config.propagation_delay))
    live = [r for r in obs.reports if r.live]
    if not live:
        return Wait(None, "no-replica-report", "no replica reports what it has loaded")
    behind = sorted(r.replica for r in live if new.fingerprint not in r.anchors)
    if behind:
        return Wait(
            None,
            "replica-not-loaded",
            f"replicas that have not loaded the new CA: {', '.join(behind)}",
        )
    unready = sorted(r.replica for r in live if r.ready != new.fingerprint)
    if unready:
        return Wait(
            None,
            "replica-not-ready",
            f"replicas not ready to sign with the new CA (they rejected it as a signing "
            f"set; see their material_invalid and logs): {', '.join(unready)}",
        )
    consumers = (
        None
        if state.consumers_skipped_for == new.fingerprint
        else _injector_gate(new, obs, now, config, seen=state.injector_seen)
    )
    if consumers is not None:
        return consumers
    if now < state.swap_not_before:
        return Wait(
            state.swap_not_before,
            "propagation-delay",
            "the propagation delay (kubelet's clusterTrustBundle refresh)",
        )
    if obs.published_for is not None and obs.published_for < config.propagation_delay:
        return Wait(
            now + config.propagation_delay - obs.published_for,
            "propagation-delay",
            "the propagation delay, as this leader has seen it pass (a new leader waits "
            "it again: the recorded time is another clock's)",
        )
    if now < new.not_before:
        return Wait(new.not_before, "next-not-valid-yet", "the new CA's notBefore")
    if now + config.max_leaf_lifetime >= new.not_after:
        return Wait(
            None,
            "next-ca-expired",
            f"the new CA expires at {new.not_after:%Y-%m-%dT%H:%M:%SZ}, within the longest "
            "leaf lifetime: it is never signed with (`ca rotate --emergency` replaces it)",
        )
    return None


INJECTOR_REPORT_RESTORE = (
    "kubectl apply -k config/injector (the chart: helm upgrade) puts the shipped Leases "
    "back; an injector removed for good: kubectl annotate secret <the CA Secret> "
    "service-serving-signer/ca-injector-report-seen-"
)
"""The one recovery of a deleted injector report Lease (docs/managed-ca.md)."""


def _injector_gate(
    new: CaInfo, obs: Observations, now: datetime, config: Config, *, seen: bool = False
) -> Wait | None:
    """The injected consumers (webhook caBundles, ConfigMap ca.crt, distributed copies)
    hold `new`, as the injector's convergence report says, and have for the propagation
    delay on this leader's clock (a Pod reads an injected ConfigMap through a volume
    kubelet rewrites on its resync); an absent or stale report blocks visibly, never
    silently. Absent counts as "no injector" only while no leader has ever seen the
    report Lease (`seen`: the Secret's record, or this leader's memory)."""
    view = obs.injector
    if config.wait_for_injector == "false":
        return None
    if view is None:
        if seen or obs.injector_seen:
            return Wait(
                None,
                "injector-report-missing",
                "the injector's convergence report Lease was seen and is gone (deleted?); "
                f"the injector cannot create it: {INJECTOR_REPORT_RESTORE}",
            )
        if config.wait_for_injector == "true":
            return Wait(
                None,
                "injector-report-missing",
                "no injector convergence report (an injector runs in this process, or "
                "--managed-ca-wait-for-injector=true)",
            )
        return None
    if not view.reported:
        return Wait(
            None,
            "injector-report-missing",
            "the injector's convergence report Lease exists (an injector is installed) but "
            "it has never reported: is the injector running and leading?",
        )
    if not view.live:
        return Wait(
            None,
            "injector-report-stale",
            "the injector's convergence report is not being renewed (injector down or stalled?)",
        )
    if new.fingerprint not in view.converged:
        named = f": {'; '.join(view.lagging)}" if view.lagging else ""
        return Wait(
            None,
            "injector-not-converged",
            f"objects the injector manages do not hold the new CA yet{named}",
            view.holding,
        )
    if obs.converged_for is not None and obs.converged_for < config.propagation_delay:
        return Wait(
            now + config.propagation_delay - obs.converged_for,
            "propagation-delay",
            "the propagation delay after the injector's report converged, as this leader "
            "has seen it (Pods read an injected ConfigMap through a volume kubelet "
            "rewrites on its resync)",
        )
    return None


def _schedule_retire(state: State, obs: Observations, now: datetime, config: Config) -> Action:
    """The retire clock of the roots swapped out starts only once every live replica
    signs with the current CA: until then a replica may still be issuing leaves under a
    previous root (it rejected the new set, or has not read the swap yet)."""
    live = [r for r in obs.reports if r.live]
    if not live:
        return Wait(None, "no-replica-report", "no replica reports what it signs with")
    behind = sorted(r.replica for r in live if r.signing != state.current.fingerprint)
    if behind:
        return Wait(
            None,
            "replica-not-signing",
            f"replicas not signing with the current CA yet: {', '.join(behind)}",
        )
    lifetimes = [  # bounded by the root's own life, whatever was recorded
        min(p.lifetime, p.ca.lifetime)
        for p in state.previous
        if p.retire_at is None and p.lifetime is not None
    ]
    longest = max([config.max_leaf_lifetime, *lifetimes])
    return ScheduleRetire(now, now + longest + config.retire_margin)


def _whole_second_up(t: datetime) -> datetime:
    whole = t.replace(microsecond=0)
    return whole if whole == t else whole + timedelta(seconds=1)


def _retire_unconfirmed(
    state: State, retired: frozenset[str], obs: Observations, now: datetime, config: Config
) -> Wait | None:
    """A retire cannot be undone, so the leader's wall clock alone does not decide it:

    - its wall clock when it started leading, advanced by its monotonic clock, is past
      each retire time (a clock stepped ahead while leading retires no earlier);
    - the API server's clock is past it too (a leader elected with its clock already
      ahead, whose monotonic clock cannot tell, retires no earlier; and no sooner than
      after a new election, which a wait of the retire margin would cost).

    None: confirmed (or not tracked)."""
    due = max(p.retire_at for p in state.previous if p.ca.fingerprint in retired and p.retire_at)
    if obs.led_for is not None and obs.led_since is not None:
        short = due - (obs.led_since + obs.led_for)
        if short > timedelta(0):
            return Wait(
                now + short,
                "retire-time",
                "the retire time of a previous root, as this leader's monotonic clock "
                "confirms it (its clock has not stepped ahead while leading)",
            )
    if obs.server_now is not None and obs.server_now < due:
        # Looked at again when the server's clock gets there (at most a margin away: an
        # unknown server clock is asked again).
        return Wait(
            now + min(due - obs.server_now, config.retire_margin),
            "retire-time",
            "the retire time of a previous root, as the API server's clock (the Date of "
            "its answers) confirms it (this leader's clock is not ahead of it)",
        )
    return None


def retirable(state: State, now: datetime, config: Config) -> frozenset[str]:
    """Previous roots to remove now: past their retire time and not among the newest
    `keep_previous` unexpired ones; an expired root verifies nothing and always goes."""
    kept = 0
    out = set()
    for prev in state.previous:  # newest first
        if prev.retire_at is None or now < prev.retire_at:
            continue
        expired = now >= prev.ca.not_after
        if not expired and kept < config.keep_previous:
            kept += 1
            continue
        out.add(prev.ca.fingerprint)
    return frozenset(out)


def _retire_times(state: State, now: datetime) -> Iterable[datetime]:
    """When a previous root can next leave: its retire time, or (kept as history past
    it) its expiry."""
    for prev in state.previous:
        if prev.retire_at is not None:
            yield prev.retire_at if now < prev.retire_at else prev.ca.not_after
