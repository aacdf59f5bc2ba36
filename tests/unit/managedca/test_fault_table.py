"""Every row of the gates' fault table (`managedca.faults.ROWS`) is checked: each source and
fault has exactly one row; a row with a scenario is driven through `decide`, the
controller or the material source here and must come out as the row says (the leader's
outcome, and each replica's when the scenario looks at one); a row without one says
why; and no row — checked or not — opens a gate (Swap, Confirm, Retire) unless it is an
explicit operator decision. The table is rendered into docs/managed-ca.md, and the doc
must carry it as rendered."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kube.client import ApiError
from managedca import decide as d
from managedca import faults, step
from managedca.codec import PREVIOUS, StoreError, decode
from managedca.controller import ManagedCAController
from managedca.observe import Observer
from managedca.report import Liveness, injector_view
from tests.unit.fakes import FakeRecorder
from tests.unit.managedca import test_hostile_reports as hostile
from tests.unit.managedca import test_restore as restore
from tests.unit.managedca.builders import NOW
from tests.unit.managedca.test_deleted_report import TwoReplicas
from tests.unit.managedca.test_waiting_objects import Api, _controller
from trust import convergence as c

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)
DAY = 24 * H
LIFE = 24 * H
CFG = d.Config(
    ca_lifetime=timedelta(days=100),
    propagation_delay=timedelta(minutes=10),
    max_leaf_lifetime=LIFE,
    retire_margin=H,
)
A = d.CaInfo("aa", T0, T0 + 100 * DAY)
B = d.CaInfo("bb", T0 + DAY, T0 + 101 * DAY)
STABLE = d.State(current=A, confirmed_at=T0, issued_lifetime=LIFE, injector_seen=True)
PUBLISHED = step.marked_published(
    step.staged(STABLE, B, T0 + 2 * DAY), T0 + 2 * DAY, T0 + 2 * DAY + CFG.propagation_delay
)
NOW_ = T0 + 3 * DAY
BOTH = frozenset({"aa", "bb"})
READY = d.ReplicaView("r1", BOTH, signing="aa", ready="bb")
SWAPPED = d.State(current=B, confirmed_at=T0, issued_lifetime=LIFE, injector_seen=True)
CONVERGED = d.InjectorView(True, BOTH)


def seen(**changes: Any) -> d.Observations:
    """Every gate of the staged rotation open (what each scenario then breaks)."""
    base = d.Observations(
        BOTH,
        (READY,),
        published_cas=(A, B),
        published_for=10 * CFG.propagation_delay,
        injector=CONVERGED,
        converged_for=10 * CFG.propagation_delay,
    )
    return replace(base, **changes)


def outcome(action: d.Action) -> str:
    return faults.wait(action.reason) if isinstance(action, d.Wait) else type(action).__name__


Result = tuple[str, str | None]  # (the leader's outcome, each replica's or None)


def _failing(controller: ManagedCAController) -> str:
    with pytest.raises(Exception):  # noqa: B017 - any failure of a step
        controller.sync()
    decision = controller.decision
    assert decision is not None
    return str(decision.reason)


class Failing(Api):
    """The staged rotation's API, refusing every read of paths containing `part`."""

    def __init__(self, part: str, status: int = 503) -> None:
        super().__init__()
        self.part, self.status = part, status

    def get(self, path: str, params: Any = None) -> dict[str, Any]:
        if self.part in path:
            raise ApiError(self.status, "ServiceUnavailable")
        return super().get(path, params)


# the scenarios ---------------------------------------------------------------------------


def new_leader() -> Result:
    # A new leader (the old one's Lease expired, or an older holder came back): its
    # monotonic measure of the delay starts at 0, and so does the time it has led.
    return outcome(d.decide(PUBLISHED, seen(published_for=timedelta(0)), NOW_, CFG)), None


def no_report() -> Result:
    return outcome(d.decide(PUBLISHED, seen(reports=()), NOW_, CFG)), None


