"""The managed CA's decision over a table of (state, observations, now)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from managedca.decide import (
    Bootstrap,
    CaInfo,
    Config,
    Confirm,
    Emergency,
    InjectorView,
    MarkPublished,
    Observations,
    Previous,
    RecordInjectorSeen,
    RecordLifetime,
    ReplicaView,
    Retire,
    ScheduleRetire,
    Stage,
    State,
    Swap,
    Wait,
    decide,
)
from managedca.step import apply, marked_published, retire_scheduled, staged, swapped

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)
DAY = timedelta(days=1)
LIFE = 24 * H  # the longest leaf lifetime recorded for the current CA
CFG = Config(
    ca_lifetime=timedelta(days=100),
    rotate_at=0.5,
    propagation_delay=timedelta(minutes=10),
    max_leaf_lifetime=24 * H,
    retire_margin=H,
)
A = CaInfo("aa", T0, T0 + timedelta(days=100))
B = CaInfo("bb", T0 + DAY, T0 + timedelta(days=101))
C = CaInfo("cc", T0 - timedelta(days=100), T0 + timedelta(days=1))


def report(
    *fps: str,
    name: str = "r1",
    live: bool = True,
    signing: str | None = "aa",
    ready: str | None = "bb",
) -> ReplicaView:
    """A replica's report: the anchors it has loaded, the CA it signs with, the next CA it
    has validated as ready to sign with (by default: signs with A, ready with B)."""
    return ReplicaView(name, frozenset(fps), signing=signing, ready=ready, live=live)


STABLE = State(current=A, confirmed_at=T0, issued_lifetime=LIFE)
STAGED = staged(STABLE, B, T0 + 2 * DAY)
PUBLISHED = marked_published(STAGED, T0 + 2 * DAY, T0 + 2 * DAY + timedelta(minutes=10))
JUST_SWAPPED = replace(swapped(PUBLISHED, T0 + 3 * DAY), issued_lifetime=LIFE)
SWAPPED = retire_scheduled(JUST_SWAPPED, CFG.retire_at(T0 + 3 * DAY))


# A re-bootstrap (the Secret deleted) adopting the published root A, B made anew.
ADOPTING = State(current=CaInfo("bb", T0, B.not_after), previous=(Previous(A, T0, None),))
ADOPTING_PUBLISHED = marked_published(ADOPTING, T0 + H, T0 + H + timedelta(minutes=10))


def obs(*fps: str, reports: tuple[ReplicaView, ...] = ()) -> Observations:
    return Observations(frozenset(fps), reports)


LIVE_SWAPPED = (report("aa", "bb", signing="bb", ready=None),)
# B signing, A retired: what every replica reports once a swap is taken up.


CASES = [
    ("no secret bootstraps", None, obs(), T0, Bootstrap(T0)),
    (
        "a new CA waits until the bundle read back holds it",
        State(current=A),
        obs(),
        T0,
        Wait(None, "bundle-not-published"),
    ),
    ("a published new CA is confirmed", State(current=A), obs("aa"), T0, Confirm(T0)),
    (
        "an adopting bootstrap records the first read-back holding the new CA",
        ADOPTING,
        obs("aa", "bb", reports=(report("aa", "bb", signing="aa", ready="bb"),)),
        T0 + H,
        MarkPublished(T0 + H, T0 + H + timedelta(minutes=10)),
    ),
    (
        "an adopting bootstrap waits for the propagation delay before it signs",
        ADOPTING_PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb", signing="aa", ready="bb"),)),
        T0 + H + timedelta(minutes=5),
        Wait(T0 + H + timedelta(minutes=10), "propagation-delay"),
    ),
    (
        "an adopting bootstrap waits for a replica not ready to sign with the new CA",
        ADOPTING_PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb", signing="aa", ready=None),)),
        T0 + 2 * H,
        Wait(None, "replica-not-ready"),
    ),
    (
        "an adopting bootstrap signs once published for the propagation delay",
        ADOPTING_PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb", signing="aa", ready="bb"),)),
        T0 + 2 * H,
        Confirm(T0 + 2 * H),
    ),
    (
        "a young CA waits for its rotation point",
        STABLE,
        obs("aa"),
        T0 + DAY,
        Wait(T0 + 50 * DAY, "rotation-point"),
    ),
    (
        "the rotation point stages",
        STABLE,
        obs("aa"),
        T0 + 50 * DAY,
        Stage(T0 + 50 * DAY, requested=False),
    ),
    (
        "ca rotate stages early",
        State(current=A, confirmed_at=T0, issued_lifetime=LIFE, rotate_requested_at=T0 + DAY),
        obs("aa"),
        T0 + DAY,
        Stage(T0 + DAY, requested=True),
    ),
    (
        "staged waits for the bundle to hold both",
        STAGED,
        obs("aa", reports=(report("aa", "bb"),)),
        T0 + 2 * DAY,
        Wait(None, "bundle-not-published"),
    ),
    (
        "the first read-back holding both is recorded",
        STAGED,
        obs("aa", "bb"),
        T0 + 2 * DAY + H,
        MarkPublished(T0 + 2 * DAY + H, T0 + 2 * DAY + H + timedelta(minutes=10)),
    ),
    (
        "swap waits for a replica that has not loaded the next CA",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb"), report("aa", name="r2", ready=None))),
        T0 + 3 * DAY,
        Wait(None, "replica-not-loaded"),
    ),
    (
        "swap waits for a replica that loaded the next CA but rejected it as a signing set",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb"), report("aa", "bb", name="r2", ready=None))),
        T0 + 3 * DAY,
        Wait(None, "replica-not-ready"),
    ),
    (
        "swap waits for a replica ready to sign with another CA than the staged one",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb", ready="zz"),)),
        T0 + 3 * DAY,
        Wait(None, "replica-not-ready"),
    ),
    (
        "a report no longer live does not hold the swap",
        PUBLISHED,
        obs(
            "aa",
            "bb",
            reports=(report("aa", "bb"), report("aa", name="gone", ready=None, live=False)),
        ),
        T0 + 3 * DAY,
        Swap(T0 + 3 * DAY),
    ),
    (
        "swap waits with no live report at all",
        PUBLISHED,
        obs("aa", "bb"),
        T0 + 3 * DAY,
        Wait(None, "no-replica-report"),
    ),
    (
        "swap waits for the propagation delay",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb"),)),
        T0 + 2 * DAY + timedelta(minutes=5),
        Wait(T0 + 2 * DAY + timedelta(minutes=10), "propagation-delay"),
    ),
    (
        "swap waits for a next CA that is not valid yet (clock stepped back)",
        State(
            current=A,
            confirmed_at=T0,
            issued_lifetime=LIFE,
            next=B,
            staged_at=T0,
            published_at=T0,
            swap_not_before=T0,
        ),
        obs("aa", "bb", reports=(report("aa", "bb"),)),
        T0 + 12 * H,
        Wait(B.not_before, "next-not-valid-yet"),
    ),
    (
        "an expired next CA is never swapped in",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb"),)),
        B.not_after + H,
        Wait(None, "next-ca-expired"),
    ),
    (
        "a next CA that expires within the longest leaf lifetime is never swapped in",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb"),)),
        B.not_after - H,
        Wait(None, "next-ca-expired"),
    ),
    (
        "the retire clock waits for a replica still signing with the previous root",
        JUST_SWAPPED,
        obs("aa", "bb", reports=(*LIVE_SWAPPED, report("aa", "bb", name="r2", signing="aa"))),
        T0 + 3 * DAY + 6 * H,
        Wait(None, "replica-not-signing"),
    ),
    (
        "the retire clock waits with no live report at all",
        JUST_SWAPPED,
        obs("aa", "bb"),
        T0 + 3 * DAY + 6 * H,
        Wait(None, "no-replica-report"),
    ),
    (
        "the retire clock starts once every live replica signs with the new CA",
        JUST_SWAPPED,
        obs("aa", "bb", reports=LIVE_SWAPPED),
        T0 + 3 * DAY + 6 * H,
        ScheduleRetire(T0 + 3 * DAY + 6 * H, CFG.retire_at(T0 + 3 * DAY + 6 * H)),
    ),
    (
        "roots adopted at bootstrap first record the longest lifetime that may sign with them",
        State(
            current=B,
            confirmed_at=T0 + 6 * H,
            issued_lifetime=LIFE,
            previous=(Previous(A, T0, None),),
        ),
        obs("aa", "bb", reports=LIVE_SWAPPED),
        T0 + 6 * H,
        RecordLifetime(LIFE),
    ),
    (
        "roots adopted at bootstrap get their retire time once the new CA signs everywhere",
        State(
            current=B,
            confirmed_at=T0 + 6 * H,
            issued_lifetime=LIFE,
            previous=(Previous(A, T0, None, LIFE),),
        ),
        obs("aa", "bb", reports=LIVE_SWAPPED),
        T0 + 6 * H,
        ScheduleRetire(T0 + 6 * H, CFG.retire_at(T0 + 6 * H)),
    ),
    (
        "a previous root stays until its retire time",
        SWAPPED,
        obs("aa", "bb"),
        T0 + 4 * DAY,
        Wait(T0 + 4 * DAY + H, "retire-time"),
    ),
    (
        "a previous root is retired at its retire time",
        SWAPPED,
        obs("aa", "bb"),
        T0 + 4 * DAY + H,
        Retire(frozenset({"aa"})),
    ),
    (
        "an expired previous root is retired even when history is kept",
        State(
            current=B,
            confirmed_at=T0,
            issued_lifetime=LIFE,
            previous=(Previous(C, T0 - 2 * DAY, T0 - DAY),),
        ),
        obs("bb", "cc"),
        T0 + 2 * DAY,
        Retire(frozenset({"cc"})),
    ),
]


@pytest.mark.parametrize(
    ("state", "observed", "now", "expected"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decision_table(
    state: State | None, observed: Observations, now: datetime, expected: object
) -> None:
    assert decide(state, observed, now, CFG) == expected


def test_keeps_the_newest_unexpired_previous_root_as_history() -> None:
    keep = Config(**{**CFG.__dict__, "keep_previous": 1})
    state = State(
        current=B,
        confirmed_at=T0,
        issued_lifetime=LIFE,
        previous=(
            Previous(A, T0 + DAY, T0 + 2 * DAY),
            Previous(CaInfo("old", T0, T0 + 30 * DAY), T0, T0 + DAY),
        ),
    )
    assert decide(state, obs("aa", "bb", "old"), T0 + 3 * DAY, keep) == Retire(frozenset({"old"}))
    kept = State(current=B, confirmed_at=T0, issued_lifetime=LIFE, previous=state.previous[:1])
    assert decide(kept, obs("aa", "bb"), T0 + 3 * DAY, keep) == Wait(
        T0 + 50 * DAY + DAY, "rotation-point"
    )


READY = obs("aa", "bb", reports=(report("aa", "bb"),))
SWAP_TIME = T0 + 3 * DAY


def _with_injector(view: InjectorView | None) -> Observations:
    return Observations(READY.published, READY.reports, injector=view)


# The injector's report Lease has been seen (and recorded on the Secret).
SEEN = replace(PUBLISHED, injector_seen=True)


INJECTOR_CASES = [
    ("auto, no report: not gated", "auto", None, Swap(SWAP_TIME)),
    ("true, no report: held", "true", None, Wait(None, "injector-report-missing")),
    (
        "a report not renewing holds the swap",
        "auto",
        InjectorView(False, frozenset({"bb"})),
        Wait(None, "injector-report-stale"),
    ),
    (
        "a live report without the next CA converged holds it",
        "auto",
        InjectorView(True, frozenset({"aa"})),
        Wait(None, "injector-not-converged"),
    ),
    (
        "a live report with every object holding the next CA lets it go",
        "auto",
        InjectorView(True, frozenset({"aa", "bb"})),
        Swap(SWAP_TIME),
    ),
    (
        "false: a stale report is not looked at",
        "false",
        InjectorView(False, frozenset()),
        Swap(SWAP_TIME),
    ),
    (
        "auto, the shipped report Lease never written (an injector is installed): held",
        "auto",
        InjectorView(True, frozenset(), reported=False),
        Wait(None, "injector-report-missing"),
    ),
]


def test_a_held_swap_names_the_consumers_that_hold_it() -> None:
    view = InjectorView(
        True,
        frozenset({"aa"}),
        lagging=("ValidatingWebhookConfiguration hooks-a (blocked: admission denied)",),
    )
    action = decide(SEEN, _with_injector(view), SWAP_TIME, CFG)
    assert isinstance(action, Wait) and action.reason == "injector-not-converged"
    assert "ValidatingWebhookConfiguration hooks-a (blocked: admission denied)" in action.why


def test_the_report_lease_never_written_says_so() -> None:
    view = InjectorView(True, frozenset(), reported=False)
    action = decide(SEEN, _with_injector(view), SWAP_TIME, CFG)
    assert isinstance(action, Wait)
    assert "has never reported" in action.why


@pytest.mark.parametrize(
    ("mode", "view", "expected"),
    [c[1:] for c in INJECTOR_CASES],
    ids=[c[0] for c in INJECTOR_CASES],
)
def test_the_swap_waits_for_the_injectors_convergence_report(
    mode: str, view: InjectorView | None, expected: object
) -> None:
    config = Config(**{**CFG.__dict__, "wait_for_injector": mode})
    state = PUBLISHED if view is None else SEEN
    assert decide(state, _with_injector(view), SWAP_TIME, config) == expected


def test_the_first_sight_of_the_injectors_report_is_recorded() -> None:
    """Seen once, the report Lease is recorded on the Secret: its later absence is a wait
    for every leader, not "no injector"."""
    view = InjectorView(True, frozenset({"aa", "bb"}))
    action = decide(PUBLISHED, _with_injector(view), SWAP_TIME, CFG)
    assert action == RecordInjectorSeen(SWAP_TIME)
    after = apply(PUBLISHED, action)
    assert after is not None and after.injector_seen
    off = Config(**{**CFG.__dict__, "wait_for_injector": "false"})
    assert decide(PUBLISHED, _with_injector(view), SWAP_TIME, off) == Swap(SWAP_TIME)


@pytest.mark.parametrize(
    ("state", "obs_seen"),
    [(SEEN, False), (PUBLISHED, True)],
    ids=["recorded on the Secret (another leader saw it)", "seen by this leader"],
)
def test_a_deleted_report_lease_holds_the_swap_and_names_the_recovery(
    state: State, obs_seen: bool
) -> None:
    """`kubectl delete lease --all` in the signer's namespace: the injector cannot create
    its report again (no `create`). The swap waits `injector-report-missing`, and the
    wait says how to put the Lease back (or how to say the injector is gone)."""
    seen = Observations(READY.published, READY.reports, injector_seen=obs_seen)
    action = decide(state, seen, SWAP_TIME, CFG)
    assert action == Wait(None, "injector-report-missing")
    assert isinstance(action, Wait) and "kubectl apply -k config/injector" in action.why
    assert "ca-injector-report-seen-" in action.why


def test_the_recorded_end_of_the_propagation_delay_is_never_earlier_than_the_delay() -> None:
    """The Secret keeps whole seconds: the end is rounded up, never truncated (found by
    the deleted-Secret integration test: a new root signed 7.8 s into an 8 s delay)."""
    now = T0 + 2 * DAY + timedelta(microseconds=900_000)
    action = decide(STAGED, obs("aa", "bb"), now, CFG)
    assert isinstance(action, MarkPublished)
    assert action.swap_not_before >= now + CFG.propagation_delay
    assert action.swap_not_before.microsecond == 0


def test_staging_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already staged"):
        staged(STAGED, CaInfo("cc", T0, T0 + DAY), T0)


def test_swap_makes_the_old_current_a_previous_root_until_retire_time() -> None:
    assert JUST_SWAPPED.previous == (Previous(A, T0 + 3 * DAY, None, LIFE),)
    assert SWAPPED.current == B
    assert SWAPPED.next is None
    assert SWAPPED.previous == (Previous(A, T0 + 3 * DAY, T0 + 4 * DAY + H, LIFE),)
    assert SWAPPED.phase == "Retiring"
    assert [a.fingerprint for a in SWAPPED.anchors()] == ["bb", "aa"]


EMERGENCY = replace(SWAPPED, emergency_requested_at=T0 + 5 * DAY, revoke=frozenset({"bb"}))


def test_an_emergency_rotation_stops_signing_with_the_compromised_root_at_once() -> None:
    """`ca rotate --emergency`: a new CA is made at once (before any other step), the
    compromised root leaves the state and is remembered as revoked."""
    now = T0 + 5 * DAY
    action = decide(EMERGENCY, obs("aa", "bb"), now, CFG)
    assert action == Emergency(now, frozenset({"bb"}))
    new = apply(EMERGENCY, action, CaInfo("dd", now, now + 100 * DAY))
    assert new is not None
    assert new.current.fingerprint == "dd" and new.confirmed_at is None and new.emergency
    assert "bb" not in {a.fingerprint for a in new.anchors()}
    assert [p.ca.fingerprint for p in new.previous] == ["aa"], "other roots stay"
    assert new.revoked == frozenset({"bb"}) and new.emergency_requested_at is None


def test_after_an_emergency_the_new_ca_signs_as_soon_as_it_is_published() -> None:
    now = T0 + 5 * DAY
    new = apply(EMERGENCY, Emergency(now, frozenset({"bb"})), CaInfo("dd", now, now + 100 * DAY))
    assert new is not None
    assert decide(new, obs("aa"), now, CFG) == Wait(None, "bundle-not-published")
    assert decide(new, obs("aa", "dd"), now, CFG) == Confirm(now)


def test_revoking_a_staged_next_ca_unstages_it_and_keeps_the_signing_ca() -> None:
    now = T0 + 2 * DAY
    request = replace(STAGED, emergency_requested_at=now, revoke=frozenset({"bb"}))
    action = decide(request, obs("aa", "bb"), now, CFG)
    assert action == Emergency(now, frozenset({"bb"})) and not action.replaces(request)
    new = apply(request, action)
    assert new is not None
    assert new.current == A and new.next is None and new.staged_at is None
    assert new.published_at is None and new.swap_not_before is None
    assert new.revoked == frozenset({"bb"})


def test_a_bootstrap_never_adopts_a_revoked_root() -> None:
    """A deleted Secret after an emergency: a replica still publishing the compromised
    root from memory must not get it adopted."""
    published = (A, B)
    seen = Observations(frozenset({"aa", "bb"}), published_cas=published, revoked=frozenset({"bb"}))
    action = decide(None, seen, T0, CFG)
    assert action == Bootstrap(T0, (A,), frozenset({"bb"}))
    state = apply(None, action, CaInfo("dd", T0, T0 + DAY))
    assert state is not None and state.revoked == frozenset({"bb"})


def test_the_longest_lifetime_any_replica_signs_with_is_recorded_for_the_current_ca() -> None:
    """Retire by what was issued: a replica configured for 48 h leaves (a rollout in
    progress) raises the recorded lifetime of the CA it signs with."""
    long_report = replace(report("aa", signing="aa", ready=None), max_lifetime=48 * H)
    action = decide(STABLE, obs("aa", reports=(long_report,)), T0 + DAY, CFG)
    assert action == RecordLifetime(48 * H)
    recorded = apply(STABLE, action)
    assert recorded is not None and recorded.issued_lifetime == 48 * H
    assert decide(recorded, obs("aa", reports=(long_report,)), T0 + DAY, CFG) == Wait(
        T0 + 50 * DAY, "rotation-point"
    )


def test_lowering_the_flag_after_a_swap_does_not_retire_the_old_root_early() -> None:
    """The old root signed 24 h leaves; the leader now runs with 1 h: its retire time
    still counts 24 h (+ margin) from the instant every replica signs with the new CA."""
    signed_long = replace(PUBLISHED, issued_lifetime=24 * H)
    just_swapped = replace(swapped(signed_long, T0 + 3 * DAY), issued_lifetime=H)
    short = Config(**{**CFG.__dict__, "max_leaf_lifetime": H})
    now = T0 + 3 * DAY + H
    action = decide(just_swapped, obs("aa", "bb", reports=LIVE_SWAPPED), now, short)
    assert action == ScheduleRetire(now, now + 24 * H + CFG.retire_margin)


def test_the_decision_ca_status_reads_names_revoked_roots_and_a_pending_request() -> None:
    from managedca.status import Decision

    now = T0 + 5 * DAY
    record = Decision.of(EMERGENCY, obs("aa", "bb"), None, now, None, CFG).to_json()
    assert record["revokeRequested"] == ["bb"] and record["emergencyRequestedAt"]
    assert Decision.from_json(record) == Decision.of(
        EMERGENCY, obs("aa", "bb"), None, now, None, CFG
    )
    after = apply(EMERGENCY, Emergency(now, frozenset({"bb"})), CaInfo("dd", now, now + DAY))
    record = Decision.of(after, obs("aa"), None, now, None, CFG).to_json()
    assert record["revoked"] == ["bb"] and "revokeRequested" not in record


def test_an_admin_may_skip_the_consumers_of_this_rotation_only() -> None:
    """The audited escape (docs/managed-ca.md): an admin-owned consumer that will never
    take the new CA (`ca skip-consumers`, recorded with who asked): the
    swap to *this* next CA stops waiting for the injector; every other gate stays, and a
    later rotation waits again. Never a default."""
    lagging = _with_injector(InjectorView(True, frozenset({"aa"})))
    held = decide(SEEN, lagging, SWAP_TIME, CFG)
    assert held == Wait(None, "injector-not-converged")
    skipped = replace(SEEN, consumers_skipped_for="bb", consumers_skipped_by="alice")
    assert decide(skipped, lagging, SWAP_TIME, CFG) == Swap(SWAP_TIME)
    another = replace(SEEN, consumers_skipped_for="cc", consumers_skipped_by="alice")
    assert decide(another, lagging, SWAP_TIME, CFG) == held
    stale = _with_injector(InjectorView(False, frozenset()))
    assert decide(skipped, stale, SWAP_TIME, CFG) == Swap(SWAP_TIME)
    not_ready = Observations(READY.published, (), injector=lagging.injector)
    assert decide(skipped, not_ready, SWAP_TIME, CFG) == Wait(None, "no-replica-report")
