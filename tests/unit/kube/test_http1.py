"""The lean path (`kube.http1` under `kube.client.Client`, every request of a directly
connected client): the answers, errors, credentials retry and connection hygiene the
request policy expects of a transport — against the fake API server, and against a
scripted socket server for the HTTP/1.1 framing a real server may use (chunked bodies,
1xx, `Connection: close`, a connection closed while idle)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s_client

from kube import http1
from kube.client import ApiError, Client
from kube.credentials import Credentials
from kube.transport import Timeouts, TransportError
from tests.unit.fakeapi import FakeApi
from tests.unit.kube.helpers import Script, ScriptedServer, token_kubeconfig

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def lean(client: Client) -> http1.Exchanger:
    """The client's transport: the lean path (the API server is reached directly)."""
    assert isinstance(client.transport, http1.Exchanger)
    return client.transport


def configmap(name: str, **data: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_writes_answer_as_before_and_reuse_one_connection(fake: FakeApi) -> None:
    client = fake.client()
    created = client.create(CONFIGMAPS, configmap("a", k="1"))
    assert created["metadata"]["name"] == "a"
    patched = client.patch(f"{CONFIGMAPS}/a", {"data": {"k": "2"}})
    assert patched["data"] == {"k": "2"}
    assert client.patch(f"{CONFIGMAPS}/a", {"data": {"k": "3"}}, discard_response=True) == {}
    current = client.get(f"{CONFIGMAPS}/a")
    replaced = client.replace(f"{CONFIGMAPS}/a", {**current, "data": {"k": "4"}})
    assert replaced["data"] == {"k": "4"}
    client.delete(f"{CONFIGMAPS}/a")
    assert fake.get(CONFIGMAPS, "a") is None
    counts = {"POST": 1, "PATCH": 2, "GET": 1, "PUT": 1, "DELETE": 1}
    assert client.request_count().by_method == counts
    assert lean(client).dialled == 1
    sent = list(fake.matching("PATCH", f"{CONFIGMAPS}/a"))
    assert sent[0].body == {"data": {"k": "2"}}
    assert sent[0].user_agent == "service-serving-signer"


def test_a_write_error_carries_status_reason_and_retry_after(fake: FakeApi) -> None:
    client = fake.client()
    client.create(CONFIGMAPS, configmap("a"))
    with pytest.raises(ApiError) as conflict:
        client.create(CONFIGMAPS, configmap("a"))
    assert conflict.value.status == 409 and conflict.value.api_reason == "AlreadyExists"
    fake.fail("PATCH", f"{CONFIGMAPS}/a", 429, retry_after="7")
    with pytest.raises(ApiError) as throttled:
        client.patch(f"{CONFIGMAPS}/a", {"data": {"k": "v"}})
    assert throttled.value.status == 429 and throttled.value.retry_after == 7.0
    assert throttled.value.transient
    with pytest.raises(ApiError) as missing:
        client.patch(f"{CONFIGMAPS}/nope", {"data": {}})
    assert missing.value.status == 404
    # Error answers leave the connection reusable.
    assert lean(client).dialled == 1


def test_a_401_on_a_write_re_reads_the_token_file_and_retries_once(
    fake: FakeApi, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    client = Client.from_kubeconfig(str(token_kubeconfig(fake, tmp_path, str(token))), qps=0)
    client.create(CONFIGMAPS, configmap("a"))
    token.write_text("new")
    fake.fail("PATCH", f"{CONFIGMAPS}/a", 401, times=100, when=lambda r: "old" in r.authorization)

    client.patch(f"{CONFIGMAPS}/a", {"data": {"k": "v"}})

    sent = [r.authorization for r in fake.matching("PATCH", f"{CONFIGMAPS}/a")]
    assert sent == ["Bearer old", "Bearer new"]
    assert client.request_count().by_method["PATCH"] == 1, "the retry is the same request"


def test_a_write_that_times_out_closes_the_idle_connections(fake: FakeApi) -> None:
    client = fake.client()
    writer = lean(client)
    # Two idle connections, as two writes in flight at once leave them (dialled
    # directly: two threads racing on a loaded machine may well share one).
    client.create(CONFIGMAPS, configmap("c0"))
    writer._idle.append(writer._dial(5.0))
    assert len(writer._idle) == 2
    hole = fake.black_hole(lambda r: r.method == "PATCH")

    with pytest.raises(ApiError) as stuck:
        client.patch(f"{CONFIGMAPS}/c0", {"data": {"k": "v"}}, timeout=0.5)

    assert stuck.value.status == 0 and stuck.value.transient
    assert "TimeoutError" in str(stuck.value)
    assert writer._idle == [], "the other idle connection was closed too"
    hole.set()
    dialled = writer.dialled
    client.patch(f"{CONFIGMAPS}/c0", {"data": {"k": "v"}})
    assert writer.dialled == dialled + 1


def test_close_closes_the_idle_write_connections(fake: FakeApi) -> None:
    client = fake.client()
    client.create(CONFIGMAPS, configmap("a"))
    assert len(lean(client)._idle) == 1
    client.close()
    assert lean(client)._idle == []


def test_a_header_with_a_line_break_is_refused_not_sent(fake: FakeApi) -> None:
    configuration = k8s_client.Configuration()
    configuration.host = fake.url
    client = Client(
        configuration, qps=0, credentials=Credentials.static({"Authorization": "a\r\nX: y"})
    )
    with pytest.raises(ValueError, match="line break"):
        client.create(CONFIGMAPS, configmap("a"))
    assert list(fake.matching("POST", CONFIGMAPS)) == []


@pytest.fixture
def scripted() -> Iterator[Callable[[Script], ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def make(script: Script) -> ScriptedServer:
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_chunked_answers_with_extensions_and_trailers_are_decoded(
    scripted: Callable[[Script], ScriptedServer],
) -> None:
    def answer(conn: socket.socket, n: int) -> None:
        conn.sendall(
            b"HTTP/1.1 100 Continue\r\n\r\n"
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            b"5;ext=1\r\n" + b'{"a":' + b"\r\n"
        )
        conn.sendall(b"3\r\n" + f"{n}}}".encode().ljust(3) + b"\r\n0\r\nX-Trailer: t\r\n\r\n")

    server = scripted(answer)
    client = server.client()
    assert client.create("/api/v1/x", {}) == {"a": 1}
    assert client.create("/api/v1/x", {}) == {"a": 2}
    assert server.connections == 1
    request = server.requests[0]
    assert request.startswith(b"POST /api/v1/x HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 2\r\n" in request and request.endswith(b"\r\n\r\n{}")
    assert f"Host: {server.url.removeprefix('http://')}".encode() in request


def test_connection_close_and_idle_closes_dial_afresh_without_an_error(
    scripted: Callable[[Script], ScriptedServer],
) -> None:
    closed = threading.Event()

    def answer(conn: socket.socket, n: int) -> None:
        body = b'{"n":%d}' % n
        if n == 1:  # says so
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body
            )
            conn.close()
        elif n == 2:  # does not say so, but closes once idle (an idle timeout)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            conn.shutdown(socket.SHUT_RDWR)
            closed.set()
        else:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    server = scripted(answer)
    client = server.client()
    assert client.patch("/api/v1/x", {}) == {"n": 1}
    assert client.patch("/api/v1/x", {}) == {"n": 2}
    assert closed.wait(5)
    assert client.patch("/api/v1/x", {}) == {"n": 3}
    assert client.patch("/api/v1/x", {}) == {"n": 4}
    assert server.connections == 3


def test_a_body_delimited_by_the_connection_end_is_read_and_not_reused(
    scripted: Callable[[Script], ScriptedServer],
) -> None:
    def answer(conn: socket.socket, n: int) -> None:
        conn.sendall(b'HTTP/1.1 200 OK\r\n\r\n{"n":%d}' % n)
        conn.shutdown(socket.SHUT_RDWR)

    server = scripted(answer)
    client = server.client()
    assert client.patch("/api/v1/x", {}) == {"n": 1}
    assert client.patch("/api/v1/x", {}) == {"n": 2}
    assert server.connections == 2


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",  # cut off
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
    ],
    ids=["cut-off", "not-http", "compressed", "bad-chunk"],
)
def test_a_malformed_or_cut_off_answer_is_a_transient_transport_error(
    scripted: Callable[[Script], ScriptedServer], answer: bytes
) -> None:
    def reply(conn: socket.socket, n: int) -> None:
        conn.sendall(answer)
        conn.shutdown(socket.SHUT_RDWR)

    client = scripted(reply).client()
    with pytest.raises(ApiError) as failed:
        client.patch("/api/v1/x", {})
    assert failed.value.status == 0 and failed.value.transient
    assert lean(client)._idle == []


def test_a_watch_decodes_events_split_across_chunks_on_its_own_connection(
    scripted: Callable[[Script], ScriptedServer],
) -> None:
    def answer(conn: socket.socket, n: int) -> None:
        if n == 1:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            return
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        first, second = b'{"type":"ADDED","object":{"a":1}}\n{"type":"MOD', b'IFIED","object":{}}\n'
        conn.sendall(b"%x;x=y\r\n%s\r\n" % (len(first), first))
        conn.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(second), second))

    server = scripted(answer)
    client = server.client()
    client.patch("/api/v1/x", {})  # one pooled connection for writes
    events = list(client.watch("/api/v1/pods", {}, read_timeout=5))
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
    assert server.connections == 2, "the watch dialled its own connection"
    assert server.requests[1].startswith(b"GET /api/v1/pods?watch=true HTTP/1.1\r\n")
    assert client.request_count().by_method == {"PATCH": 1, "GET": 1}


