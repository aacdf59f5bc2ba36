"""The request policy (`kube.client.Client`) over its transport: one transport carries
every request of a client, and a client behind an HTTP proxy (urllib3) gets the same
policy — credentials retry, error mapping with Retry-After, counts, watches."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client as k8s_client

from kube.client import ApiError, Client
from kube.credentials import Credentials
from kube.urllib3_transport import Urllib3Transport
from tests.unit.kube.helpers import ScriptedServer


def reply(conn: socket.socket, status: str, body: bytes, *headers: bytes) -> None:
    head = b"HTTP/1.1 " + status.encode() + b"\r\n" + b"".join(h + b"\r\n" for h in headers)
    conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def test_the_re_read_after_a_conflict_goes_over_the_write_s_connection() -> None:
    def answer(conn: socket.socket, n: int) -> None:
        if n == 1:
            reply(conn, "409 Conflict", b'{"kind":"Status","reason":"Conflict","code":409}')
        else:
            reply(conn, "200 OK", b'{"metadata":{"name":"x"}}')

    server = ScriptedServer(answer)
    try:
        client = server.client()
        with pytest.raises(ApiError) as conflict:
            client.patch("/api/v1/namespaces/ns/configmaps/x", {"data": {}})
        assert conflict.value.status == 409
        assert client.get("/api/v1/namespaces/ns/configmaps/x")["metadata"]["name"] == "x"
        assert server.connections == 1, "one transport, one pooled connection"
    finally:
        server.close()


def test_a_proxied_client_applies_the_same_policy_over_urllib3(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")

    def answer(conn: socket.socket, n: int) -> None:
        request = server.requests[n - 1]
        if n > 1 and b"Bearer old" in request:
            reply(conn, "401 Unauthorized", b'{"kind":"Status","code":401}')
        elif request.startswith(b"GET ") and b"watch=true" in request:
            events = b'{"type":"ADDED","object":{"a":1}}\n{"type":"DELETED","object":{"a":1}}\n'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)
            )
        elif request.startswith(b"GET "):
            body = b'{"kind":"Status","reason":"TooManyRequests","code":429}'
            reply(conn, "429 Too Many Requests", body, b"Retry-After: 7")
        else:
            reply(conn, "200 OK", b'{"n":%d}' % n)

    server = ScriptedServer(answer)
    try:
        configuration = k8s_client.Configuration()
        configuration.host = "http://api.example:6443"
        configuration.proxy = server.url
        client = Client(configuration, qps=0, credentials=Credentials.token_file(str(token)))
        assert isinstance(client.transport, Urllib3Transport)

        assert client.patch("/api/v1/x", {"a": 1}) == {"n": 1}
        token.write_text("new")
        assert client.patch("/api/v1/x", {"a": 2}) == {"n": 3}  # 401, re-read, once more
        with pytest.raises(ApiError) as throttled:
            client.get("/api/v1/y")
        assert throttled.value.status == 429 and throttled.value.retry_after == 7.0
        events = list(client.watch("/api/v1/pods", {}, read_timeout=5))
        assert [e["type"] for e in events] == ["ADDED", "DELETED"]

        assert client.request_count().by_method == {"PATCH": 2, "GET": 2}
        lines = [r.split(b"\r\n", 1)[0] for r in server.requests]
        assert lines[0] == b"PATCH http://api.example:6443/api/v1/x HTTP/1.1"
        assert [b"Bearer new" in r for r in server.requests] == [False, False, True, True, True]
        assert b"Content-Type: application/merge-patch+json" in server.requests[0]
    finally:
        server.close()


def test_a_kubeconfig_that_gives_no_client_is_one_line_naming_the_kubeconfig(
    tmp_path: Path,
) -> None:
    from kube.client import KubeconfigError, connect

    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\ncontexts: []\nclusters: []\nusers: []\n")
    with pytest.raises(KubeconfigError) as caught:
        connect(str(broken), context="nowhere")
    message = str(caught.value)
    assert message.startswith("kubeconfig: ") and "\n" not in message
    assert "nowhere" in message


def test_a_tiny_write_budget_shows_in_the_rate_limiter_metric_and_reads_never_wait() -> None:
    """client-go's `rest_client_rate_limiter_duration_seconds` moves with the client's own
    budget: at 1 write/s with a burst of 1, three writes at once wait 0, 1 and 2 s in the
    limiter; `rest_client_request_duration_seconds` and `rest_client_requests_total` count
    every request by verb (and code), and the write totals say where writes waited."""
    from prometheus_client import CollectorRegistry

    from kube.tokenbucket import TokenBucket

    def answer(conn: socket.socket, n: int) -> None:
        if n == 4:
            reply(conn, "409 Conflict", b'{"kind":"Status","reason":"Conflict","code":409}')
        else:
            reply(conn, "201 Created", b"{}")

    server = ScriptedServer(answer)
    try:
        client = server.client()
        registry = CollectorRegistry()
        metrics = client.instrument(registry)
        slept: list[float] = []
        client.write_limiter = TokenBucket(1.0, 1, clock=lambda: 0.0, sleep=slept.append)
        for _ in range(3):
            client.create("/api/v1/namespaces/ns/configmaps", {})
        with pytest.raises(ApiError):
            client.get("/api/v1/namespaces/ns/configmaps/x")
        host = {"host": server.url.split("//", 1)[1]}

        def value(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(name, {**labels, **host})

        assert slept == [1.0, 2.0]
        assert value("rest_client_rate_limiter_duration_seconds_sum", verb="POST") == 3.0
        assert value("rest_client_rate_limiter_duration_seconds_count", verb="POST") == 3.0
        assert (
            value("rest_client_rate_limiter_duration_seconds_bucket", verb="POST", le="0.005") == 1
        )
        assert value("rest_client_rate_limiter_duration_seconds_count", verb="GET") is None
        assert value("rest_client_request_duration_seconds_count", verb="POST") == 3.0
        assert value("rest_client_request_duration_seconds_count", verb="GET") == 1.0
        assert value("rest_client_requests_total", code="201", method="POST") == 3.0
        assert value("rest_client_requests_total", code="409", method="GET") == 1.0
        totals = metrics.totals()
        assert (totals.writes, totals.limiter_seconds) == (3, 3.0)
    finally:
        server.close()


def test_the_client_reads_the_server_clock_from_every_answer_s_date_header() -> None:
    """`Client.server_now()`: the `Date` of the newest answer, an error answer too, over
    the direct transport; views made by `with_own_limiter` share it."""

    def answer(conn: socket.socket, n: int) -> None:
        if n == 1:
            reply(conn, "200 OK", b"{}", b"Date: Fri, 04 Dec 2026 16:30:05 GMT")
        else:
            body = b'{"kind":"Status","reason":"NotFound","code":404}'
            reply(conn, "404 Not Found", body, b"Date: Fri, 04 Dec 2026 16:31:00 GMT")

    server = ScriptedServer(answer)
    try:
        client = server.client()
        assert client.server_now() is None
        client.get("/api/v1/namespaces/ns/configmaps/x")
        first = client.server_now()
        assert first is not None
        assert datetime(2026, 12, 4, 16, 30, 5, tzinfo=UTC) <= first
        assert first < datetime(2026, 12, 4, 16, 30, 6, tzinfo=UTC)
        view = client.with_own_limiter()
        with pytest.raises(ApiError):
            view.get("/api/v1/namespaces/ns/configmaps/y")
        later = client.server_now()
        assert later is not None and later >= datetime(2026, 12, 4, 16, 31, tzinfo=UTC)
    finally:
        server.close()
