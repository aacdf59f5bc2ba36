"""A CA Secret that moves backwards — a Velero or namespace restore, a GitOps tool
re-applying an exported copy, a hand edit deleting `previous.crt` — never takes a root
that may still verify leaves in use out of the bundle, and never brings a revoked root
back: the replicas keep serving what they had until the leader adopts the published
roots back, and revocations are remembered on the stable ClusterTrustBundle, where a
restore of the Secret (and a restart of every replica) does not erase them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import decide as d
from managedca import revocations, step
from managedca.codec import ca_info, decode, encode
from managedca.controller import ManagedCAController
from managedca.layout import PREVIOUS_CERTS, REVOKED_ROOTS
from managedca.material import ApiMaterialSource
from signer.authority import issue_probe
from tests.unit.managedca.builders import NOW, H, ca_pems
from trust.bundle import stable_bundle_name

SIGNER = "example.com/x"
INVALID = "service_serving_ca_controller_material_invalid"


A_KEY, A = ca_pems("a")
B_KEY, B = ca_pems("b")
C_KEY, C = ca_pems("c")
AI, BI, CI = ca_info(A), ca_info(B), ca_info(C)
CERTS = {AI.fingerprint: A, BI.fingerprint: B, CI.fingerprint: C}


def _secret(state: d.State, key: bytes, rv: str) -> dict[str, Any]:
    body = encode("ns", "ca", state, CERTS, key, None)
    body["metadata"]["resourceVersion"] = rv
    return body


RETIRING = d.State(
    current=BI,
    confirmed_at=NOW - 2 * H,
    previous=(d.Previous(AI, NOW - H, NOW + 24 * H, 24 * H),),
    swapped_at=NOW - H,
    issued_lifetime=24 * H,
)
BACKUP = d.State(current=AI, confirmed_at=NOW - 2 * H, issued_lifetime=24 * H)


REGISTRIES: dict[int, CollectorRegistry] = {}


def _source(
    remembered: frozenset[str] | None = None, published: tuple[d.CaInfo, ...] = ()
) -> ApiMaterialSource:
    registry = CollectorRegistry()
    source = ApiMaterialSource(cast(Client, object()), "ns", "ca", registry, issuer=issue_probe)
    REGISTRIES[id(source)] = registry
    if remembered is not None:
        source.remember_revoked_from(lambda: (remembered, published))
    return source


def _invalid(source: ApiMaterialSource) -> float | None:
    return REGISTRIES[id(source)].get_sample_value(INVALID)


# the replicas' material source ----------------------------------------------------------


def test_a_secret_restored_from_an_older_backup_does_not_drop_the_current_root() -> None:
    """B has signed for an hour (leaves valid for 24 h). The Secret is restored from a
    backup taken before the rotation (a create: a newer resourceVersion). The source keeps
    serving B (and signing with it) and says why, instead of publishing {A}."""
    source = _source()
    source.apply(_secret(RETIRING, B_KEY, "50"))
    source.apply(_secret(BACKUP, A_KEY, "90"))
    assert BI.fingerprint in source.loaded().anchors, "B leaves the bundle"
    assert source.loaded().signing == BI.fingerprint
    assert _invalid(source) == 1


def test_a_hand_edit_deleting_previous_crt_does_not_drop_the_previous_root() -> None:
    source = _source()
    source.apply(_secret(RETIRING, B_KEY, "50"))
    edited = _secret(RETIRING, B_KEY, "51")
    del edited["data"][PREVIOUS_CERTS]
    source.apply(edited)
    assert AI.fingerprint in source.loaded().anchors


def test_the_state_the_leader_adopts_back_is_taken() -> None:
    source = _source()
    source.apply(_secret(RETIRING, B_KEY, "50"))
    source.apply(_secret(BACKUP, A_KEY, "90"))
    adopted = step.apply(BACKUP, d.Adopt(NOW, (BI,)))
    assert adopted is not None
    source.apply(_secret(adopted, A_KEY, "91"))
    assert set(source.loaded().anchors) == {AI.fingerprint, BI.fingerprint}
    assert source.loaded().signing == AI.fingerprint
    assert _invalid(source) == 0


def test_a_retire_and_an_emergency_still_drop_roots() -> None:
    source = _source()
    source.apply(_secret(RETIRING, B_KEY, "50"))
    after = step.apply(RETIRING, d.Retire(frozenset({AI.fingerprint})))
    assert after is not None
    source.apply(_secret(after, B_KEY, "51"))
    assert set(source.loaded().anchors) == {BI.fingerprint}
    emergency = step.apply(after, d.Emergency(NOW, frozenset({BI.fingerprint})), CI)
    assert emergency is not None
    source.apply(_secret(emergency, C_KEY, "52"))
    assert set(source.loaded().anchors) == {CI.fingerprint}
    assert _invalid(source) == 0


def test_a_replica_started_after_a_restore_never_signs_with_a_revoked_root() -> None:
    """The backup predates `ca rotate --emergency` that revoked A, and every replica
    restarted since: the Secret no longer says A is revoked, the stable bundle does."""
    source = _source(remembered=frozenset({AI.fingerprint}))
    source.apply(
        _secret(
            d.State(current=AI, previous=(d.Previous(BI, NOW, None),), confirmed_at=NOW - H),
            A_KEY,
            "90",
        )
    )
    assert source.loaded().signing is None
    assert AI.fingerprint not in source.loaded().anchors


def test_a_replica_started_after_a_restore_does_not_drop_a_published_root() -> None:
    """Every replica restarted after the restore: none has served B, but the stable
    bundle publishes it, so the restored state is refused until the leader adopts B."""
    source = _source(remembered=frozenset(), published=(AI, BI))
    source.apply(_secret(BACKUP, A_KEY, "90"))
    assert not source.has_bundle(), "nothing served: the publisher keeps what is published"
    adopted = step.apply(BACKUP, d.Adopt(NOW, (BI,)))
    assert adopted is not None
    source.apply(_secret(adopted, A_KEY, "91"))
    assert set(source.loaded().anchors) == {AI.fingerprint, BI.fingerprint}


# the decision ----------------------------------------------------------------------------


def test_the_controller_adopts_a_published_root_the_restored_secret_lacks() -> None:
    state: d.State | None = BACKUP
    obs = d.Observations(
        frozenset({AI.fingerprint, BI.fingerprint}), (), published_cas=tuple(sorted((AI, BI)))
    )
    action: d.Action = d.Wait(None, "")
    for _ in range(5):
        assert state is not None
        action = d.decide(state, obs, NOW, d.Config())
        if isinstance(action, d.Wait | d.Stage | d.Emergency | d.Bootstrap):
            break
        state = step.apply(state, action)
    assert state is not None
    assert BI.fingerprint in {c.fingerprint for c in state.anchors()}, action
    adopted = next(p for p in state.previous if p.ca == BI)
    assert adopted.retire_at is None, "retired like a swapped-out root, once scheduled"


def test_a_restored_current_ca_that_is_not_published_signs_only_after_the_gates() -> None:
    """A backup older than its current CA's retire: the bundle holds B and C, not A."""
    obs = d.Observations(
        frozenset({BI.fingerprint, CI.fingerprint}), (), published_cas=tuple(sorted((BI, CI)))
    )
    action = d.decide(BACKUP, obs, NOW, d.Config())
    assert isinstance(action, d.Adopt) and action.unconfirm, action
    after = step.apply(BACKUP, action)
    assert after is not None and after.confirmed_at is None
    assert isinstance(d.decide(after, obs, NOW, d.Config()), d.Wait)