def replica_report_deleted() -> Result:
    api = TwoReplicas()
    seconds = [0.0]
    controller = _controller(api, FakeRecorder())
    controller.observer.monotonic = lambda: seconds[0]
    controller.observer.liveness._monotonic = lambda: seconds[0]
    controller.sync_once()
    api.r2 = None
    seconds[0] += 5
    return outcome(controller.sync_once()), None


def replica_dead() -> Result:
    dead = replace(READY, live=False)
    return outcome(d.decide(PUBLISHED, seen(reports=(dead,)), NOW_, CFG)), None


def replica_report_unreadable() -> Result:
    api, _, b_fp = hostile._poisoned()
    api.reports.append(hostile._lease("forged", NOW, anchors=b_fp, lifetime="x"))
    controller = hostile._controller(api, FakeRecorder())
    controller.sync()
    decision = controller.decision
    assert decision is not None
    return faults.wait(str(decision.reason)), None


def replica_behind() -> Result:
    old = d.ReplicaView("r1", frozenset({"aa"}), signing="aa")
    return outcome(d.decide(PUBLISHED, seen(reports=(old,)), NOW_, CFG)), None


def reports_unreadable() -> Result:
    return _failing(_controller(Failing("/leases"), FakeRecorder())), None


def injector_never_seen() -> Result:
    true = replace(CFG, wait_for_injector="true")
    never = replace(PUBLISHED, injector_seen=False)
    return outcome(d.decide(never, seen(injector=None), NOW_, true)), None


def injector_deleted() -> Result:
    return outcome(d.decide(PUBLISHED, seen(injector=None), NOW_, CFG)), None


def injector_stale() -> Result:
    stale = d.InjectorView(False, BOTH)
    return outcome(d.decide(PUBLISHED, seen(injector=stale), NOW_, CFG)), None


def _report_lease(annotation: str, duration: object = 45) -> dict[str, Any]:
    return {
        "metadata": {"name": c.REPORT_NAME, "annotations": {c.REPORT_ANNOTATION: annotation}},
        "spec": {"renewTime": "2026-01-01T00:00:00.000000Z", "leaseDurationSeconds": duration},
    }


def injector_unparseable() -> Result:
    view = injector_view(_report_lease("{not json"), Liveness())
    return outcome(d.decide(PUBLISHED, seen(injector=view), NOW_, CFG)), None


def injector_out_of_bounds() -> Result:
    good = c.encode(c.ConvergenceReport(True, {}, {}, BOTH))
    view = injector_view(_report_lease(good, duration=10**9), Liveness())
    return outcome(d.decide(PUBLISHED, seen(injector=view), NOW_, CFG)), None


def injector_old_copy() -> Result:
    old = d.InjectorView(True, frozenset({"aa"}))
    return outcome(d.decide(PUBLISHED, seen(injector=old), NOW_, CFG)), None


def injector_unreadable() -> Result:
    return _failing(_controller(Failing(f"/leases/{c.REPORT_NAME}"), FakeRecorder())), None


def secret_absent() -> Result:
    return outcome(
        d.decide(None, seen(published=frozenset({"aa"}), published_cas=(A,)), NOW_, CFG)
    ), None


def _source_signing_b() -> Any:
    source = restore._source(remembered=frozenset(), published=(restore.BI,))
    b_state = d.State(current=restore.BI, confirmed_at=NOW - H)
    source.apply(restore._secret(b_state, restore.B_KEY, "10"))
    assert source.loaded().signing == restore.BI.fingerprint
    return source


def _replica(source: Any) -> str:
    signing = source.loaded().signing
    return faults.KEEPS if signing == restore.BI.fingerprint else f"signs with {signing}"


def secret_deleted() -> Result:
    source = _source_signing_b()
    source._deleted({})
    leader = outcome(
        d.decide(None, seen(published=frozenset({"aa"}), published_cas=(A,)), NOW_, CFG)
    )
    return leader, _replica(source)


def secret_older_event() -> Result:
    source = _source_signing_b()
    a_state = d.State(current=restore.AI, confirmed_at=NOW - H)
    source.apply(restore._secret(a_state, restore.A_KEY, "9"))  # a late watch event
    return "(the newest state)", _replica(source)


