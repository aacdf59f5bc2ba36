"""kube.leases: one writer for a report Lease — created when absent, replaced under the
resourceVersion it read, and a conflict is the next period's business, not an error."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kube.client import ApiError, Client
from kube.leases import LeaseRef, Renewal, leases_path, renewal, write_report
from kube.times import micro_time

NOW = datetime(2026, 12, 6, 3, 0, 0, 123456, tzinfo=UTC)


class Leases:
    def __init__(self, fail: ApiError | None = None) -> None:
        self.lease: dict[str, Any] | None = None
        self.calls: list[str] = []
        self.fail = fail

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        self.calls.append(f"GET {path}")
        if self.lease is None:
            raise ApiError(404, "NotFound")
        return json.loads(json.dumps(self.lease))

    def create(self, path: str, body: Any, **_: Any) -> Any:
        self.calls.append(f"POST {path}")
        if self.fail is not None:
            raise self.fail
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        return self.lease

    def replace(self, path: str, body: Any, **_: Any) -> Any:
        self.calls.append(f"PUT {path} rv={body['metadata'].get('resourceVersion')}")
        if self.fail is not None:
            raise self.fail
        self.lease = body
        return body


def write(client: Leases, **annotations: str) -> bool:
    return write_report(
        cast(Client, client),
        LeaseRef("ns", "a/b"),
        holder="me",
        duration_seconds=30,
        now=NOW,
        annotations=annotations,
        labels={"l": "v"},
    )


def test_a_report_lease_is_created_then_replaced_under_the_version_read() -> None:
    client = Leases()
    assert write(client, x="1")
    assert write(client, y="2")
    path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases"
    assert client.calls == [
        f"GET {path}/a%2Fb",
        f"POST {path}",
        f"GET {path}/a%2Fb",
        f"PUT {path}/a%2Fb rv=1",
    ]
    assert client.lease is not None
    assert client.lease["metadata"]["annotations"] == {"y": "2"}  # the writer owns it all
    assert client.lease["metadata"]["labels"] == {"l": "v"}
    assert client.lease["spec"] == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 30,
        "renewTime": "2026-12-06T03:00:00.123456Z",
    }
    assert (
        leases_path("kube system") == "/apis/coordination.k8s.io/v1/namespaces/kube%20system/leases"
    )


def test_a_conflict_is_reported_not_raised_and_other_errors_raise() -> None:
    assert not write(Leases(ApiError(409, "AlreadyExists")))
    with pytest.raises(ApiError):
        write(Leases(ApiError(403, "Forbidden")))


# --- renewal: is this Lease renewed, on a reader's clock ------------------------------


def lease(holder: str | None, renewed: datetime | None, duration: object) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["renewTime"] = micro_time(renewed)
    return {"spec": spec}


def test_a_lease_renewed_within_its_duration_is_fresh_and_says_by_whom() -> None:
    got = renewal(lease("pod-1", NOW - timedelta(seconds=10), 15), NOW)
    assert got == Renewal("pod-1", NOW - timedelta(seconds=10), 15.0, 10.0)
    assert got.fresh


def test_a_lease_renewed_longer_ago_than_its_duration_is_stale() -> None:
    assert not renewal(lease("pod-1", NOW - timedelta(seconds=16), 15), NOW).fresh


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"renewTime": "not a time", "leaseDurationSeconds": 15},
        {"renewTime": "2026-12-06T03:00:00.000000Z"},
        {"renewTime": "2026-12-06T03:00:00.000000Z", "leaseDurationSeconds": "15"},
    ],
)
def test_a_lease_without_a_readable_renewal_is_never_fresh(spec: dict[str, Any]) -> None:
    got = renewal({"spec": spec}, NOW)
    assert not got.fresh
    assert got.holder == ""


def test_a_released_lease_has_no_holder_whatever_its_renewal() -> None:
    got = renewal(lease("", NOW, 15), NOW)
    assert got.holder == ""
    assert got.fresh  # freshness says nothing of the holder: the caller decides


@given(
    age_ms=st.integers(min_value=-(10**9), max_value=10**9),
    duration=st.integers(min_value=1, max_value=3600),
)
def test_fresh_exactly_while_renew_time_plus_duration_is_not_past(
    age_ms: int, duration: int
) -> None:
    renewed = NOW - timedelta(milliseconds=age_ms)
    got = renewal(lease("h", renewed, duration), NOW)
    assert got.fresh == (renewed + timedelta(seconds=duration) >= NOW)