def test_a_root_just_retired_is_not_adopted_back() -> None:
    """The bundle holds a root for a moment after its Retire is written."""
    after = step.apply(RETIRING, d.Retire(frozenset({AI.fingerprint})))
    assert after is not None
    obs = d.Observations(
        frozenset({AI.fingerprint, BI.fingerprint}), (), published_cas=tuple(sorted((AI, BI)))
    )
    assert not isinstance(d.decide(after, obs, NOW, d.Config()), d.Adopt)


def test_a_restored_secret_whose_current_root_was_revoked_is_replaced_not_waited_on() -> None:
    a = d.CaInfo("aa", NOW - H, NOW + 100 * 24 * H)
    state = d.State(current=a, confirmed_at=NOW - H, issued_lifetime=24 * H)
    obs = d.Observations(frozenset({"aa"}), revoked=frozenset({"aa"}))
    action = d.decide(state, obs, NOW, d.Config())
    assert isinstance(action, d.Emergency) and action.revoke == {"aa"}, action


def test_a_revoked_previous_root_is_dropped_without_a_new_ca() -> None:
    state = d.State(
        current=BI,
        confirmed_at=NOW - H,
        previous=(d.Previous(AI, NOW - H, None, 24 * H),),
        issued_lifetime=24 * H,
    )
    obs = d.Observations(
        frozenset({AI.fingerprint, BI.fingerprint}), revoked=frozenset({AI.fingerprint})
    )
    action = d.decide(state, obs, NOW, d.Config())
    assert isinstance(action, d.Emergency) and not action.replaces(state), action
    after = step.apply(state, action)
    assert after is not None and after.current == BI and not after.previous
    assert AI.fingerprint in after.revoked