def _corrupt_controller(annotation: str, value: str) -> ManagedCAController:
    api = Api()
    api.secret["metadata"]["annotations"][annotation] = value
    return _controller(api, FakeRecorder())


def secret_unparseable() -> Result:
    api = Api()
    api.secret["data"]["ca.crt"] = "bm90IGEgY2VydA=="  # "not a cert"
    source = _source_signing_b()
    source.apply({**api.secret, "metadata": {**api.secret["metadata"], "resourceVersion": "99"}})
    return _failing(_controller(api, FakeRecorder())), _replica(source)


def current_expired() -> Result:
    old = d.CaInfo("old", T0 - 100 * DAY, T0 + H)
    state = d.State(
        current=old, confirmed_at=T0 - 100 * DAY, issued_lifetime=LIFE, injector_seen=True
    )
    return outcome(
        d.decide(state, seen(published=frozenset({"old"}), published_cas=(old,)), T0, CFG)
    ), None


def staged_backup() -> Result:
    from tests.unit.managedca.test_restored_phases import LIVE, STAGED_BACKUP, _secret

    source = restore._source(remembered=frozenset(), published=(restore.BI,))
    source.apply(_secret(LIVE, restore.B_KEY, None, "500"))
    source.apply(_secret(STAGED_BACKUP, restore.A_KEY, restore.B_KEY, "900"))
    obs = d.Observations(frozenset({restore.BI.fingerprint}), (), published_cas=(restore.BI,))
    return outcome(d.decide(STAGED_BACKUP, obs, NOW, CFG)), _replica(source)


def secret_unreadable() -> Result:
    return _failing(_controller(Failing("/secrets/ca"), FakeRecorder())), None


def next_deleted() -> Result:
    return outcome(d.decide(STABLE, seen(), NOW_, CFG)), None


def next_key_missing() -> Result:
    api = Api()
    stored = decode(api.secret)
    broken = replace(stored, next_key=None)
    try:
        step.take(broken, d.Swap(NOW), {}, lambda _: (b"", b""), NOW)
    except StoreError:
        return faults.FAILING, None
    return "took the swap", None


def next_expiring() -> Result:
    short = d.CaInfo("bb", T0 + DAY, NOW_ + H)
    state = replace(PUBLISHED, next=short)
    return outcome(d.decide(state, seen(), NOW_, CFG)), None


def next_replaced() -> Result:
    other = d.CaInfo("cc", T0 + DAY, T0 + 101 * DAY)
    state = replace(PUBLISHED, next=other)
    return outcome(d.decide(state, seen(published_cas=(A, B)), NOW_, CFG)), None


def previous_deleted() -> Result:
    swapped = d.State(current=B, confirmed_at=T0, issued_lifetime=LIFE, injector_seen=True)
    return outcome(d.decide(swapped, seen(), NOW_, CFG)), None


def previous_unparseable() -> Result:
    return _failing(_corrupt_controller(PREVIOUS, "{not json")), None


def previous_endless_lifetime() -> Result:
    endless = d.Previous(A, T0 + 2 * DAY, None, timedelta(seconds=10**12))
    state = replace(SWAPPED, previous=(endless,))
    signing_b = d.ReplicaView("r1", BOTH, signing="bb")
    action = d.decide(state, seen(reports=(signing_b,)), NOW_, CFG)
    assert isinstance(action, d.ScheduleRetire)
    assert action.retire_at <= NOW_ + A.lifetime + CFG.retire_margin
    return outcome(action), None


def previous_unscheduled() -> Result:
    restored = d.Previous(A, T0 + 2 * DAY, None, LIFE)
    state = replace(SWAPPED, previous=(restored,))
    return outcome(d.decide(state, seen(), NOW_, CFG)), None


def retired_forgotten() -> Result:
    after = d.State(current=B, confirmed_at=T0, issued_lifetime=LIFE, injector_seen=True)
    return outcome(d.decide(after, seen(), NOW_, CFG)), None


