"""Every process that runs the signer controller renews the signer's presence report,
leader election on or off; one that does not run the signer renews none."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from kube.leases import leases_path
from kube.presence import PresenceVerdict, judge
from manager.app import Process, make_registry, presence_writer
from manager.ops import Checks
from manager.options import Options
from signer import presence
from tests.unit.fakeapi import FakeApi

LEASES = leases_path("sss")
BASE = Options("/ca/tls.key", "/ca/tls.crt", "/ca/trust-bundle.pem")


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    yield fake
    fake.stop()


def process(api: FakeApi, **changes: Any) -> Process:
    opts = dataclasses.replace(BASE, leader_elect_resource_namespace="sss", **changes)
    proc = Process(opts=opts, registry=make_registry(), checks=Checks(), identity="pod-a_1")
    proc.client = api.client()
    return proc


@pytest.mark.parametrize("leader_elect", [True, False])
def test_a_signer_process_renews_its_presence_with_what_it_serves(
    api: FakeApi, leader_elect: bool
) -> None:
    writer = presence_writer(process(api, leader_elect=leader_elect, signer_name="example.com/s"))
    assert writer is not None and writer.renew()
    lease = api.get(LEASES, "service-serving-signer-presence")
    found = judge("sss", "service-serving-signer-presence", lease, datetime.now(UTC))
    assert found.state is PresenceVerdict.ALIVE and found.renewal.holder == "pod-a_1", found
    assert found.annotations[presence.SIGNER_NAME] == "example.com/s"
    assert found.annotations[presence.LEADER_ELECT] == str(leader_elect).lower()
    assert found.annotations[presence.VERSION]


def test_the_presence_sits_beside_the_leader_lease_it_is_named_after(api: FakeApi) -> None:
    writer = presence_writer(process(api, leader_elect_resource_name="mine"))
    assert writer is not None and writer.name == "mine-presence" and writer.namespace == "sss"


def test_a_process_without_the_signer_renews_no_presence(api: FakeApi) -> None:
    assert presence_writer(process(api, controllers=frozenset({"publisher"}))) is None


def test_the_leaders_presence_says_where_its_writes_waited_and_a_standbys_says_nothing(
    api: FakeApi,
) -> None:
    """While it leads, each renewal reports the writes since the last one and the mean
    seconds each waited in the signer's own budget and on the server; a standby leaves
    the leader's figure alone."""
    from kube.tokenbucket import TokenBucket

    proc = process(api)
    assert proc.client is not None
    proc.client.instrument(proc.registry)
    writer = presence_writer(proc)
    assert writer is not None
    assert writer.renew()  # a standby: no figure
    assert presence.API_WAITS not in lease_annotations(api)

    proc._controllers_idle.clear()  # leading
    proc.client.write_limiter = TokenBucket(1.0, 1, clock=lambda: 0.0, sleep=lambda _: None)
    # Its own writes at 1 write/s: the first takes the one token, the second waits 1 s;
    # each renewal reports the writes before it.
    assert writer.renew()
    assert writer.renew()
    waits = presence.parse_api_waits(lease_annotations(api)[presence.API_WAITS])
    assert waits is not None and waits.writes == 1 and waits.budget == 0.0
    assert writer.renew()
    waits = presence.parse_api_waits(lease_annotations(api)[presence.API_WAITS])
    assert waits is not None and waits.writes == 1 and waits.budget == 1.0 and waits.on_budget


def lease_annotations(api: FakeApi) -> dict[str, str]:
    lease = api.get(LEASES, "service-serving-signer-presence")
    assert lease is not None
    found: dict[str, str] = lease["metadata"]["annotations"]
    return found