# the controller: where revocations are remembered ------------------------------------------


class Api:
    """The CA Secret, the signer's bundles (the stable one among them), no reports."""

    def __init__(self, secret: dict[str, Any], published: bytes, annotation: str = "") -> None:
        self.secret = secret
        self.stable: dict[str, Any] = {
            "metadata": {
                "name": stable_bundle_name(SIGNER),
                "resourceVersion": "3",
                "annotations": {REVOKED_ROOTS: annotation} if annotation else {},
            },
            "spec": {"signerName": SIGNER, "trustBundle": published.decode()},
        }
        self.bundle_writes: list[dict[str, Any]] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/secrets/ca"):
            return copy.deepcopy(self.secret)
        if path.endswith("clustertrustbundles"):
            return {"items": [copy.deepcopy(self.stable)]}
        if path.endswith("/leases"):
            return {"items": []}
        raise ApiError(404, "NotFound")

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if "clustertrustbundles" in path:
            assert body["metadata"]["resourceVersion"] == self.stable["metadata"]["resourceVersion"]
            self.bundle_writes.append(copy.deepcopy(dict(body)))
            self.stable = copy.deepcopy(dict(body))
            return copy.deepcopy(self.stable)
        self.secret = copy.deepcopy(dict(body))
        self.secret["metadata"]["resourceVersion"] = "100"
        return copy.deepcopy(self.secret)


def _controller(api: Api) -> ManagedCAController:
    return ManagedCAController(
        cast(Client, api),
        namespace="ns",
        secret_name="ca",
        signer_name=SIGNER,
        ctb_version="v1beta1",
        config=d.Config(),
        make_ca=lambda now: (C_KEY, C),
        clock=lambda: NOW,
        registry=CollectorRegistry(),
    )


def test_the_leader_remembers_a_revocation_on_the_stable_bundle() -> None:
    revoked = d.State(
        current=BI,
        confirmed_at=NOW - H,
        revoked=frozenset({AI.fingerprint}),
        issued_lifetime=24 * H,
    )
    api = Api(_secret(revoked, B_KEY, "7"), B)
    _controller(api).sync()
    assert revocations.of(api.stable) == {AI.fingerprint}
    _controller(api).sync()
    assert len(api.bundle_writes) == 1, "written once"


def test_a_pending_emergency_is_remembered_before_the_emergency_is_written() -> None:
    """`ca rotate --emergency` recorded its request on the Secret: the leader puts the
    root on the stable bundle first, so a restore right after cannot lose it."""
    requested = replace(BACKUP, emergency_requested_at=NOW)
    api = Api(_secret(requested, A_KEY, "7"), A)
    action = _controller(api).sync_once()
    assert isinstance(action, d.Emergency)
    assert revocations.of(api.bundle_writes[0]) == {AI.fingerprint}


def test_a_restore_from_before_the_emergency_is_an_emergency_again_after_every_restart() -> None:
    """A fresh leader (nothing in memory), the Secret from before the emergency (A
    current, nothing revoked), the stable bundle remembering A: A is replaced at once."""
    api = Api(_secret(BACKUP, A_KEY, "90"), A + B, annotation=AI.fingerprint)
    action = _controller(api).sync_once()
    assert isinstance(action, d.Emergency) and AI.fingerprint in action.revoke, action
    written = decode(api.secret).state
    assert written.current == CI and AI.fingerprint in written.revoked


