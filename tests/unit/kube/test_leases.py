"""kube.leases: one writer for a report Lease — created when absent, replaced under the
resourceVersion it read, and a conflict is the next period's business, not an error."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from kube.client import ApiError, Client
from kube.leases import LeaseRef, leases_path, write_report

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
