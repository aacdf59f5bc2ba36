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
"""

from __future__ import annotations

import logging
import socketserver
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

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


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    data = body.encode()
    start_response(
        status,
        [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("X-Content-Type-Options", "nosniff"),
            ("Content-Length", str(len(data))),
        ],
    )
    return [data]


def make_app(
    registry: CollectorRegistry | None, checks: Checks | None
) -> Callable[[WSGIEnvironment, StartResponse], Iterable[bytes]]:
    """A WSGI app serving `/metrics` when `registry` is given and the health paths
    when `checks` is given."""
    metrics_app = make_wsgi_app(registry) if registry is not None else None

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/").rstrip("/") or "/"
        if metrics_app is not None and path == "/metrics":
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
    ) -> None:
        self.address = address
        self._server = make_server(
            address.host,
            address.port,
            make_app(registry, checks),
            server_class=_ThreadingWSGIServer,
            handler_class=_QuietHandler,
        )
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
) -> list[OpsServer]:
    """Start the servers the flags ask for (none when both are `0`)."""
    servers: list[OpsServer] = []
    if metrics is not None and metrics == health and metrics.port != 0:
        servers.append(OpsServer(metrics, registry=registry, checks=checks))
    else:
        if metrics is not None:
            servers.append(OpsServer(metrics, registry=registry))
        if health is not None:
            servers.append(OpsServer(health, checks=checks))
    for server in servers:
        server.start()
        log.info("serving", extra={"address": f"{server.address.host}:{server.port}"})
    return servers
