"""The operations HTTP endpoints: `/metrics`, `/healthz`, `/readyz`.

Decisions:
- One threaded stdlib WSGI server per distinct bind address. When
  `--metrics-bind-address` and `--health-probe-bind-address` are equal, one server
  serves all three paths; otherwise the metrics server serves `/metrics` and the health
  server `/healthz` and `/readyz` (controller-runtime's split).
- `/healthz` runs liveness checks only: threads we registered are alive and leader
  election is renewing. It never calls the API server, so an API outage does not get
  the Pod restarted (which would not help).
- `/readyz` runs readiness checks: informer caches synced and signing material loaded.
  A standby replica is ready too — it has warm caches and could lead at once.
- The answer follows kube-apiserver's healthz format: `ok` (or `[+]name ok` lines with
  `?verbose`), and on failure HTTP 503 with `[-]name failed` lines and a last line
  `<path> check failed`. A check that raises counts as failed; the reason is logged,
  not returned.
- Request logging is off: probes arrive every few seconds.
- Listening follows Go's `net.Listen("tcp", addr)`, since the flags have Go syntax: `:port`
  (empty host) is every address, IPv6 and IPv4 on one dual-stack socket (`AF_INET6` with
  `IPV6_V6ONLY=0`), falling back to IPv4 `0.0.0.0` where the kernel has no IPv6; `[::]:port`
  and `[::1]:port` are IPv6 (`::` dual-stack too, as in Go); `0.0.0.0:port` and
  `127.0.0.1:port` IPv4. A single-stack IPv6 cluster thus probes the default `:10359`.
- A socket that cannot be bound (port in use, address not on this host) is a `BindError`
  naming the address and the reason, never a traceback.
- With `--metrics-secure` the metrics server speaks TLS and answers `/metrics` only to a
  caller the API server authenticates and authorizes (`manager.metricsauth`); the
  handshake runs in the request's thread, so a slow client never holds up the others.
  The health server stays plain HTTP (kubelet's probes), so the two addresses must differ.
"""

from __future__ import annotations

import errno
import logging
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, make_wsgi_app

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

    from manager.metricsauth import DelegatedAuth, ServingCert

from manager.options import BindAddress

log = logging.getLogger(__name__)

Check = Callable[[], bool]


@dataclass
class Checks:
    """Named liveness and readiness checks; add to them while the process starts."""

    liveness: dict[str, Check] = field(default_factory=dict)
    readiness: dict[str, Check] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_liveness(self, name: str, check: Check) -> None:
        with self._lock:
            self.liveness[name] = check

    def add_readiness(self, name: str, check: Check) -> None:
        with self._lock:
            self.readiness[name] = check

    def add_thread(self, thread: threading.Thread, stopping: Callable[[], bool]) -> None:
        """Liveness fails if `thread` dies while the process is not stopping."""
        self.add_liveness(f"thread-{thread.name}", lambda: thread.is_alive() or stopping())

    def snapshot(self, kind: str) -> list[tuple[str, Check]]:
        with self._lock:
            checks = self.liveness if kind == "healthz" else self.readiness
            return sorted(checks.items())


def run_checks(path: str, checks: Iterable[tuple[str, Check]]) -> tuple[bool, list[str]]:
    """Run every check; (all passed, `[+]name ok` / `[-]name failed` lines)."""
    ok = True
    lines = ["[+]ping ok"]
    for name, check in checks:
        try:
            passed = bool(check())
        except Exception:
            log.warning("health check raised", exc_info=True, extra={"check": name, "path": path})
            passed = False
        ok = ok and passed
        lines.append(f"[+]{name} ok" if passed else f"[-]{name} failed: reason withheld")
    return ok, lines


class BindError(OSError):
    """An ops address cannot be listened on. `str()` is one line: `<address>: <reason>`."""

    def __init__(self, address: BindAddress, reason: str) -> None:
        self.address = address
        self.reason = reason
        super().__init__(f"{address}: {reason}")


def _no_ipv6(err: OSError) -> bool:
    return err.errno in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT)


def _socket(family: int, dual_stack: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0 if dual_stack else 1)
    return sock


def bind_socket(address: BindAddress) -> socket.socket:
    """A bound (not yet listening) TCP socket for `address`, with Go's semantics (see the
    module docstring). Raises `BindError`."""
    host, port = address.host, address.port
    try:
        if host in ("", "::"):
            try:
                sock = _socket(socket.AF_INET6, dual_stack=True)
            except OSError as err:
                if host or not _no_ipv6(err):
                    raise
                sock = _socket(socket.AF_INET, dual_stack=False)
                sock_addr: tuple[Any, ...] = ("0.0.0.0", port)
            else:
                sock_addr = ("::", port)
        else:
            info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
                0
            ]
            sock = _socket(info[0], dual_stack=False)
            sock_addr = info[4]
    except socket.gaierror as err:
        raise BindError(address, f"cannot resolve host {host!r} ({err.strerror})") from None
    except OSError as err:
        raise BindError(address, err.strerror or type(err).__name__) from None
    try:
        sock.bind(sock_addr)
    except OSError as err:
        sock.close()
        if not host and _no_ipv6(err) and sock.family == socket.AF_INET6:
            return bind_socket(BindAddress("0.0.0.0", port))
        raise BindError(address, err.strerror or type(err).__name__) from None
    return sock


