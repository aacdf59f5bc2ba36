"""A replica's report can land after it has signed: a leaf it issued with the current CA
before the leader read its report (it started moments before a swap, or its first report
write failed) must be counted in that CA's retire time, not only in the next CA's."""

from __future__ import annotations

from datetime import datetime, timedelta

from managedca import decide as d
from managedca.step import apply
from tests.unit.managedca.builders import CFG, T0, H

A = d.CaInfo("aa", T0 - timedelta(days=50), T0 + timedelta(days=50))
B = d.CaInfo("bb", T0 - timedelta(days=1), T0 + timedelta(days=99))
BOTH = frozenset({"aa", "bb"})


def _run(state: d.State, reports: tuple[d.ReplicaView, ...], now: datetime) -> d.State:
    """Decide and apply until the leader waits; returns the state it waits in."""
    for _ in range(10):
        action = d.decide(state, d.Observations(BOTH, reports, published_for=H), now, CFG)
        if isinstance(action, d.Wait):
            return state
        applied = apply(state, action, None)
        assert applied is not None
        state = applied
    raise AssertionError("no wait after ten steps")


def test_a_leaf_signed_before_its_replicas_report_landed_keeps_its_root_until_it_expires() -> None:
    staged = d.State(
        current=A,
        confirmed_at=T0 - timedelta(days=50),
        next=B,
        staged_at=T0 - H,
        published_at=T0 - H,
        swap_not_before=T0 - H + CFG.propagation_delay,
        issued_lifetime=24 * H,
    )
    ready = d.ReplicaView("r1", BOTH, signing="aa", ready="bb", max_lifetime=24 * H)
    # r2 (--max-certificate-lifetime=48h) started at T0 - 1s and signed a 48 h leaf with A
    # at once; the leader's reads before the swap did not list its report yet.
    leaf_not_after = T0 - timedelta(seconds=1) + 48 * H
    swap = d.decide(staged, d.Observations(BOTH, (ready,), published_for=H), T0, CFG)
    assert isinstance(swap, d.Swap), swap
    state = apply(staged, swap, None)
    assert state is not None

    late = d.ReplicaView("r2", BOTH, signing="aa", ready=None, max_lifetime=48 * H)
    took_the_swap = (
        d.ReplicaView("r1", BOTH, signing="bb", max_lifetime=24 * H),
        d.ReplicaView("r2", BOTH, signing="bb", max_lifetime=48 * H),
    )
    state = _run(state, (took_the_swap[0], late), T0 + timedelta(seconds=5))
    state = _run(state, took_the_swap, T0 + timedelta(seconds=10))

    [previous] = state.previous
    assert previous.ca == A and previous.retire_at is not None, state
    assert previous.retire_at >= leaf_not_after + CFG.retire_margin, (
        f"A retires at {previous.retire_at}, while r2's leaf it signed is valid until "
        f"{leaf_not_after}"
    )
