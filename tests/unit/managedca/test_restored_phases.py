"""A restored Secret is a phase, not the truth. A backup taken while a rotation was staged
(current A, next B), restored after that rotation swapped B in and retired A: no replica
switches its signing set to A (the stable ClusterTrustBundle no longer publishes it:
consumers dropped it), and the leader treats A as unconfirmed — it signs again only
through the gates of a swap."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from kube.client import Client
from managedca import decide as d
from managedca import step
from managedca.codec import encode
from managedca.observe import Observer
from tests.unit.managedca import test_restore as restore
from tests.unit.managedca.builders import CFG, NOW, H
from tests.unit.managedca.test_restore import A_KEY, AI, B_KEY, BI, CERTS, _source

DAY = 24 * H
# The backup: staged 2 days ago, published, not yet swapped.
STAGED_BACKUP = d.State(
    current=AI,
    confirmed_at=NOW - 30 * DAY,
    next=BI,
    staged_at=NOW - 2 * DAY,
    published_at=NOW - 2 * DAY,
    swap_not_before=NOW - 2 * DAY + timedelta(minutes=10),
    issued_lifetime=DAY,
)
# Now: B swapped in 2 days ago, A retired since.
LIVE = d.State(
    current=BI,
    confirmed_at=NOW - 30 * DAY,
    swapped_at=NOW - 2 * DAY,
    issued_lifetime=DAY,
    retired=(AI.fingerprint,),
)


def _secret(state: d.State, key: bytes, next_key: bytes | None, rv: str) -> dict[str, Any]:
    body = encode("ns", "ca", state, CERTS, key, next_key)
    body["metadata"]["resourceVersion"] = rv
    return body


def test_a_replica_does_not_sign_with_a_restored_root_the_bundle_no_longer_holds() -> None:
    source = _source(remembered=frozenset(), published=(BI,))
    source.apply(_secret(LIVE, B_KEY, None, "500"))
    assert source.loaded().signing == BI.fingerprint
    source.apply(_secret(STAGED_BACKUP, A_KEY, B_KEY, "900"))  # the restore (a create)
    assert source.loaded().signing == BI.fingerprint, (
        "switched to A, retired two days ago: no consumer trusts it"
    )
    assert AI.fingerprint in source.loaded().anchors  # the bundle may hold A again


def test_a_replica_does_not_sign_with_a_restored_root_the_publisher_put_back_first() -> None:
    """The publisher republishes the restored Secret's roots within milliseconds, so the
    stable bundle the replica reads may hold A again before the leader unconfirms it:
    the replica still keeps B, as A was not in the bundle it served before (kubelet and
    the injected consumers have not had A back for any propagation delay)."""
    source = _source(remembered=frozenset(), published=(AI, BI))
    source.apply(_secret(LIVE, B_KEY, None, "500"))
    assert source.loaded().signing == BI.fingerprint
    source.apply(_secret(STAGED_BACKUP, A_KEY, B_KEY, "900"))  # the restore, republished
    assert source.loaded().signing == BI.fingerprint, (
        "switched to A the moment the publisher put it back: no consumer has it yet"
    )


def test_a_replica_does_not_switch_back_to_a_root_whose_retire_time_has_passed() -> None:
    """The restore lands before this replica read the retire: the state it served still
    holds A as a previous root, but A's retire time has passed (consumers are dropping
    it), so the restored Staged backup does not make it sign with A."""
    retiring = d.State(
        current=BI,
        confirmed_at=NOW - 30 * DAY,
        previous=(d.Previous(AI, NOW - 2 * DAY, NOW - timedelta(seconds=1), DAY),),
        swapped_at=NOW - 2 * DAY,
        issued_lifetime=DAY,
    )
    source = _source(remembered=frozenset(), published=(AI, BI))
    source.apply(_secret(retiring, B_KEY, None, "500"))
    assert source.loaded().signing == BI.fingerprint
    source.apply(_secret(STAGED_BACKUP, A_KEY, B_KEY, "900"))
    assert source.loaded().signing == BI.fingerprint, "switched back to A, past its retire"


def test_a_replica_switches_to_a_staged_ca_it_served_at_the_swap() -> None:
    """The ordinary swap: B was in the bundle this replica served (staged) before the
    Secret made it the current CA."""
    staged = d.State(
        current=AI,
        confirmed_at=NOW - 30 * DAY,
        next=BI,
        staged_at=NOW - 2 * DAY,
        published_at=NOW - 2 * DAY,
        swap_not_before=NOW - 2 * DAY + timedelta(minutes=10),
        issued_lifetime=DAY,
    )
    swapped = step.apply(staged, d.Swap(NOW))
    assert swapped is not None
    source = _source(remembered=frozenset(), published=(AI, BI))
    source.apply(_secret(staged, A_KEY, B_KEY, "500"))
    assert source.loaded().signing == AI.fingerprint
    source.apply(_secret(swapped, B_KEY, None, "600"))
    assert source.loaded().signing == BI.fingerprint


def test_a_replica_started_after_the_restore_signs_nothing_until_the_ca_is_published() -> None:
    source = _source(remembered=frozenset(), published=(BI,))
    source.apply(_secret(STAGED_BACKUP, A_KEY, B_KEY, "900"))
    assert source.loaded().signing is None
    assert not source.has_signing_set()


def test_the_leader_does_not_keep_a_restored_unpublished_current_ca_confirmed() -> None:
    obs = d.Observations(frozenset({BI.fingerprint}), (), published_cas=(BI,))
    state = STAGED_BACKUP
    action: d.Action = d.Wait(None, "")
    for _ in range(5):
        action = d.decide(state, obs, NOW, CFG)
        if isinstance(action, d.Wait):
            break
        applied = step.apply(state, action)
        assert applied is not None
        state = applied
    assert state.confirmed_at is None, f"A (not in the bundle) stays confirmed: {action!r}"
    assert action == d.Wait(None, "bundle-not-published"), action


def test_the_leader_says_why_it_unconfirms_a_restored_current_ca() -> None:
    obs = d.Observations(frozenset({BI.fingerprint}), (), published_cas=(BI,))
    action = d.decide(STAGED_BACKUP, obs, NOW, CFG)
    assert action == d.Adopt(NOW, (), unconfirm=True)
    after = step.apply(STAGED_BACKUP, action)
    assert after is not None
    reason, note = step.describe(STAGED_BACKUP, after, action)
    assert reason == "ManagedCAUnconfirmed" and AI.fingerprint in note


def test_the_leader_unconfirms_a_restored_current_ca_the_publisher_already_put_back() -> None:
    """The publisher republished A before the leader read back: the read-back holds A
    and B, so only the state read before (A retired) tells the restore."""
    both = frozenset({AI.fingerprint, BI.fingerprint})
    obs = d.Observations(both, (), published_cas=(AI, BI), current_not_held_before=True)
    assert d.decide(STAGED_BACKUP, obs, NOW, CFG) == d.Adopt(NOW, (), unconfirm=True)


def test_the_leader_remembers_a_restored_current_ca_until_it_is_unconfirmed() -> None:
    """The leader read LIVE (A retired), then the restored backup confirming A: A was not
    held before, and stays so on the next reads (a failed write must not forget it)
    until A is unconfirmed; an ordinary swap is held by the state before it."""
    observer = Observer(
        cast(Client, object()),
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1",
    )
    assert observer._current_not_held_before(LIVE, STAGED_BACKUP, NOW)
    assert observer._current_not_held_before(STAGED_BACKUP, STAGED_BACKUP, NOW)
    unconfirmed = replace(STAGED_BACKUP, confirmed_at=None)
    assert not observer._current_not_held_before(STAGED_BACKUP, unconfirmed, NOW)
    swapped = step.apply(STAGED_BACKUP, d.Swap(NOW))
    assert swapped is not None
    assert not observer._current_not_held_before(STAGED_BACKUP, swapped, NOW)
    assert not observer._current_not_held_before(None, STAGED_BACKUP, NOW)


def test_a_leader_that_read_the_retire_unconfirms_the_restored_ca_the_bundle_holds_again() -> None:
    """Through the controller's own reads: it read B current with A retired, then the
    Secret restored from a backup with A current while the stable bundle already holds A
    again (the publisher was first). The restored A is unconfirmed, B adopted back."""
    live = d.State(
        current=BI,
        confirmed_at=NOW - 2 * H,
        retired=(AI.fingerprint,),
        issued_lifetime=DAY,
    )
    api = restore.Api(restore._secret(live, B_KEY, "7"), restore.B)
    controller = restore._controller(api)
    controller.sync_once()
    api.secret = restore._secret(restore.BACKUP, A_KEY, "90")
    api.stable["spec"]["trustBundle"] = (restore.A + restore.B).decode()
    action = controller.sync_once()
    assert action == d.Adopt(NOW, (BI,), unconfirm=True), action
