"""What one decided action writes, in one pure call: the new state (`apply`, the one
transition function), the
Secret's content (the keys move on a swap or an emergency), the Event's reason and note,
and the rotation step durations it completes. `take(stored, action, published, make, now)`
calls `make` (the one impure part: a new key) only when the action needs a new CA;
`now` is the step's clock, for the durations; `info` reads a made certificate (the property
model's CAs are names, not certificates).

The controller (`managedca.controller`) encodes and writes what this returns; the unit
tests and the property model call it directly, so what the model checks is what the
controller writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from kube.times import format_time
from managedca import decide as d
from managedca.codec import Stored, StoreError, ca_info

MakeCa = Callable[[datetime], tuple[bytes, bytes]]
"""`make_ca(now) -> (key PEM, certificate PEM)`: a new self-signed root."""


@dataclass(frozen=True)
class Step:
    """What one action writes: the state, the PEMs behind it and its keys (`codec.encode`
    takes them), the Event (reason, note; fingerprints and times, never a key), and the
    step durations it completes (`metrics.ManagedCAMetrics.durations`). `create`: the
    Secret does not exist yet (a bootstrap)."""

    state: d.State
    certs: Mapping[str, bytes]
    current_key: bytes = field(repr=False)
    next_key: bytes | None = field(repr=False)
    reason: str
    note: str
    durations: tuple[tuple[str, float], ...] = ()
    create: bool = False


def needs_key(state: d.State | None, action: d.Action) -> bool:
    """Whether `action` makes a new CA (a bootstrap, a stage, an emergency that replaces
    the current CA)."""
    if isinstance(action, d.Bootstrap | d.Stage):
        return True
    return isinstance(action, d.Emergency) and state is not None and action.replaces(state)


def take(
    stored: Stored | None,
    action: d.Action,
    published: Mapping[str, bytes],
    make: MakeCa,
    now: datetime,
    info: Callable[[bytes], d.CaInfo] = ca_info,
) -> Step | None:
    """The `Step` for `action` on `stored` (None for a `Wait`, or when there is nothing to
    act on). `published`: fingerprint -> PEM of each root in the bundles read back (what
    a bootstrap or an adoption keeps). Raises `StoreError` for a swap whose next key is
    missing (the swap is held until the Secret is mended)."""
    state = stored.state if stored is not None else None
    if isinstance(action, d.Wait) or (state is None) != isinstance(action, d.Bootstrap):
        return None
    certs = dict(stored.certs) if stored is not None else {}
    current_key = stored.current_key if stored is not None else b""
    next_key = stored.next_key if stored is not None else None
    made = None
    if isinstance(action, d.Bootstrap | d.Stage | d.Emergency) and needs_key(state, action):
        key, cert = make(action.at)
        made = info(cert)
        certs[made.fingerprint] = cert
        if isinstance(action, d.Stage):
            next_key = key
        else:
            current_key, next_key = key, None
    new = apply(state, action, made)
    assert new is not None
    for root in _kept(new, certs):
        certs[root] = published[root]
    if isinstance(action, d.Swap):
        if next_key is None:
            raise StoreError(
                "key next.crt without next.key; the swap is held until it is mended (or "
                "`ca rotate --emergency`)"
            )
        current_key, next_key = next_key, None
    if new.next is None:
        next_key = None  # a staged CA an emergency revoked: its key goes with it
    reason, note = describe(state, new, action)
    return Step(
        new,
        {a.fingerprint: certs[a.fingerprint] for a in new.anchors()},
        current_key,
        next_key,
        reason,
        note,
        _durations(state, action, now),
        create=state is None,
    )


def _kept(state: d.State, certs: Mapping[str, bytes]) -> list[str]:
    """Roots the new state keeps that the Secret did not hold (adopted from the bundle)."""
    return [a.fingerprint for a in state.anchors() if a.fingerprint not in certs]


def _durations(
    state: d.State | None, action: d.Action, now: datetime
) -> tuple[tuple[str, float], ...]:
    """swap: stage → swap; retire: swap → retire."""
    start, step = None, ""
    if isinstance(action, d.Swap) and state is not None:
        start, step = state.staged_at, "swap"
    elif isinstance(action, d.Retire) and state is not None:
        start, step = state.swapped_at, "retire"
    return ((step, max(0.0, (now - start).total_seconds())),) if start is not None else ()


def describe(state: d.State | None, new: d.State, action: d.Action) -> tuple[str, str]:
    """The Event's reason and note for a step (fingerprints and times, never a key)."""
    if isinstance(action, d.Bootstrap):
        adopted = len(new.previous)
        return (
            "ManagedCACreated",
            f"created the managed CA {new.current.fingerprint} (expires "
            f"{format_time(new.current.not_after)})"
            + (
                f"; kept {adopted} root(s) already published; it signs only after the "
                "propagation delay, like a swap"
                if adopted
                else ""
            ),
        )
    assert state is not None
    if isinstance(action, d.Confirm):
        return (
            "ManagedCAConfirmed",
            f"the ClusterTrustBundle holds CA {state.current.fingerprint}; signing with it",
        )
    if isinstance(action, d.Adopt) and not action.roots:
        return (
            "ManagedCAUnconfirmed",
            f"the current CA {state.current.fingerprint} is not in the ClusterTrustBundle "
            "read back while other roots are, or the state before did not hold it (the "
            "Secret was restored from an older backup?): it signs again only after the "
            "gates of a swap",
        )
    if isinstance(action, d.Adopt):
        return (
            "ManagedCARootsAdopted",
            "published roots the Secret lacks (restored from an older backup, or edited?) "
            f"kept as previous roots: {', '.join(c.fingerprint for c in action.roots)}"
            + (
                "; the current CA is not published: it signs again only after the "
                "propagation delay, like a swap"
                if action.unconfirm
                else ""
            ),
        )
    if isinstance(action, d.Stage):
        assert new.next is not None
        why = "on request (ca rotate)" if action.requested else "at the rotation point"
        return (
            "ManagedCAStaged",
            f"staged the next CA {new.next.fingerprint} (expires "
            f"{format_time(new.next.not_after)}) {why}; publishing old + new",
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
            f"{state.current.fingerprint}"
            + (
                " and the previous roots not scheduled to retire yet"
                if any(p.retire_at is None for p in state.previous)
                else ""
            )
            + ": each stays published that long after it is swapped out, whatever "
            "--max-certificate-lifetime is then",
        )
    if isinstance(action, d.RecordInjectorSeen):
        return (
            "ManagedCAInjectorReportSeen",
            "the injector's convergence report Lease exists: from now on a missing one "
            "holds the swap (injector-report-missing) instead of reading as no injector",
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
            "with the new CA, plus the longest leaf lifetime and the margin"
            + (f"; {skipped_note(state)}" if skipped(state) else ""),
        )
    if isinstance(action, d.ScheduleRetire):
        return (
            "ManagedCARetireScheduled",
            f"every replica signs with the current CA; the previous root(s) leave the "
            f"bundle at {format_time(action.retire_at)}",
        )
    assert isinstance(action, d.Retire), action
    return (
        "ManagedCARetired",
        f"removed from the bundle: {', '.join(sorted(action.fingerprints))}",
    )


