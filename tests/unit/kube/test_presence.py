"""The presence Lease: every process renews one Lease; a reader judges it by its own
timestamps."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from kube.leases import leases_path
from kube.presence import PresenceVerdict, PresenceWriter, judge, read
from kube.times import micro_time
from tests.unit.fakeapi import FakeApi

NOW = datetime(2026, 12, 6, 2, 0, 0, tzinfo=UTC)
LEASES = leases_path("sss")


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi().start()
    yield fake
    fake.stop()


def writer(api: FakeApi, identity: str, at: datetime = NOW) -> PresenceWriter:
    return PresenceWriter(
        api.client(),
        "sss",
        "signer-presence",
        identity,
        annotations={"example.com/serves": "x"},
        labels={"example.com/presence": "signer"},
        clock=lambda: at,
    )


def test_the_first_renewal_creates_the_lease_and_later_ones_replace_it(api: FakeApi) -> None:
    assert writer(api, "a").renew()
    first = api.get(LEASES, "signer-presence")
    assert first is not None
    assert first["spec"]["holderIdentity"] == "a"
    assert first["metadata"]["annotations"] == {"example.com/serves": "x"}
    assert first["metadata"]["labels"] == {"example.com/presence": "signer"}
    assert writer(api, "b", NOW + timedelta(seconds=10)).renew()
    second = api.get(LEASES, "signer-presence")
    assert second is not None
    assert second["spec"]["holderIdentity"] == "b"
    assert second["spec"]["renewTime"] == micro_time(NOW + timedelta(seconds=10))
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def test_a_conflict_means_another_process_renewed_and_is_not_a_failure(api: FakeApi) -> None:
    writer(api, "a").renew()
    api.fail("PUT", f"{LEASES}/signer-presence", 409)
    assert writer(api, "b").renew()


def test_a_refused_renewal_is_reported_not_raised(api: FakeApi) -> None:
    api.fail("GET", f"{LEASES}/signer-presence", 403)
    assert not writer(api, "a").renew()


@pytest.mark.parametrize(
    ("renewed_ago", "state"),
    [
        (0, PresenceVerdict.ALIVE),
        (39.9, PresenceVerdict.ALIVE),
        (40, PresenceVerdict.ALIVE),
        (40.1, PresenceVerdict.EXPIRED),
    ],
)
def test_a_reader_judges_by_renew_time_and_duration(
    renewed_ago: float, state: PresenceVerdict
) -> None:
    lease = {
        "spec": {
            "holderIdentity": "a",
            "leaseDurationSeconds": 40,
            "renewTime": micro_time(NOW - timedelta(seconds=renewed_ago)),
        }
    }
    assert judge("sss", "p", lease, NOW).state is state


def test_a_lease_without_times_is_expired_and_none_is_missing() -> None:
    assert (
        judge("sss", "p", {"spec": {"holderIdentity": "a"}}, NOW).state is PresenceVerdict.EXPIRED
    )
    assert judge("sss", "p", None, NOW).state is PresenceVerdict.MISSING


def test_read_finds_what_the_writer_wrote(api: FakeApi) -> None:
    assert read(api.client(), "sss", "signer-presence", NOW).state is PresenceVerdict.MISSING
    writer(api, "a").renew()
    found = read(api.client(), "sss", "signer-presence", NOW + timedelta(seconds=5))
    assert found.alive and found.renewal.holder == "a"
    assert found.annotations == {"example.com/serves": "x"}
    later = read(api.client(), "sss", "signer-presence", NOW + timedelta(minutes=5))
    assert later.state is PresenceVerdict.EXPIRED
