"""What the managed CA does next, from its persisted state, what the cluster has been
observed to hold, and the time (pure: no client, no clock, no key).

The state machine (docs/managed-ca.md), one action per call, checked in this order:

1. `Bootstrap` — no CA Secret exists: make a root and create the Secret (a conditional
   create: of two replicas racing, one wins and the other adopts its CA).
2. `Confirm` — the CA was just made and the ClusterTrustBundle read back does not hold
   it yet: `Wait`; once it does, record that it is published. Nothing is signed with a
   CA before that record (the signing source refuses an unconfirmed CA), so no leaf is
   ever signed by a CA absent from the published bundle, from the very first one.
3. *Staged* (a next CA exists) — `Swap` only when, at the same time:
   the bundle read back holds the current and the next CA; that was first seen at a
   recorded instant (`MarkPublished` records it, and the instant the propagation delay —
   kubelet's `clusterTrustBundle` projection refresh — ends, so a changed flag does not
   move a rotation under way); every replica whose report is live has loaded a bundle
   holding the next CA; that instant has passed; and the next CA is valid now.
   Otherwise `Wait`, saying for what and until when.
4. *Stable* — `ScheduleRetire` when the last swap has just been read back (its previous
   root has no retire time yet: the time it was read back + the longest leaf lifetime
   issued + a margin); `Retire` previous roots whose retire time has passed, except the
   newest `keep_previous` that have not expired (a CA history); else `Stage` when
   `ca rotate` asked for it or the configured point of the current CA's life is reached;
   else `Wait` until the earliest of those instants.

Why the invariants hold (tests/unit/managedca/test_properties.py checks them over
crashes, leader changes, lost and stale writes and clock steps):

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
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

PHASE_BOOTSTRAPPING = "Bootstrapping"
PHASE_STABLE = "Stable"
PHASE_STAGED = "Staged"
PHASE_RETIRING = "Retiring"
PHASES = (PHASE_BOOTSTRAPPING, PHASE_STABLE, PHASE_STAGED, PHASE_RETIRING)


@dataclass(frozen=True)
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
class Report:
    """One replica's report of the bundle it has loaded (its Lease)."""

    replica: str
    anchors: frozenset[str]  # fingerprints
    renewed_at: datetime
    duration: timedelta

    def live(self, now: datetime) -> bool:
        return now < self.renewed_at + self.duration


@dataclass(frozen=True)
class Observations:
    published: frozenset[str]  # fingerprints of the anchors in the bundle read back
    reports: tuple[Report, ...] = ()


@dataclass(frozen=True)
class Config:
    ca_lifetime: timedelta = timedelta(days=365)
    rotate_at: float = 0.5  # fraction of the CA's life after which a rotation starts
    propagation_delay: timedelta = timedelta(minutes=10)
    max_leaf_lifetime: timedelta = timedelta(hours=24)
    retire_margin: timedelta = timedelta(hours=1)
    keep_previous: int = 0

    def retire_at(self, swapped_at: datetime) -> datetime:
        return swapped_at + self.max_leaf_lifetime + self.retire_margin


# actions ------------------------------------------------------------------------------


# What `decide` returns: one small frozen record per outcome; the caller matches on the
# type, and mypy sees every field.
@dataclass(frozen=True)
class Bootstrap:
    pass


@dataclass(frozen=True)
class Confirm:
    at: datetime


@dataclass(frozen=True)
class Stage:
    requested: bool  # by `ca rotate` (else the point of the CA's life was reached)


@dataclass(frozen=True)
class MarkPublished:
    at: datetime
    swap_not_before: datetime


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


@dataclass(frozen=True)
class Wait:
    """Nothing to do before `until` (None: until something changes); `why` is for
    `ca status`, logs and the Event stream."""

    until: datetime | None
    why: str


Action = Bootstrap | Confirm | Stage | MarkPublished | Swap | ScheduleRetire | Retire | Wait