# transitions (what each action writes) ------------------------------------------------


def apply(state: d.State | None, action: d.Action, made: d.CaInfo | None = None) -> d.State | None:
    """The state after `action` (what the controller writes, and what the property model
    runs): one transition function. `made` is the CA the controller made for a
    `Bootstrap` or a `Stage` (making a key is the one impure part). A `Wait` returns
    `state` unchanged."""
    if isinstance(action, d.Bootstrap):
        if made is None:
            raise ValueError("a bootstrap needs the CA made for it")
        previous = tuple(
            d.Previous(ca, action.at, None)
            for ca in action.adopt
            if ca.fingerprint != made.fingerprint
        )
        return d.State(current=made, previous=previous, revoked=action.revoked)
    if isinstance(action, d.Wait):
        return state
    if state is None:
        raise ValueError(f"{type(action).__name__} needs a state")
    if isinstance(action, d.Emergency):
        return emergency(state, made, action)
    if isinstance(action, d.Confirm):
        return confirmed(state, action.at)
    if isinstance(action, d.Adopt):
        return adopted(state, action)
    if isinstance(action, d.Stage):
        if made is None:
            raise ValueError("a stage needs the CA made for it")
        return staged(state, made, action.at)
    if isinstance(action, d.RecordLifetime):
        return lifetime_recorded(state, action.lifetime)
    if isinstance(action, d.RecordInjectorSeen):
        return replace(state, injector_seen=True)
    if isinstance(action, d.MarkPublished):
        return marked_published(state, action.at, action.swap_not_before)
    if isinstance(action, d.Swap):
        return swapped(state, action.at)
    if isinstance(action, d.ScheduleRetire):
        return retire_scheduled(state, action.retire_at)
    return retired(state, action.fingerprints)


def bootstrapped(ca: d.CaInfo) -> d.State:
    return d.State(current=ca)


def confirmed(state: d.State, at: datetime) -> d.State:
    # The emergency fast path was for this CA until it is confirmed: not after.
    return replace(state, confirmed_at=at, emergency=False)


def staged(state: d.State, nxt: d.CaInfo, at: datetime) -> d.State:
    if state.next is not None:
        raise ValueError("a next CA is already staged")
    return replace(
        state,
        next=nxt,
        staged_at=at,
        published_at=None,
        swap_not_before=None,
        rotate_requested_at=None,
        emergency=False,  # a scheduled CA: it passes every gate
    )


