"""The retire — the one step that cannot be undone — needs the leader's monotonic clock
and the API server's clock as well as its wall clock: a leader elected with its clock
ahead by more than the retire margin does not retire at its first step (the server's
clock, from the Date of its answers, is not there yet), a leader whose clocks agree
retires at its first step (no wait after an election), and a leader whose clock steps
ahead while it leads does not retire before its monotonic clock has counted to the
retire time."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from managedca import decide as d
from managedca.codec import ca_info, encode
from managedca.controller import ManagedCAController
from managedca.observe import Observer
from managedca.report import LOADED_ANCHORS, READY_TO_SIGN, SIGNING_CA
from tests.unit.managedca.builders import NOW, H, ca_pems, replica_lease

CFG = d.Config(
    ca_lifetime=timedelta(days=100),
    propagation_delay=timedelta(minutes=10),
    max_leaf_lifetime=24 * H,
    retire_margin=timedelta(minutes=5),  # the least run accepts
)
A_KEY, A = ca_pems("a")
B_KEY, B = ca_pems("b")
AI, BI = ca_info(A), ca_info(B)
SWAP_READ_BACK = NOW - 24 * H  # by the previous leader, whose clock was right
RETIRE_AT = SWAP_READ_BACK + 24 * H + CFG.retire_margin  # = NOW + 5 min
STATE = d.State(
    current=BI,
    confirmed_at=NOW - 30 * H,
    previous=(d.Previous(AI, SWAP_READ_BACK, RETIRE_AT, 24 * H),),
    swapped_at=SWAP_READ_BACK,
    issued_lifetime=24 * H,
)


class Api:
    def __init__(self) -> None:
        self.secret = encode("ns", "ca", STATE, {AI.fingerprint: A, BI.fingerprint: B}, B_KEY, None)
        self.secret["metadata"]["resourceVersion"] = "7"
        self.n = 0

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        if path.endswith("/secrets/ca"):
            return copy.deepcopy(self.secret)
        if "clustertrustbundles" in path:
            return {"items": [{"spec": {"trustBundle": (A + B).decode()}}]}
        if path.endswith("/leases"):
            self.n += 1
            annotations = {
                LOADED_ANCHORS: f"{AI.fingerprint},{BI.fingerprint}",
                SIGNING_CA: BI.fingerprint,
                READY_TO_SIGN: "",
            }
            return {"items": [replica_lease("r", annotations, NOW + timedelta(seconds=self.n))]}
        raise ApiError(404, "NotFound")

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(body))


class Clocks:
    """The leader's wall clock (`skew` ahead of the true time) and its monotonic clock."""

    def __init__(self, skew: timedelta) -> None:
        self.true = NOW
        self.skew = skew
        self.step = timedelta(0)  # a wall-clock step while leading

    def wall(self) -> Any:
        return self.true + self.skew + self.step

    def mono(self) -> float:
        return (self.true - NOW).total_seconds()


def _leader(clocks: Clocks, server: Any = None) -> ManagedCAController:
    return ManagedCAController(
        cast(Client, Api()),
        namespace="ns",
        secret_name="ca",
        signer_name="example.com/x",
        ctb_version="v1beta1",
        config=CFG,
        make_ca=lambda now: (b"", b""),
        clock=clocks.wall,
        registry=CollectorRegistry(),
        monotonic=clocks.mono,
        server_clock=server or (lambda: clocks.true),  # the API server's, right
    )


def test_a_new_leader_whose_clock_runs_ahead_does_not_retire_at_once() -> None:
    # 10 min ahead: its "now" is past RETIRE_AT; the true time (the server's) is 5 min
    # before it, and a 24 h leaf A signed just before the swap is still valid.
    clocks = Clocks(timedelta(minutes=10))
    leader = _leader(clocks)
    action = leader.sync_once()
    assert isinstance(action, d.Wait) and action.reason == "retire-time", action
    assert "API server's clock" in action.why, action
    assert action.until is not None and action.until <= clocks.wall() + CFG.retire_margin
    clocks.true += CFG.retire_margin  # the true retire time: now it may go
    assert isinstance(leader.sync_once(), d.Retire)


def test_a_new_leader_whose_clocks_agree_retires_at_its_first_step() -> None:
    clocks = Clocks(timedelta(0))
    clocks.true += CFG.retire_margin  # the retire time, as the leader is elected
    assert isinstance(_leader(clocks).sync_once(), d.Retire)


def test_a_leader_that_cannot_read_the_server_s_clock_does_not_retire() -> None:
    clocks = Clocks(timedelta(0))
    clocks.true += CFG.retire_margin
    action = _leader(clocks, server=lambda: None).sync_once()  # no answer had a Date
    assert isinstance(action, d.Wait) and action.reason == "retire-time", action


def test_a_clock_stepped_ahead_while_leading_does_not_retire_early() -> None:
    # The API server's clock takes the same step (one bad NTP source for both): only the
    # leader's monotonic clock can tell.
    clocks = Clocks(timedelta(0))
    leader = _leader(clocks, server=clocks.wall)
    leader.sync_once()
    clocks.true += timedelta(minutes=4)  # led for 4 min: 1 min before the retire time
    clocks.step = timedelta(minutes=30)  # NTP steps the clock
    action = leader.sync_once()
    assert isinstance(action, d.Wait) and action.reason == "retire-time", action
    clocks.true += timedelta(minutes=1)
    assert isinstance(leader.sync_once(), d.Retire)


def test_the_leader_reads_the_api_servers_clock_from_its_client_unless_given_one() -> None:
    """Nothing in the process passes a server clock: the observer takes the client's
    `server_now` (the Date of its answers), so a real leader never retires on its wall
    clock alone; a client that has seen no Date yet is an unknown server clock."""
    assert callable(getattr(Client, "server_now", None))

    class _Dated:
        def __init__(self, now: datetime | None) -> None:
            self.now = now

        def server_now(self) -> datetime | None:
            return self.now

    def observer(client: _Dated) -> Observer:
        return Observer(
            cast(Client, client),
            namespace="ns",
            secret_name="ca",
            signer_name="example.com/x",
            ctb_version="v1",
        )

    assert observer(_Dated(NOW))._server_now() == NOW
    assert observer(_Dated(None))._server_now() == d.SERVER_CLOCK_UNKNOWN