E = d.CaInfo("ee", T0, T0 + 100 * DAY)


def emergency_flag_lost() -> Result:
    state = d.State(current=E, previous=(d.Previous(A, T0, None, LIFE),), issued_lifetime=LIFE)
    both = frozenset({"aa", "ee"})
    return outcome(d.decide(state, seen(published=both, published_cas=(A, E)), NOW_, CFG)), None


def emergency_flag_on_confirmed() -> Result:
    from tests.unit.managedca.test_emergency_flag import flagged_confirmed_secret

    assert not decode(flagged_confirmed_secret()).state.emergency
    return "(ignored on a confirmed CA)", None


def emergency_backup() -> Result:
    backup = d.State(current=E, confirmed_at=T0, emergency=True, issued_lifetime=LIFE)
    only_a = seen(published=frozenset({"aa"}), published_cas=(A,))
    action = d.decide(backup, only_a, NOW_, CFG)
    assert isinstance(action, d.Adopt) and action.unconfirm
    after = step.apply(backup, action)
    assert after is not None
    both = seen(published=frozenset({"aa", "ee"}), published_cas=(A, E), published_for=timedelta(0))
    return outcome(d.decide(after, both, NOW_, CFG)), None


def _memory_refuses() -> str:
    """A replica that saw A revoked keeps B when a Secret naming A as current comes."""
    source = restore._source(remembered=frozenset(), published=(restore.AI, restore.BI))
    revoking = d.State(
        current=restore.BI, confirmed_at=NOW - H, revoked=frozenset({restore.AI.fingerprint})
    )
    source.apply(restore._secret(revoking, restore.B_KEY, "10"))
    restored = d.State(current=restore.AI, confirmed_at=NOW - 2 * H)
    source.apply(restore._secret(restored, restore.A_KEY, "20"))
    signing = source.loaded().signing
    return faults.SIGNS_NOTHING_NEW if signing != restore.AI.fingerprint else "signs with A"


def revoked_forgotten() -> Result:
    revoked = seen(revoked=frozenset({"aa"}))
    return outcome(d.decide(STABLE, revoked, NOW_, CFG)), _memory_refuses()


def nothing_published() -> Result:
    empty = seen(published=frozenset(), published_cas=())
    return outcome(d.decide(PUBLISHED, empty, NOW_, CFG)), None


def bundle_lagging() -> Result:
    retired = d.CaInfo("rr", T0 - 50 * DAY, T0 + 50 * DAY)
    state = replace(STABLE, retired=("rr",))
    lagging = seen(published=frozenset({"aa", "rr"}), published_cas=(A, retired))
    action = d.decide(state, lagging, NOW_, CFG)
    return ("(a retired root is not adopted)" if not isinstance(action, d.Adopt) else "Adopt"), None


def bundle_unparseable() -> Result:
    roots = Observer._published_roots(
        ("-----BEGIN CERTIFICATE-----\nnot\n-----END CERTIFICATE-----\n",)
    )
    assert roots == {}
    return outcome(
        d.decide(PUBLISHED, seen(published=frozenset(roots), published_cas=()), NOW_, CFG)
    ), None


def bundle_expired_root() -> Result:
    expired = d.CaInfo("xx", T0 - 200 * DAY, T0 - DAY)
    with_expired = seen(published=BOTH | {"xx"}, published_cas=(A, B, expired))
    action = d.decide(PUBLISHED, with_expired, NOW_, CFG)
    return (
        "(an expired root is not adopted)" if not isinstance(action, d.Adopt) else "Adopt"
    ), None


def bundles_unreadable() -> Result:
    return _failing(_controller(Failing("clustertrustbundles"), FakeRecorder())), None


def stable_absent() -> Result:
    source = restore._source(remembered=frozenset(), published=())
    a_state = d.State(current=restore.AI, confirmed_at=NOW - H)
    source.apply(restore._secret(a_state, restore.A_KEY, "10"))
    replica = (
        faults.FOLLOWS if source.loaded().signing == restore.AI.fingerprint else "signs nothing"
    )
    empty = seen(published=frozenset(), published_cas=())
    return outcome(d.decide(PUBLISHED, empty, NOW_, CFG)), replica