@pytest.mark.parametrize("stable_exists", [True, False])
def test_the_remembered_revocations_read(stable_exists: bool) -> None:
    class Reader:
        def get(self, path: str) -> dict[str, Any]:
            if not stable_exists:
                raise ApiError(404, "NotFound")
            return {"metadata": {"annotations": {REVOKED_ROOTS: "AA,bb"}}}

    expected = {"aa", "bb"} if stable_exists else set()
    assert revocations.read(cast(Client, Reader()), "/x") == expected


def test_revoking_only_a_previous_root_does_not_sign_with_an_ungated_new_ca() -> None:
    """`ca rotate --emergency --revoke <previous root>` (a retire-pending root whose key
    leaked): the signing CA is not compromised, so no new CA is made — one would sign as
    soon as it is read back, before consumers hold it — and the current CA signs on."""
    T0 = datetime(2026, 1, 1, tzinfo=UTC)
    a = d.CaInfo("aa", T0, T0 + timedelta(days=100))
    b = d.CaInfo("bb", T0 + H, T0 + timedelta(days=101))
    retiring = d.State(
        current=b,
        confirmed_at=T0,
        previous=(d.Previous(a, T0 + H, T0 + 30 * H, 24 * H),),
        swapped_at=T0 + H,
        issued_lifetime=24 * H,
        emergency_requested_at=T0 + 2 * H,
        revoke=frozenset({"aa"}),
    )
    action = d.decide(retiring, d.Observations(frozenset({"aa", "bb"})), T0 + 2 * H, d.Config())
    assert isinstance(action, d.Emergency) and not step.needs_key(retiring, action)
    after = step.apply(retiring, action)
    assert after is not None and after.current == b and after.confirmed_at == T0
    assert "aa" in after.revoked and not after.previous and after.emergency_requested_at is None


def test_an_emergency_asked_on_a_restored_secret_also_drops_the_roots_revoked_before() -> None:
    """`ca rotate --emergency` (naming a previous root) on a Secret restored from before an
    earlier emergency: the write drops the root that emergency revoked as well, so no
    state ever keeps a revoked root."""
    restored = d.State(
        current=AI,
        confirmed_at=NOW - 2 * H,
        previous=(d.Previous(BI, NOW - H, None, 24 * H),),
        emergency_requested_at=NOW,
        revoke=frozenset({BI.fingerprint}),
    )
    seen = d.Observations(frozenset({AI.fingerprint}), revoked=frozenset({AI.fingerprint}))
    action = d.decide(restored, seen, NOW, d.Config())
    assert isinstance(action, d.Emergency)
    assert action.revoke == {AI.fingerprint, BI.fingerprint}


def test_the_staged_ca_an_emergency_revokes_is_remembered_before_the_write() -> None:
    """Its key sat beside the compromised one: remembered on the stable bundle with the
    request, so a Secret deleted right after the emergency cannot adopt it back."""
    staged = d.State(current=AI, confirmed_at=NOW - 2 * H, next=BI, emergency_requested_at=NOW)
    assert revocations.wanted(staged) == {AI.fingerprint, BI.fingerprint}
    only_previous = replace(staged, revoke=frozenset({CI.fingerprint}))
    assert revocations.wanted(only_previous) == {CI.fingerprint}


def test_an_emergency_revoking_the_staged_ca_drops_its_key_from_the_secret() -> None:
    """A Staged backup restored after an emergency revoked its staged CA: the Emergency
    that drops the staged CA drops `next.key` with it."""
    staged = d.State(current=AI, confirmed_at=NOW - 2 * H, next=BI, issued_lifetime=24 * H)
    stored = decode(encode("ns", "ca", staged, CERTS, A_KEY, B_KEY))
    action = d.Emergency(NOW, frozenset({BI.fingerprint}))
    taken = step.take(stored, action, {}, lambda _: (b"", b""), NOW)
    assert taken is not None and taken.state.next is None
    assert taken.next_key is None