TLS_HANDSHAKE_TIMEOUT = 10.0
PLAIN_HTTP_ANSWER = (
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Connection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server on a socket bound by `bind_socket` (any address family); with `tls`,
    each connection's TLS handshake runs in its own thread."""

    daemon_threads = True

    def __init__(self, sock: socket.socket, tls: ServingCert | None = None) -> None:
        self.tls = tls
        self.address_family = sock.family
        super().__init__(sock.getsockname()[:2], _QuietHandler, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        # What HTTPServer.server_bind would set, without its reverse-DNS lookup.
        self.server_address = sock.getsockname()
        self.server_name = str(self.server_address[0])
        self.server_port = int(self.server_address[1])
        self.setup_environ()
        try:
            self.server_activate()
        except OSError:
            self.server_close()
            raise

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(TLS_HANDSHAKE_TIMEOUT)
        try:
            first = request.recv(1, socket.MSG_PEEK)
            if first and first.isalpha():
                # An HTTP request line, not a TLS record: say so, as Go's servers do, so a
                # misconfigured scraper sees why (no metrics, no other answer).
                request.sendall(PLAIN_HTTP_ANSWER)
                return
        except OSError:
            return
        try:
            wrapped = self.tls.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # a failed handshake (a plain-HTTP caller, a scanner): nothing to answer
        try:
            super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _text(
    start_response: StartResponse,
    status: str,
    body: str,
    headers: Iterable[tuple[str, str]] = (),
) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("X-Content-Type-Options", "nosniff"),
            ("Content-Length", str(len(data))),
            *headers,
        ],
    )
    return [data]


def make_app(
    registry: CollectorRegistry | None,
    checks: Checks | None,
    auth: DelegatedAuth | None = None,
) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """A WSGI app serving `/metrics` when `registry` is given (to callers `auth` lets in,
    when given) and the health paths when `checks` is given."""
    metrics_app = make_wsgi_app(registry) if registry is not None else None

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/").rstrip("/") or "/"
        if metrics_app is not None and path == "/metrics":
            if auth is not None:
                verdict = auth.check(
                    environ.get("HTTP_AUTHORIZATION"), environ.get("REQUEST_METHOD", "GET")
                )
                if verdict.status != 200:
                    status = {401: "401 Unauthorized", 403: "403 Forbidden"}.get(
                        verdict.status, "500 Internal Server Error"
                    )
                    challenge = [("WWW-Authenticate", "Bearer")] if verdict.status == 401 else []
                    return _text(start_response, status, verdict.reason + "\n", challenge)
            served: Iterable[bytes] = metrics_app(environ, start_response)
            return served
        if checks is not None and path in ("/healthz", "/readyz", "/livez"):
            kind = "readyz" if path == "/readyz" else "healthz"
            ok, lines = run_checks(kind, checks.snapshot(kind))
            verbose = "verbose" in parse_qs(environ.get("QUERY_STRING", ""), True)
            if ok:
                body = "\n".join([*lines, f"{kind} check passed"]) if verbose else "ok"
                return _text(start_response, "200 OK", body + "\n")
            body = "\n".join([*lines, f"{kind} check failed"])
            return _text(start_response, "503 Service Unavailable", body + "\n")
        return _text(start_response, "404 Not Found", "404 page not found\n")

    return app


class OpsServer:
    """One listening socket serving an ops WSGI app on a daemon thread."""

    def __init__(
        self,
        address: BindAddress,
        *,
        registry: CollectorRegistry | None = None,
        checks: Checks | None = None,
        auth: DelegatedAuth | None = None,
        tls: ServingCert | None = None,
    ) -> None:
        self.address = address
        self._server = _ThreadingWSGIServer(bind_socket(address), tls)
        self._server.set_app(make_app(registry, checks, auth))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port actually bound (differs from the flag's when it asked for 0)."""
        return int(self._server.server_address[1])

    def start(self) -> threading.Thread:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"ops-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()  # blocks until serve_forever returns: only if started
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def start_servers(
    metrics: BindAddress | None,
    health: BindAddress | None,
    *,
    registry: CollectorRegistry,
    checks: Checks,
    auth: DelegatedAuth | None = None,
    tls: ServingCert | None = None,
) -> list[OpsServer]:
    """Start the servers the flags ask for (none when both are `0`); the metrics server
    with `auth` and `tls` when given (then never shared with the health paths). Raises
    `BindError` (after closing any server already bound)."""
    servers: list[OpsServer] = []
    try:
        if metrics is not None and metrics == health and metrics.port != 0 and tls is None:
            servers.append(OpsServer(metrics, registry=registry, checks=checks))
        else:
            if metrics is not None:
                servers.append(OpsServer(metrics, registry=registry, auth=auth, tls=tls))
            if health is not None:
                servers.append(OpsServer(health, checks=checks))
    except BindError:
        for server in servers:
            server.stop()
        raise
    for server in servers:
        server.start()
        log.info("serving", extra={"address": str(BindAddress(server.address.host, server.port))})
    return servers