def stable_deleted() -> Result:
    published: list[tuple[d.CaInfo, ...]] = [(restore.BI,)]
    source = restore._source()
    source.remember_revoked_from(lambda: (frozenset(), published[0]))
    b_state = d.State(current=restore.BI, confirmed_at=NOW - H)
    source.apply(restore._secret(b_state, restore.B_KEY, "10"))
    published[0] = ()  # the stable bundle is deleted: a 404 reads as nothing published
    restored = d.State(current=restore.AI, confirmed_at=NOW - 2 * H)
    source.apply(restore._secret(restored, restore.A_KEY, "20"))
    empty = seen(published=frozenset(), published_cas=())
    return outcome(d.decide(PUBLISHED, empty, NOW_, CFG)), _replica(source)


def stable_restored() -> Result:
    from tests.unit.managedca.test_restored_phases import LIVE, STAGED_BACKUP, _secret

    source = restore._source(remembered=frozenset(), published=(restore.BI,))
    source.apply(_secret(LIVE, restore.B_KEY, None, "500"))
    source.apply(_secret(STAGED_BACKUP, restore.A_KEY, restore.B_KEY, "900"))
    only_a = seen(published=frozenset({"aa"}), published_cas=(A,))
    swapped = d.State(current=B, confirmed_at=T0, issued_lifetime=LIFE, injector_seen=True)
    return outcome(d.decide(swapped, only_a, NOW_, CFG)), _replica(source)


def record_unreadable() -> Result:
    from tests.unit.managedca.test_revocation_record_unreadable import FAULTS, Record
    from tests.unit.managedca.test_revocation_record_unreadable import _source as unreadable

    source = unreadable(Record(FAULTS["503"]))
    restored = d.State(
        current=restore.AI, previous=(d.Previous(restore.BI, NOW, None),), confirmed_at=NOW - H
    )
    source.apply(restore._secret(restored, restore.A_KEY, "90"))
    replica = (
        faults.SIGNS_NOTHING_NEW
        if source.loaded().signing != restore.AI.fingerprint
        else "signs with A"
    )
    return _failing(_controller(Failing("clustertrustbundles"), FakeRecorder())), replica


def record_absent() -> Result:
    return outcome(d.decide(STABLE, seen(revoked=frozenset({"aa"})), NOW_, CFG)), _memory_refuses()


RETIRING = d.State(
    current=B,
    confirmed_at=T0 + DAY,
    previous=(d.Previous(A, T0 + 2 * DAY, NOW_ - H, LIFE),),
    swapped_at=T0 + 2 * DAY,
    issued_lifetime=LIFE,
    injector_seen=True,
)


def _retire(server_now: datetime | None) -> str:
    """The leader's outcome for a root whose retire time passed an hour ago on its own
    clocks, with the API server's clock at `server_now`."""
    observed = seen(
        reports=(d.ReplicaView("r1", BOTH, signing="bb"),),
        led_since=NOW_ - 2 * H,
        led_for=2 * H,
        server_now=server_now,
    )
    return outcome(d.decide(RETIRING, observed, NOW_, CFG))


def server_clock_unknown() -> Result:
    assert _retire(NOW_) == "Retire"  # the scenario's baseline: every clock agrees
    return _retire(d.SERVER_CLOCK_UNKNOWN), None


def server_clock_behind() -> Result:
    return _retire(NOW_ - 2 * H), None  # an old Date, advanced by the monotonic clock


def server_clock_unparseable() -> Result:
    from kube.times import ServerClock

    clock = ServerClock()
    clock.saw("Mon, 99 Foo 2026 25:61:61 GMT")
    observer = Observer(
        Api(),  # type: ignore[arg-type]
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1beta1",
        server_clock=clock.now,
    )
    return _retire(observer._server_now()), None