def test_a_watch_401_re_reads_the_token_and_retries_once(fake: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    client = Client.from_kubeconfig(str(token_kubeconfig(fake, tmp_path, str(token))), qps=0)
    client.get("/api/v1/namespaces/default")
    token.write_text("new")
    fake.fail(
        "GET", CONFIGMAPS, 401, watch=True, times=100, when=lambda r: "old" in r.authorization
    )
    fake.script_watch(CONFIGMAPS, {"type": "ADDED", "object": configmap("a")})

    events = list(client.watch(CONFIGMAPS, {"timeoutSeconds": 1}, read_timeout=5))

    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    sent = [r.authorization for r in fake.matching("GET", CONFIGMAPS)]
    assert sent == ["Bearer old", "Bearer new"]


def test_a_watch_error_answer_is_an_api_error_with_its_status(fake: FakeApi) -> None:
    fake.fail("GET", CONFIGMAPS, 410, watch=True)
    with pytest.raises(ApiError) as gone:
        list(fake.client().watch(CONFIGMAPS, {}, read_timeout=5))
    assert gone.value.status == 410


def test_a_total_bound_caps_each_read_by_what_connecting_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Timeout(total=...)` (the leader-election requests) as urllib3 keeps it: the read
    timeout is what is left of the total after the connection is made."""
    timeouts: list[float | None] = []

    class SilentSocket:
        def settimeout(self, value: float | None) -> None:
            timeouts.append(value)

        def sendall(self, data: bytes) -> None:
            pass

        def recv(self, size: int) -> bytes:
            raise TimeoutError("timed out")

    class SlowConnection:
        sock: object = None
        timeout: object = None

        def connect(self) -> None:
            clock[0] += 0.4  # connecting took 0.4 s
            self.sock = SilentSocket()

        def close(self) -> None:
            pass

    clock = [100.0]
    monkeypatch.setattr("kube.http1.time.monotonic", lambda: clock[0])
    exchanger = http1.Exchanger(SlowConnection, "example:443")
    with pytest.raises(TransportError) as failed:
        exchanger.exchange("PUT", "/x", b"", b"{}", Timeouts(connect=0.5, read=30.0, total=0.5))
    assert failed.value.timeout
    assert timeouts == [pytest.approx(0.1)]
