"""A restored Secret is a phase, not the truth. A backup taken while a rotation was staged
(current A, next B), restored after that rotation swapped B in and retired A: no replica
switches its signing set to A (the stable ClusterTrustBundle no longer publishes it:
consumers dropped it), and the leader treats A as unconfirmed — it signs again only
through the gates of a swap."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from managedca import decide as d
from managedca import step
from managedca.codec import encode
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