def server_clock_ahead() -> Result:
    # A year ahead while the leader's clocks are an hour and a half before the retire
    # time: the server's clock alone retires nothing.
    early = replace(
        RETIRING,
        previous=(replace(RETIRING.previous[0], retire_at=NOW_ + timedelta(minutes=90)),),
    )
    observed = seen(
        reports=(d.ReplicaView("r1", BOTH, signing="bb"),),
        led_since=NOW_ - 2 * H,
        led_for=2 * H,
        server_now=NOW_ + 365 * DAY,
    )
    return outcome(d.decide(early, observed, NOW_, CFG)), None


SCENARIOS: dict[str, Callable[[], Result]] = {
    f.__name__: f
    for f in (
        new_leader,
        no_report,
        replica_report_deleted,
        replica_dead,
        replica_report_unreadable,
        replica_behind,
        reports_unreadable,
        injector_never_seen,
        injector_deleted,
        injector_stale,
        injector_unparseable,
        injector_out_of_bounds,
        injector_old_copy,
        injector_unreadable,
        secret_absent,
        secret_deleted,
        secret_older_event,
        secret_unparseable,
        current_expired,
        staged_backup,
        secret_unreadable,
        next_deleted,
        next_key_missing,
        next_expiring,
        next_replaced,
        previous_deleted,
        previous_unparseable,
        previous_endless_lifetime,
        previous_unscheduled,
        retired_forgotten,
        emergency_flag_lost,
        emergency_flag_on_confirmed,
        emergency_backup,
        revoked_forgotten,
        nothing_published,
        bundle_lagging,
        bundle_unparseable,
        bundle_expired_root,
        bundles_unreadable,
        stable_absent,
        stable_deleted,
        stable_restored,
        record_unreadable,
        record_absent,
        server_clock_unknown,
        server_clock_behind,
        server_clock_unparseable,
        server_clock_ahead,
    )
}


# the checks --------------------------------------------------------------------------------


def test_every_source_and_fault_has_exactly_one_row() -> None:
    cells = [(r.source, r.fault) for r in faults.ROWS]
    wanted = [(s, f) for s, _ in faults.SOURCES for f, _ in faults.FAULTS]
    assert sorted(cells) == sorted(wanted), set(wanted) ^ set(cells)


def test_every_row_is_checked_or_says_why() -> None:
    for r in faults.ROWS:
        assert bool(r.check) != bool(r.why), r
        if r.check:
            assert r.check in SCENARIOS, f"no scenario {r.check!r} for {r}"
    used = {r.check for r in faults.ROWS}
    assert set(SCENARIOS) <= used, f"scenarios no row names: {set(SCENARIOS) - used}"


def test_no_fault_opens_a_gate() -> None:
    for r in faults.ROWS:
        if r.leader.startswith(faults.OPERATOR):
            continue
        assert r.leader not in faults.OPENS, r
        if r.leader.startswith("wait "):
            assert r.leader.removeprefix("wait ") in d.WAIT_REASONS, r


CHECKED = [r for r in faults.ROWS if r.check]


@pytest.mark.parametrize("row", CHECKED, ids=[f"{r.source}-{r.fault}" for r in CHECKED])
def test_each_row_is_what_decide_and_the_source_do(row: faults.Row) -> None:
    leader, replica = SCENARIOS[row.check]()
    assert leader == row.leader, f"{row.source} {row.fault}: the leader {leader!r}"
    assert leader not in faults.OPENS
    if replica is not None:
        assert replica == row.replica, f"{row.source} {row.fault}: a replica {replica!r}"


def test_the_docs_carry_the_table_as_rendered() -> None:
    doc = (ROOT / "docs/managed-ca.md").read_text()
    found = re.search(r"<!-- fault-table -->\n(.*?)<!-- /fault-table -->", doc, re.S)
    assert found, "docs/managed-ca.md has no fault table markers"
    assert found.group(1) == faults.render(), (
        "docs/managed-ca.md's fault table differs from managedca.faults: regenerate it "
        "(.venv/bin/python -m managedca.faults)"
    )
