"""Delivery, not only convergence: when the injector's report is the last gate to open
(an object blocked or stale for longer than the delay and then mended, the injector
restarted), the swap still waits the propagation delay after this leader first saw the
report converge on the new CA — Pods read an injected ConfigMap through a volume that
kubelet rewrites on the Pod's resync (up to ~90 s), and the delay is ≥ that bound."""

from __future__ import annotations

from datetime import timedelta

from managedca import decide as d
from managedca.codec import decode
from tests.unit.fakes import FakeRecorder
from tests.unit.managedca.builders import CFG
from tests.unit.managedca.test_waiting_objects import Api, _controller
from trust import convergence as c


def test_the_swap_waits_for_consumers_to_read_what_the_injector_wrote() -> None:
    api, recorder = Api(), FakeRecorder()
    controller = _controller(api, recorder)
    # An hour and more past the delay, a ConfigMap does not hold the next CA yet.
    api.lagging(("ConfigMap", c.Lagging("shop/web-ca")))
    held = controller.sync_once()
    assert isinstance(held, d.Wait) and held.reason == "injector-not-converged", held
    api.lagging()  # the injector writes it now; its report says converged at once
    action = controller.sync_once()
    assert isinstance(action, d.Wait), (
        "swapped in the same second the ConfigMap was written: the Pods mounting it "
        f"still hold the old file ({action!r})"
    )
    assert action.reason == "propagation-delay" and "injector" in action.why, action
    assert action.until is not None
    # The leader's monotonic clock has moved on by hours: the delay has passed.
    assert isinstance(controller.sync_once(), d.Swap)


def test_the_wait_is_the_propagation_delay_on_this_leaders_clock() -> None:
    """Measured from the first convergence this leader saw (`converged_for`, its monotonic
    clock): one second short of the delay waits that second, the delay itself swaps."""
    api = Api()
    state = decode(api.secret).state
    assert state.swap_not_before is not None
    now = state.swap_not_before + 10 * CFG.propagation_delay
    both = frozenset({api.a.fingerprint, api.b.fingerprint})
    ready = d.ReplicaView("r", both, ready=api.b.fingerprint)

    def seen(converged_for: timedelta) -> d.Observations:
        return d.Observations(
            both,
            (ready,),
            published_for=10 * CFG.propagation_delay,
            injector=d.InjectorView(True, frozenset({api.b.fingerprint})),
            converged_for=converged_for,
        )

    short = d.decide(state, seen(CFG.propagation_delay - timedelta(seconds=1)), now, CFG)
    assert short == d.Wait(now + timedelta(seconds=1), "propagation-delay"), short
    assert d.decide(state, seen(CFG.propagation_delay), now, CFG) == d.Swap(now)