def rotation_due(current: CaInfo, config: Config) -> datetime:
    """The point of the current CA's life at which the next one is staged."""
    return current.not_before + current.lifetime * config.rotate_at


def decide(state: State | None, obs: Observations, now: datetime, config: Config) -> Action:
    if state is None:
        return Bootstrap()
    if state.confirmed_at is None:
        if state.current.fingerprint in obs.published:
            return Confirm(now)
        return Wait(None, "the ClusterTrustBundle read back does not hold the new CA yet")
    if state.next is not None:
        return _staged(state, state.next, obs, now, config)
    if any(p.retire_at is None for p in state.previous):
        return ScheduleRetire(now, config.retire_at(now))
    retired = retirable(state, now, config)
    if retired:
        return Retire(retired)
    due = rotation_due(state.current, config)
    if state.rotate_requested_at is not None or now >= due:
        return Stage(requested=state.rotate_requested_at is not None and now < due)
    waits = [(due, "the rotation point of the current CA's life")]
    waits += [(t, "the retire time of a previous root") for t in _retire_times(state, now)]
    until, why = min(waits)
    return Wait(until, why)


def _staged(state: State, nxt: CaInfo, obs: Observations, now: datetime, config: Config) -> Action:
    both = {state.current.fingerprint, nxt.fingerprint}
    if not both <= obs.published:
        return Wait(None, "the ClusterTrustBundle read back does not hold both CAs yet")
    if state.published_at is None or state.swap_not_before is None:
        return MarkPublished(now, now + config.propagation_delay)
    live = [r for r in obs.reports if r.live(now)]
    behind = sorted(r.replica for r in live if nxt.fingerprint not in r.anchors)
    if not live:
        return Wait(None, "no replica reports the bundle it has loaded")
    if behind:
        return Wait(None, f"replicas that have not loaded the next CA: {', '.join(behind)}")
    if now < state.swap_not_before:
        return Wait(
            state.swap_not_before, "the propagation delay (kubelet's clusterTrustBundle refresh)"
        )
    if now < nxt.not_before:
        return Wait(nxt.not_before, "the next CA's notBefore")
    return Swap(now)


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


# transitions (what each action writes) ------------------------------------------------


def bootstrapped(ca: CaInfo) -> State:
    return State(current=ca)


def confirmed(state: State, at: datetime) -> State:
    return replace(state, confirmed_at=at)


def staged(state: State, nxt: CaInfo, at: datetime) -> State:
    if state.next is not None:
        raise ValueError("a next CA is already staged")
    return replace(
        state,
        next=nxt,
        staged_at=at,
        published_at=None,
        swap_not_before=None,
        rotate_requested_at=None,
    )


def marked_published(state: State, at: datetime, swap_not_before: datetime) -> State:
    return replace(state, published_at=at, swap_not_before=swap_not_before)


def swapped(state: State, at: datetime) -> State:
    if state.next is None:
        raise ValueError("no next CA to swap in")
    # The last rotation's stage and publish times stay, for `ca status` and the record.
    # The retire time is set once the swap is read back (`retire_scheduled`).
    prev = Previous(state.current, at, None)
    return replace(
        state,
        current=state.next,
        next=None,
        previous=(prev, *state.previous),
        swapped_at=at,
        rotate_requested_at=None,
    )


def retire_scheduled(state: State, retire_at: datetime) -> State:
    """Every previous root without a retire time gets `retire_at`."""
    return replace(
        state,
        previous=tuple(
            p if p.retire_at is not None else replace(p, retire_at=retire_at)
            for p in state.previous
        ),
    )


def retired(state: State, fingerprints: frozenset[str]) -> State:
    return replace(
        state, previous=tuple(p for p in state.previous if p.ca.fingerprint not in fingerprints)
    )


def rotate_requested(state: State, at: datetime) -> State:
    return replace(state, rotate_requested_at=at)
