"""The managed CA's decision over a table of (state, observations, now)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from managedca.decide import (
    Bootstrap,
    CaInfo,
    Config,
    Confirm,
    MarkPublished,
    Observations,
    Previous,
    Report,
    Retire,
    ScheduleRetire,
    Stage,
    State,
    Swap,
    Wait,
    decide,
    marked_published,
    retire_scheduled,
    staged,
    swapped,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)
DAY = timedelta(days=1)
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


def report(*fps: str, name: str = "r1", at: datetime = T0) -> Report:
    return Report(name, frozenset(fps), at, timedelta(seconds=30))


STABLE = State(current=A, confirmed_at=T0)
STAGED = staged(STABLE, B, T0 + 2 * DAY)
PUBLISHED = marked_published(STAGED, T0 + 2 * DAY, T0 + 2 * DAY + timedelta(minutes=10))
JUST_SWAPPED = swapped(PUBLISHED, T0 + 3 * DAY)
SWAPPED = retire_scheduled(JUST_SWAPPED, CFG.retire_at(T0 + 3 * DAY))


def obs(*fps: str, reports: tuple[Report, ...] = ()) -> Observations:
    return Observations(frozenset(fps), reports)


CASES = [
    ("no secret bootstraps", None, obs(), T0, Bootstrap()),
    (
        "a new CA waits until the bundle read back holds it",
        State(current=A),
        obs(),
        T0,
        Wait(None, "the ClusterTrustBundle read back does not hold the new CA yet"),
    ),
    ("a published new CA is confirmed", State(current=A), obs("aa"), T0, Confirm(T0)),
    (
        "a young CA waits for its rotation point",
        STABLE,
        obs("aa"),
        T0 + DAY,
        Wait(T0 + 50 * DAY, "the rotation point of the current CA's life"),
    ),
    ("the rotation point stages", STABLE, obs("aa"), T0 + 50 * DAY, Stage(requested=False)),
    (
        "ca rotate stages early",
        State(current=A, confirmed_at=T0, rotate_requested_at=T0 + DAY),
        obs("aa"),
        T0 + DAY,
        Stage(requested=True),
    ),
    (
        "staged waits for the bundle to hold both",
        STAGED,
        obs("aa", reports=(report("aa", "bb", at=T0 + 2 * DAY),)),
        T0 + 2 * DAY,
        Wait(None, "the ClusterTrustBundle read back does not hold both CAs yet"),
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
        obs(
            "aa",
            "bb",
            reports=(
                report("aa", "bb", at=T0 + 3 * DAY),
                report("aa", name="r2", at=T0 + 3 * DAY),
            ),
        ),
        T0 + 3 * DAY,
        Wait(None, "replicas that have not loaded the next CA: r2"),
    ),
    (
        "an expired report does not hold the swap",
        PUBLISHED,
        obs(
            "aa",
            "bb",
            reports=(
                report("aa", "bb", at=T0 + 3 * DAY),
                report("aa", name="gone", at=T0 + 2 * DAY),
            ),
        ),
        T0 + 3 * DAY,
        Swap(T0 + 3 * DAY),
    ),
    (
        "swap waits with no live report at all",
        PUBLISHED,
        obs("aa", "bb"),
        T0 + 3 * DAY,
        Wait(None, "no replica reports the bundle it has loaded"),
    ),
    (
        "swap waits for the propagation delay",
        PUBLISHED,
        obs("aa", "bb", reports=(report("aa", "bb", at=T0 + 2 * DAY + timedelta(minutes=5)),)),
        T0 + 2 * DAY + timedelta(minutes=5),
        Wait(
            T0 + 2 * DAY + timedelta(minutes=10),
            "the propagation delay (kubelet's clusterTrustBundle refresh)",
        ),
    ),
    (
        "swap waits for a next CA that is not valid yet (clock stepped back)",
        State(
            current=A, confirmed_at=T0, next=B, staged_at=T0, published_at=T0, swap_not_before=T0
        ),
        obs("aa", "bb", reports=(report("aa", "bb", at=T0 + 12 * H),)),
        T0 + 12 * H,
        Wait(B.not_before, "the next CA's notBefore"),
    ),
    (
        "a swap read back schedules the previous root's retire time from now",
        JUST_SWAPPED,
        obs("aa", "bb"),
        T0 + 3 * DAY + 6 * H,
        ScheduleRetire(T0 + 3 * DAY + 6 * H, CFG.retire_at(T0 + 3 * DAY + 6 * H)),
    ),
    (
        "roots adopted at bootstrap get their retire time once the new CA is confirmed",
        State(current=B, confirmed_at=T0 + 6 * H, previous=(Previous(A, T0, None),)),
        obs("aa", "bb"),
        T0 + 6 * H,
        ScheduleRetire(T0 + 6 * H, CFG.retire_at(T0 + 6 * H)),
    ),
    (
        "a previous root stays until its retire time",
        SWAPPED,
        obs("aa", "bb"),
        T0 + 4 * DAY,
        Wait(T0 + 4 * DAY + H, "the retire time of a previous root"),
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
        State(current=B, confirmed_at=T0, previous=(Previous(C, T0 - 2 * DAY, T0 - DAY),)),
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
        previous=(
            Previous(A, T0 + DAY, T0 + 2 * DAY),
            Previous(CaInfo("old", T0, T0 + 30 * DAY), T0, T0 + DAY),
        ),
    )
    assert decide(state, obs("aa", "bb", "old"), T0 + 3 * DAY, keep) == Retire(frozenset({"old"}))
    kept = State(current=B, confirmed_at=T0, previous=state.previous[:1])
    assert decide(kept, obs("aa", "bb"), T0 + 3 * DAY, keep) == Wait(
        T0 + 50 * DAY + DAY, "the rotation point of the current CA's life"
    )


def test_staging_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already staged"):
        staged(STAGED, CaInfo("cc", T0, T0 + DAY), T0)


def test_swap_makes_the_old_current_a_previous_root_until_retire_time() -> None:
    assert JUST_SWAPPED.previous == (Previous(A, T0 + 3 * DAY, None),)
    assert SWAPPED.current == B
    assert SWAPPED.next is None
    assert SWAPPED.previous == (Previous(A, T0 + 3 * DAY, T0 + 4 * DAY + H),)
    assert SWAPPED.phase == "Retiring"
    assert [a.fingerprint for a in SWAPPED.anchors()] == ["bb", "aa"]
