"""`ca skip-consumers` is audited by the leader, not only by the client: a swap past the
injector's gate says so in its `ManagedCASwapped` Event and in `ca status`'s decision
record, with who asked — "unknown" when the annotation did not come from the CLI (a bare
`kubectl annotate secret … ca-consumers-skipped-for=<next>`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from managedca import decide as d
from managedca import step
from managedca.status import Decision
from tests.unit.managedca.builders import CFG, T0, H

A = d.CaInfo("aa" * 32, T0 - timedelta(days=50), T0 + timedelta(days=50))
B = d.CaInfo("bb" * 32, T0 - timedelta(days=1), T0 + timedelta(days=99))
BOTH = frozenset({A.fingerprint, B.fingerprint})
STAGED = d.State(
    current=A,
    confirmed_at=T0 - timedelta(days=50),
    next=B,
    staged_at=T0 - H,
    published_at=T0 - H,
    swap_not_before=T0 - H + CFG.propagation_delay,
    issued_lifetime=24 * H,
    injector_seen=True,
    consumers_skipped_for=B.fingerprint,  # a bare `kubectl annotate`: no `by`, no Event
)
READY = d.ReplicaView("r1", BOTH, signing=A.fingerprint, ready=B.fingerprint)
LAGGING = d.InjectorView(True, frozenset(), lagging=("ValidatingWebhookConfiguration hooks",))
OBS = d.Observations(BOTH, (READY,), published_for=H, injector=LAGGING)


@pytest.mark.parametrize(("by", "said"), [(None, "unknown"), ("alice", "alice")])
def test_a_swap_past_the_injectors_gate_is_said_by_the_leader(by: str | None, said: str) -> None:
    state = replace(STAGED, consumers_skipped_by=by)
    action = d.decide(state, OBS, T0, CFG)
    assert isinstance(action, d.Swap), action
    new = step.apply(state, action)
    assert new is not None
    reason, note = step.describe(state, new, action)
    assert reason == "ManagedCASwapped"
    assert "injector's gate was skipped" in note and f"by {said}" in note, note


@pytest.mark.parametrize(("by", "said"), [(None, "unknown"), ("alice", "alice")])
def test_ca_status_says_the_gate_is_skipped_and_by_whom(by: str | None, said: str) -> None:
    state = replace(STAGED, consumers_skipped_by=by)
    record = Decision.of(state, OBS, d.Swap(T0), T0, None, CFG).to_json()
    assert record["consumersSkipped"] == {"for": B.fingerprint, "by": said}
    back = Decision.from_json(record)
    assert back is not None and back.consumers_skipped_by == said
    swapped = step.apply(state, d.Swap(T0))
    assert swapped is not None  # still said while the swapped-in CA is current
    after = Decision.of(swapped, OBS, None, T0, None, CFG).to_json()
    assert after["consumersSkipped"]["by"] == said


def test_an_ordinary_swap_says_nothing_of_a_skip() -> None:
    state = replace(STAGED, consumers_skipped_for=None)
    new = step.apply(state, d.Swap(T0))
    assert new is not None
    assert "skipped" not in step.describe(state, new, d.Swap(T0))[1]
    assert "consumersSkipped" not in Decision.of(state, OBS, None, T0, None, CFG).to_json()
