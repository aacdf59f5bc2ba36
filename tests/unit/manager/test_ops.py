"""The ops server: /readyz 503 until every readiness check passes, /healthz, /metrics."""

from __future__ import annotations

import errno
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from manager.ops import BindError, Checks, OpsServer, bind_socket, start_servers
from manager.options import BindAddress, parse_bind_address

LOCAL = BindAddress("127.0.0.1", 0)


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("service_serving_ca_controller_requests", "x", ["result"], registry=registry).labels(
        result="issued"
    ).inc(0)
    return registry


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[tuple[OpsServer, Checks]]:
    checks = Checks()
    ops = OpsServer(LOCAL, registry=registry, checks=checks)
    ops.start()
    yield ops, checks
    ops.stop()


def test_readyz_is_503_until_every_readiness_check_passes(
    server: tuple[OpsServer, Checks],
) -> None:
    ops, checks = server
    synced = threading.Event()
    loaded = threading.Event()
    checks.add_readiness("informers-synced", synced.is_set)
    checks.add_readiness("signing-material", loaded.is_set)

    status, body = get(ops.port, "/readyz")
    assert status == 503
    assert "[-]informers-synced failed" in body
    assert "[-]signing-material failed" in body
    assert body.rstrip().endswith("readyz check failed")

    loaded.set()
    status, body = get(ops.port, "/readyz")
    assert status == 503
    assert "[+]signing-material ok" in body
    assert "[-]informers-synced failed" in body

    synced.set()
    assert get(ops.port, "/readyz") == (200, "ok\n")
    status, body = get(ops.port, "/readyz?verbose")
    assert status == 200
    assert "[+]informers-synced ok" in body


def test_healthz_ignores_readiness_and_fails_on_dead_thread(
    server: tuple[OpsServer, Checks],
) -> None:
    ops, checks = server
    checks.add_readiness("informers-synced", lambda: False)
    assert get(ops.port, "/healthz") == (200, "ok\n")

    done = threading.Event()
    worker = threading.Thread(target=done.wait, name="worker")
    worker.start()
    checks.add_thread(worker, stopping=lambda: False)
    assert get(ops.port, "/healthz")[0] == 200
    done.set()
    worker.join()
    status, body = get(ops.port, "/healthz")
    assert status == 503
    assert "[-]thread-worker failed" in body


def test_dead_thread_is_healthy_while_stopping(server: tuple[OpsServer, Checks]) -> None:
    ops, checks = server
    worker = threading.Thread(target=lambda: None, name="finished")
    worker.start()
    worker.join()
    checks.add_thread(worker, stopping=lambda: True)
    assert get(ops.port, "/healthz")[0] == 200


def test_a_check_that_raises_fails_without_leaking_the_reason(
    server: tuple[OpsServer, Checks],
) -> None:
    ops, checks = server

    def broken() -> bool:
        raise RuntimeError("secret detail")

    checks.add_liveness("leader-election", broken)
    status, body = get(ops.port, "/healthz")
    assert status == 503
    assert "[-]leader-election failed" in body
    assert "secret detail" not in body


def test_metrics_are_served_in_prometheus_text(server: tuple[OpsServer, Checks]) -> None:
    ops, _ = server
    status, body = get(ops.port, "/metrics")
    assert status == 200
    assert 'service_serving_ca_controller_requests_total{result="issued"} 0.0' in body


def test_unknown_path_is_404(server: tuple[OpsServer, Checks]) -> None:
    assert get(server[0].port, "/debug")[0] == 404


def test_split_addresses_serve_metrics_and_health_separately(
    registry: CollectorRegistry,
) -> None:
    servers = start_servers(LOCAL, LOCAL, registry=registry, checks=Checks())
    try:
        metrics, health = servers
        assert get(metrics.port, "/metrics")[0] == 200
        assert get(metrics.port, "/healthz")[0] == 404
        assert get(health.port, "/healthz")[0] == 200
        assert get(health.port, "/metrics")[0] == 404
    finally:
        for s in servers:
            s.stop()


def test_equal_addresses_share_one_server(registry: CollectorRegistry) -> None:
    probe = OpsServer(LOCAL)
    port = probe.port
    probe.stop()
    address = BindAddress("127.0.0.1", port)
    servers = start_servers(address, address, registry=registry, checks=Checks())
    try:
        assert len(servers) == 1
        assert get(port, "/metrics")[0] == 200
        assert get(port, "/readyz")[0] == 200
    finally:
        for s in servers:
            s.stop()


def test_zero_disables_both(registry: CollectorRegistry) -> None:
    assert start_servers(None, None, registry=registry, checks=Checks()) == []


# listening: Go's net.Listen semantics, IPv6 ------------------------------------------


def get_url(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_ipv6_loopback_address_serves_health_and_metrics(registry: CollectorRegistry) -> None:
    address = parse_bind_address("[::1]:0")
    assert address is not None
    ops = OpsServer(address, registry=registry, checks=Checks())
    ops.start()
    try:
        assert get_url(f"http://[::1]:{ops.port}/healthz") == (200, "ok\n")
        status, body = get_url(f"http://[::1]:{ops.port}/metrics")
        assert status == 200
        assert "service_serving_ca_controller_requests_total" in body
    finally:
        ops.stop()


@pytest.mark.parametrize("text", [":0", "[::]:0"])
def test_any_address_binds_one_dual_stack_ipv6_socket_like_go(text: str) -> None:
    # Bound but never listening: nothing is exposed beyond loopback.
    address = parse_bind_address(text)
    assert address is not None
    sock = bind_socket(address)
    try:
        assert sock.family == socket.AF_INET6
        assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        assert sock.getsockname()[0] == "::"
    finally:
        sock.close()


@pytest.mark.parametrize(("text", "host"), [("0.0.0.0:0", "0.0.0.0"), ("127.0.0.1:0", "127.0.0.1")])
def test_ipv4_addresses_bind_ipv4(text: str, host: str) -> None:
    address = parse_bind_address(text)
    assert address is not None
    sock = bind_socket(address)
    try:
        assert sock.family == socket.AF_INET
        assert sock.getsockname()[0] == host
    finally:
        sock.close()


def test_any_address_falls_back_to_ipv4_on_a_host_without_ipv6(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_socket = socket.socket

    def no_ipv6(family: int = socket.AF_INET, *args: object, **kwargs: object) -> socket.socket:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real_socket(family, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "socket", no_ipv6)
    sock = bind_socket(BindAddress("", 0))
    try:
        assert sock.family == socket.AF_INET
        assert sock.getsockname()[0] == "0.0.0.0"
    finally:
        sock.close()


def test_address_in_use_is_a_one_line_bind_error(registry: CollectorRegistry) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(BindError) as info:
            start_servers(
                BindAddress("127.0.0.1", 0),
                BindAddress("127.0.0.1", port),
                registry=registry,
                checks=Checks(),
            )
        assert str(info.value) == f"127.0.0.1:{port}: Address already in use"
    finally:
        taken.close()