def lifetime_recorded(state: d.State, lifetime: timedelta) -> d.State:
    """The current CA, and every previous root whose retire is not scheduled yet, may
    have signed leaves of `lifetime`: never lowered."""
    return replace(
        state,
        issued_lifetime=max(lifetime, state.issued_lifetime or lifetime),
        previous=tuple(
            replace(p, lifetime=max(lifetime, p.lifetime or lifetime)) if p.retire_at is None else p
            for p in state.previous
        ),
    )


def marked_published(state: d.State, at: datetime, swap_not_before: datetime) -> d.State:
    return replace(state, published_at=at, swap_not_before=swap_not_before)


def swapped(state: d.State, at: datetime) -> d.State:
    if state.next is None:
        raise ValueError("no next CA to swap in")
    # The last rotation's stage and publish times stay, for `ca status` and the record.
    # The retire time is set once the swap is read back (`retire_scheduled`).
    prev = d.Previous(state.current, at, None, state.issued_lifetime)
    return replace(
        state,
        current=state.next,
        next=None,
        previous=(prev, *state.previous),
        swapped_at=at,
        rotate_requested_at=None,
        issued_lifetime=None,  # recorded again for the new current CA
        emergency=False,  # the swapped-in CA went through every gate
    )


def retire_scheduled(state: d.State, retire_at: datetime) -> d.State:
    """Every previous root without a retire time gets `retire_at`."""
    return replace(
        state,
        previous=tuple(
            p if p.retire_at is not None else replace(p, retire_at=retire_at)
            for p in state.previous
        ),
    )


RETIRED_KEPT = 16


def retired(state: d.State, fingerprints: frozenset[str]) -> d.State:
    return replace(
        state,
        previous=tuple(p for p in state.previous if p.ca.fingerprint not in fingerprints),
        retired=(*sorted(fingerprints), *state.retired)[:RETIRED_KEPT],
    )


def adopted(state: d.State, action: d.Adopt) -> d.State:
    """`action.roots` become previous roots, their retire time scheduled like a swapped-out
    root's (`ScheduleRetire`: once every replica signs with the current CA)."""
    previous = (*state.previous, *(d.Previous(ca, action.at, None) for ca in action.roots))
    # A restored state is a phase, not the truth: whatever made its current CA (an
    # emergency included), it signs again only through the gates of a swap.
    if action.unconfirm:
        return replace(
            state,
            previous=previous,
            confirmed_at=None,
            published_at=None,
            swap_not_before=None,
            emergency=False,
        )
    return replace(state, previous=previous, emergency=False)


def emergency(state: d.State, made: d.CaInfo | None, action: d.Emergency) -> d.State:
    """The revoked roots leave the state, remembered as revoked. When the current CA is
    one, `made` signs from its confirmation on, with no gate but the read-back, and a
    staged CA (its key sat beside the compromised one) is revoked too; the other roots
    stay until their leaves expire. Else the current CA stays, and a staged one unless
    it is named."""
    kept = tuple(p for p in state.previous if p.ca.fingerprint not in action.revoke)
    revoked = state.revoked | action.revoke
    if not action.replaces(state):
        # An unconfirmed CA left with no root but revoked ones to stage behind (an
        # adopting bootstrap whose adopted roots were all revoked) signs as an emergency
        # CA does: once published, nothing trusted being left to hand over from.
        alone = state.confirmed_at is None and bool(state.previous) and not kept
        after = replace(state, previous=kept, revoked=revoked, emergency_requested_at=None)
        after = replace(after, revoke=frozenset(), emergency=state.emergency or alone)
        if state.next is not None and state.next.fingerprint in action.revoke:
            after = replace(
                after, next=None, staged_at=None, published_at=None, swap_not_before=None
            )
        return after
    if made is None:
        raise ValueError("an emergency rotation of the current CA needs the CA made for it")
    staged = frozenset({state.next.fingerprint}) if state.next is not None else frozenset()
    return d.State(
        current=made,
        previous=kept,
        revoked=revoked | staged,
        emergency=True,
        retired=state.retired,
        injector_seen=state.injector_seen,
    )


def skipped(state: d.State) -> bool:
    """The swap to the staged CA does not wait for the injector (`ca skip-consumers`)."""
    return state.next is not None and state.consumers_skipped_for == state.next.fingerprint


def skipped_note(state: d.State) -> str:
    """Who skipped the consumers' gate of this swap, as the leader states it."""
    by = state.consumers_skipped_by or (
        "unknown: the annotation was not written by `ca skip-consumers`"
    )
    return f"the injector's gate was skipped (ca-consumers-skipped-for), by {by}"


def rotate_requested(state: d.State, at: datetime) -> d.State:
    return replace(state, rotate_requested_at=at)
