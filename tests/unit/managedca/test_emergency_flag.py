""" "Made in an emergency: sign as soon as the bundle read back holds it" is for the CA
the emergency made, until it is confirmed. Every later step clears it, so a Secret
restored from a backup taken any time after the cluster's first emergency signs only
through the gates of a swap (the delay, every replica ready, the injector)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from managedca import decide as d
from managedca import step
from managedca.codec import EMERGENCY, ca_info, decode, encode
from managedca.layout import CONFIRMED_AT
from tests.unit.managedca.builders import CFG, NOW, T0, H, ca_pems

DAY = 24 * H
# E: made by `ca rotate --emergency` at T0 - 100 d. F: the next scheduled rotation's CA,
# current since T0 - 40 d (E retired since). The Secret is restored from a backup taken
# at T0 - 90 d: current E, still marked as the emergency's CA.
E = d.CaInfo("ee" * 32, T0 - 100 * DAY, T0 + 265 * DAY)
F = d.CaInfo("ff" * 32, T0 - 42 * DAY, T0 + 323 * DAY)
BACKUP = d.State(current=E, confirmed_at=T0 - 100 * DAY, emergency=True, issued_lifetime=DAY)


def test_the_emergency_flag_does_not_outlive_the_emergency() -> None:
    """Confirmed, staged past, swapped past, adopted over: not an emergency CA any more."""
    made = d.State(current=E, previous=(), emergency=True)
    confirmed = step.apply(made, d.Confirm(T0))
    assert confirmed is not None and not confirmed.emergency
    g = d.CaInfo("aa" * 32, T0, T0 + 365 * DAY)
    state = step.apply(BACKUP, d.Stage(T0, requested=True), g)
    assert state is not None and not state.emergency
    state = step.apply(state, d.Swap(T0 + H))
    assert state is not None
    assert not state.emergency, "a scheduled CA swapped in is still marked as an emergency CA"
    adopted = step.apply(BACKUP, d.Adopt(T0, (F,), unconfirm=True))
    assert adopted is not None and not adopted.emergency
    kept = step.apply(BACKUP, d.Adopt(T0, (F,)))  # the current CA still published
    assert kept is not None and not kept.emergency
    # Each step clears it on its own (a state read from an older writer may carry it).
    marked = d.State(current=E, confirmed_at=T0, next=g, emergency=True, issued_lifetime=DAY)
    swapped = step.apply(marked, d.Swap(T0 + H))
    assert swapped is not None and not swapped.emergency


def test_a_restored_backup_of_an_emergency_ca_signs_only_after_the_gates() -> None:
    # The bundle holds F only (E was retired): the leader adopts F and unconfirms E.
    obs = d.Observations(frozenset({F.fingerprint}), (), published_cas=(F,))
    action = d.decide(BACKUP, obs, T0, CFG)
    assert isinstance(action, d.Adopt) and action.unconfirm, action
    state = step.apply(BACKUP, action)
    assert state is not None and state.confirmed_at is None
    # A second later the publisher has published E again. No replica has loaded it, none
    # is ready to sign with it, this leader has seen it published for 0 s.
    behind = d.ReplicaView("r1", frozenset({F.fingerprint}), signing=F.fingerprint)
    both = frozenset({E.fingerprint, F.fingerprint})
    obs = d.Observations(both, (behind,), published_cas=(E, F), published_for=timedelta(0))
    action = d.decide(state, obs, T0 + timedelta(seconds=1), CFG)
    assert isinstance(action, (d.Wait, d.MarkPublished)), (
        f"{action!r}: E signs at once, before any consumer (or replica) has it"
    )


def flagged_confirmed_secret() -> dict[str, Any]:
    """A Secret as a writer from before the flag was cleared left it: a confirmed CA
    still marked `ca-emergency: "true"`."""
    key, pem = ca_pems("a")
    ca = ca_info(pem)
    body = encode(
        "ns", "ca", d.State(current=ca, confirmed_at=NOW), {ca.fingerprint: pem}, key, None
    )
    body["metadata"]["annotations"][EMERGENCY] = "true"
    return body


def test_a_confirmed_ca_read_from_an_older_writer_is_not_an_emergency_ca() -> None:
    """Secrets written before the flag was cleared still carry `ca-emergency: "true"` on a
    confirmed CA: read as what it means now (nothing)."""
    body = flagged_confirmed_secret()
    assert not decode(body).state.emergency
    del body["metadata"]["annotations"][CONFIRMED_AT]
    assert decode(body).state.emergency
