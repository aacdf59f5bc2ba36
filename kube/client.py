"""A small JSON REST client: one request policy over a transport.

The official `kubernetes` client owns what it does well — loading a kubeconfig, with its
exec and auth-provider plugins — and is imported only for that (lazily: out of cluster,
the CLI). In a Pod the settings are ours (`kube.incluster`), so `run` there never loads
it. We own the rest: the urllib3 pool that dials (TLS, client certificates, proxies),
and the request policy. Like httpx, each request policy is applied once, on the way
down, in `_call`:

1. **Rate limit.** Every verb but GET and HEAD takes a token from the client's write
   limiter (`kube.tokenbucket`, `--kube-api-qps` / `--kube-api-burst`, like client-go's).
   `with_own_limiter()` gives a caller that must not queue behind the workers' writes
   (leader election) a bucket of its own.
2. **Count.** Requests by verb (`request_count()`, read by benchmarks); a retry after a
   401 is the same request. With `instrument(registry)`, client-go's `rest_client_*`
   metrics too (`kube.clientmetrics`): the rate limiter's wait and each request's
   duration, so a throttled client can be told from a slow server.
3. **Encode.** Bodies are dicts encoded with `orjson`, answers decoded with it (the
   generated pydantic models cost several times the CPU and reject fields they do not
   know; the standard `json` module takes several times orjson's CPU to decode a watch
   event and to encode a status body: bench/README.md, "Figures behind module
   decisions").
4. **Headers.** Accept, User-Agent and the credentials' header, encoded once per
   credentials value (`kube.credentials`: cached, re-read on a timer), plus the body's
   Content-Type.
5. **401.** The credentials are re-read (a rotated token file) and the request, which
   was not acted on, is sent once more.
6. **Errors.** A non-2xx answer is an `ApiError` with its status, Status body and
   `Retry-After`; a transport failure is `ApiError(0)`, and a timeout also closes the
   idle connections (below).
7. **The server's clock.** Every answer's `Date` header sets `server_now()`
   (`kube.times.ServerClock`): a clock the caller does not own, to check its own against.

Under it, one `kube.transport.Transport` per client carries every request: the lean
HTTP/1.1 path (`kube.http1`) when the API server is reached directly, urllib3 behind an
HTTP proxy. Watch bodies are streamed line by line; every request has a read timeout.

Connection liveness (docs/reference.md §6): every socket has TCP keepalive and a user
timeout (a black-holed peer is noticed in ~45 s, as client-go's HTTP/2 ping does), every
request a read timeout, and a timeout closes the idle connections too, so the retry
dials a fresh connection instead of meeting the next dead one.
"""

from __future__ import annotations

import copy
import re
import socket
import ssl
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, overload
from urllib.parse import quote, urlencode, urlsplit

import orjson
import urllib3
from prometheus_client import CollectorRegistry

from kube import incluster
from kube.clientmetrics import ClientMetrics
from kube.credentials import Credentials, Headers, kubeconfig_token_file
from kube.http1 import Exchanger
from kube.incluster import ServerConfig, bypassed
from kube.times import ServerClock
from kube.tokenbucket import TokenBucket
from kube.transport import Answer, Stream, StreamCanceller, Timeouts, Transport, TransportError
from kube.types import JSON
from kube.urllib3_transport import Urllib3Transport

CONNECT_TIMEOUT = 10.0
DEFAULT_TIMEOUTS = Timeouts(connect=CONNECT_TIMEOUT, read=30.0)
# Reads are not rate limited (client-go limits them too; we never have: behaviour kept).
_UNLIMITED = frozenset(("GET", "HEAD"))

# TCP keepalive on every connection, tuned to notice a silently dead peer (a NAT or
# load-balancer drop) about as fast as client-go's HTTP/2 health check does (ping after
# 30 s of silence, dead 15 s later): first probe after 30 s idle, then every 5 s, dead
# after 3 unanswered; TCP_USER_TIMEOUT bounds data left unacknowledged the same way.
# (The kubernetes client's own keepalive defaults, idle 30 s x 9 probes of 15 s, take
# 165 s.) A peer whose kernel still answers — a frozen proxy, a hung server — is caught
# by the read timeouts instead: `DEFAULT_TIMEOUTS` here, the bookmark-derived watch read
# timeout in `kube.informer`.
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = (KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT) * 1000


def socket_options() -> list[tuple[int, int, int]]:
    """urllib3 socket options: its defaults (TCP_NODELAY), keepalive, user timeout."""
    options: list[tuple[int, int, int]] = list(
        urllib3.connection.HTTPConnection.default_socket_options
    )
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    for name, value in (
        ("TCP_KEEPIDLE", KEEPALIVE_IDLE),
        ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
        ("TCP_KEEPCNT", KEEPALIVE_COUNT),
    ):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        options.append((socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS))
    return options


class ApiError(Exception):
    """A non-2xx answer from the API server, or a transport failure (status 0)."""

    def __init__(
        self,
        status: int,
        reason: str,
        body: JSON | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.body = body or {}
        self.retry_after = retry_after
        message = self.body.get("message") or reason
        super().__init__(f"{status} {message}")

    @property
    def api_reason(self) -> str:
        """The Status object's `reason` (`NotFound`, `Conflict`, `Expired`, …)."""
        return str(self.body.get("reason", ""))

    @property
    def transient(self) -> bool:
        """Worth retrying with backoff: transport failures, 429 and 5xx."""
        return self.status == 0 or self.status == 429 or self.status >= 500


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 404


def is_conflict(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 409


def is_already_exists(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 409 and err.api_reason == "AlreadyExists"


def is_gone(err: BaseException) -> bool:
    return isinstance(err, ApiError) and err.status == 410


@dataclass(frozen=True)
class RequestCount:
    """Requests sent, by verb; read by benchmarks (API requests per PCR)."""

    by_method: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_method.values())


class KubeconfigError(Exception):
    """No client from this kubeconfig; `str()` is one line: `kubeconfig: <problem>`."""


def connect(
    kubeconfig: str | None = None,
    *,
    qps: float = 50.0,
    burst: int = 100,
    context: str | None = None,
) -> Client:
    """`Client.from_kubeconfig`, with whatever stops it (a missing file, an unknown
    context, an unreadable token) as one `KubeconfigError` line for a person to read."""
    try:
        return Client.from_kubeconfig(kubeconfig, qps=qps, burst=burst, context=context)
    except Exception as err:
        problem = " ".join(str(err).split()) or type(err).__name__
        raise KubeconfigError(f"kubeconfig: {problem}") from None


def pool_manager(configuration: Any) -> urllib3.PoolManager:
    """The urllib3 pool the official client would build from `configuration` (its
    `rest.RESTClientObject`: TLS verification, CA, client certificate, proxy), with our
    socket options and room for 32 connections. `configuration` is a `ServerConfig` or
    the official `Configuration`: the same attribute names."""
    settings: dict[str, Any] = {
        "cert_reqs": ssl.CERT_REQUIRED if configuration.verify_ssl else ssl.CERT_NONE,
        "ca_certs": configuration.ssl_ca_cert,
        "cert_file": configuration.cert_file,
        "key_file": configuration.key_file,
        "ca_cert_data": getattr(configuration, "ca_cert_data", None),
        "maxsize": max(getattr(configuration, "connection_pool_maxsize", None) or 4, 32),
        "socket_options": getattr(configuration, "socket_options", None) or socket_options(),
    }
    for name, key in (
        ("assert_hostname", "assert_hostname"),
        ("retries", "retries"),
        ("tls_server_name", "server_hostname"),
    ):
        value = getattr(configuration, name, None)
        if value is not None and value != "":
            settings[key] = value
    proxy = getattr(configuration, "proxy", None)
    no_proxy = getattr(configuration, "no_proxy", None) or ""
    if not proxy or (no_proxy and _bypassed(configuration.host, no_proxy)):
        return urllib3.PoolManager(**settings)
    if proxy.split("://")[0].lower().startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager

        return SOCKSProxyManager(proxy, **settings)
    settings["proxy_headers"] = getattr(configuration, "proxy_headers", None)
    if getattr(configuration, "proxy_ssl_context", None) is not None:
        settings["proxy_ssl_context"] = configuration.proxy_ssl_context
    return urllib3.ProxyManager(proxy, **settings)


def _bypassed(host: str, no_proxy: str) -> bool:
    return bypassed(urlsplit(host).netloc, {"no": no_proxy})


class Client:
    """JSON over HTTPS to one API server: the one request policy (module docstring) over
    one `kube.transport.Transport`. Thread-safe."""

    def __init__(
        self,
        configuration: Any,
        *,
        qps: float = 50.0,
        burst: int = 100,
        user_agent: str = "service-serving-signer",
        credentials: Credentials | None = None,
    ) -> None:
        self.configuration = configuration
        self.credentials = credentials or Credentials.from_configuration(configuration)
        self._pool = pool_manager(configuration)
        pool = self._pool
        self.host = configuration.host.rstrip("/")
        parts = urlsplit(self.host)
        self._path_prefix = parts.path
        # Every request takes one transport, so a write and the read after it (a 409
        # re-read) go the same way. Direct: the lean HTTP/1.1 path over connections the
        # urllib3 pool dials (its TLS, our socket options); through a proxy, urllib3's
        # proxy manager.
        self.transport: Transport
        if isinstance(pool, urllib3.ProxyManager):
            self.transport = Urllib3Transport(pool, f"{parts.scheme}://{parts.netloc}")
        else:
            new_conn: Any = pool.connection_from_url(self.host)._new_conn  # untyped enough
            self.transport = Exchanger(new_conn, parts.netloc)
        # (User-Agent, credentials, the header lines they make): one tuple, swapped whole.
        self._head: tuple[str, Headers, bytes] = ("", {}, b"")
        self.user_agent = user_agent
        self.write_limiter = TokenBucket(qps, burst)
        self.metrics: ClientMetrics | None = None
        self._counts: dict[str, int] = {}
        self._count_lock = threading.Lock()
        self.server_clock = ServerClock()  # shared with the views of `with_own_limiter`

    # construction -----------------------------------------------------------------

    @classmethod
    def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        *,
        qps: float = 50.0,
        burst: int = 100,
        context: str | None = None,
    ) -> Client:
        """In-cluster config when `kubeconfig` and `context` are None and we run in a
        Pod, else the kubeconfig file (`kubeconfig` — a colon-separated list is merged as
        kubectl does — or `$KUBECONFIG` or `~/.kube/config`) at `context` (default: its
        current context)."""
        if kubeconfig is None and context is None:
            server = incluster.in_cluster()
            if server is not None:
                # The projected ServiceAccount token: ours to re-read (kube.credentials).
                credentials = Credentials.token_file(incluster.TOKEN_FILE)
                return cls(server, qps=qps, burst=burst, credentials=credentials)
        # A kubeconfig: the official loader, with its exec and auth-provider plugins.
        from kubernetes import client as k8s_client
        from kubernetes.config import kube_config

        configuration = k8s_client.Configuration()
        loader: Any = kube_config._get_kube_config_loader(  # untyped upstream
            filename=kubeconfig or kube_config.KUBE_CONFIG_DEFAULT_LOCATION,
            persist_config=False,
            active_context=context,
        )
        loader.load_and_set(configuration)
        path = kubeconfig_token_file(loader)
        if path is None:
            return cls(configuration, qps=qps, burst=burst)
        # The official loader read the file once; we re-read it (kube.credentials).
        configuration.refresh_api_key_hook = None
        return cls(configuration, qps=qps, burst=burst, credentials=Credentials.token_file(path))

    def with_token(self, token: str) -> Client:
        """Same server and CA, but authenticating with a bearer token instead (tests use
        it to act as a ServiceAccount)."""
        configuration = ServerConfig(
            host=self.configuration.host,
            ssl_ca_cert=self.configuration.ssl_ca_cert,
            verify_ssl=self.configuration.verify_ssl,
            ca_cert_data=getattr(self.configuration, "ca_cert_data", None),
            proxy=getattr(self.configuration, "proxy", None),
        )
        return Client(
            configuration,
            qps=self.write_limiter.qps,
            burst=self.write_limiter.burst,
            credentials=Credentials.static({"Authorization": f"Bearer {token}"}),
        )

    def with_own_limiter(self) -> Client:
        """This client (same transport, credentials, request counts) with a write limiter
        of its own at the same qps and burst: its writes never queue behind this one's,
        nor this one's behind its. Leader election uses one, as kube-controller-manager
        gives leader election a client of its own."""
        view = copy.copy(self)
        view.write_limiter = self.write_limiter.fresh()
        return view

    def server_now(self) -> datetime | None:
        """The API server's clock, as the `Date` of its newest answer to this client (or a
        view of it) states it; None before the first."""
        return self.server_clock.now()

    def instrument(self, registry: CollectorRegistry | None) -> ClientMetrics:
        """Report client-go's `rest_client_*` metrics for this client (and the views
        made from it afterwards, `with_own_limiter`) on `registry`."""
        self.metrics = ClientMetrics(registry, urlsplit(self.host).netloc)
        return self.metrics

    def close(self) -> None:
        """Close the idle connections (a watch in flight keeps its own until it ends)."""
        self.transport.close_idle()
        self._pool.clear()

    # the request policy ---------------------------------------------------------------

    def request_count(self) -> RequestCount:
        with self._count_lock:
            return RequestCount(dict(self._counts))

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        return f"{self.host}{path}{_query(params)}"

    # The overloads restate _call's parameters so that mypy knows a stream=True call
    # returns a Stream and any other an Answer.
    @overload
    def _call(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeouts: Timeouts,
        stream: Literal[False] = False,
        canceller: StreamCanceller | None = None,
    ) -> Answer: ...

    @overload
    def _call(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeouts: Timeouts,
        stream: Literal[True],
        canceller: StreamCanceller | None = None,
    ) -> Stream: ...

    def _call(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeouts: Timeouts,
        stream: bool = False,
        canceller: StreamCanceller | None = None,
    ) -> Answer | Stream:
        """Every request, once: limit, count, encode, send with the header lines, on a
        401 re-read the credentials and send once more, map an error answer. Returns a
        2xx answer (`stream`: with its body still to read)."""
        metrics, began = self.metrics, time.monotonic()
        waited = None if method in _UNLIMITED else self.write_limiter.take()
        if metrics is None or stream:
            return self._send(method, path, params, body, content_type, timeouts, stream, canceller)
        if waited is not None:
            metrics.throttled(method, waited)
        code: int | None = None
        try:
            reply = self._send(method, path, params, body, content_type, timeouts, False, None)
            code = reply.status
            return reply
        except ApiError as err:
            code = err.status or None
            raise
        finally:
            metrics.finished(method, code, time.monotonic() - began, waited)

    def _send(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        content_type: str | None,
        timeouts: Timeouts,
        stream: bool,
        canceller: StreamCanceller | None,
    ) -> Answer | Stream:
        """`_call` past the rate limiter: count, encode, send, retry a 401 once, map an
        error answer."""
        with self._count_lock:
            self._counts[method] = self._counts.get(method, 0) + 1
        data = None
        if body is not None:
            data = orjson.dumps(body)
            content_type = content_type or "application/json"
        target = f"{self._path_prefix}{path}{_query(params)}"
        auth = self.credentials.headers()
        reply: Answer | Stream
        for attempt in (0, 1):
            head = self._head_for(auth)
            if content_type:
                head += b"Content-Type: " + content_type.encode("latin-1") + b"\r\n"
            try:
                if stream:
                    reply = self.transport.stream(method, target, head, timeouts, canceller)
                else:
                    reply = self.transport.exchange(method, target, head, data, timeouts)
            except TransportError as err:
                raise self._transport_failed(err) from err
            self.server_clock.saw(reply.date)
            if reply.status == 401 and attempt == 0 and self.credentials.after_unauthorized(auth):
                # Rotated credentials (a re-read token file): the request was not acted
                # on, so send it once more with the new ones.
                reply.close()
                auth = self.credentials.headers()
                continue
            break
        if reply.status >= 400:
            try:
                raw = reply.read_all()
            except TransportError as err:
                raise self._transport_failed(err) from err
            finally:
                reply.close()
            raise _error_from(reply.status, reply.reason, raw, reply.retry_after)
        return reply

    def _head_for(self, auth: Headers) -> bytes:
        """The header lines every request carries (Accept, User-Agent, credentials),
        encoded once per credentials value."""
        agent, seen, head = self._head
        if agent != self.user_agent or seen is not auth:
            lines = {"Accept": "application/json", "User-Agent": self.user_agent, **auth}
            if any(c in text for kv in lines.items() for text in kv for c in "\r\n\0"):
                raise ValueError("a request header contains a line break or NUL")
            head = "".join(f"{k}: {v}\r\n" for k, v in lines.items()).encode("latin-1")
            self._head = (self.user_agent, auth, head)
        return head

    def _transport_failed(self, err: TransportError) -> ApiError:
        """The `ApiError(0)` for a transport failure. After a timeout, the connection the
        request used is dead or hung (already closed), and the idle ones went the same
        way to the same server, so retries would meet them one timeout at a time: close
        them all, as an HTTP/2 client loses every stream with its one connection; the
        next requests dial afresh. Other failures (refused, reset) leave them alone."""
        if err.timeout:
            self.drop_idle_connections()
        return ApiError(0, str(err))

    def drop_idle_connections(self) -> None:
        """Close every idle connection (connections in use are left alone)."""
        self.transport.close_idle()

    # verbs ----------------------------------------------------------------------------

    def _json(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        timeout: float | None,
        content_type: str | None = None,
        discard: bool = False,
    ) -> JSON:
        raw = self._call(method, path, params, body, content_type, _timeouts(timeout)).body
        if not raw or discard:
            return {}
        result: JSON = orjson.loads(raw)
        return result

    def get(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> JSON:
        return self._json("GET", path, params, None, timeout)

    def get_bytes(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> bytes:
        """`get`, undecoded: the JSON body as it came (for callers that decode it
        elsewhere, e.g. on another thread than the one that waits for the network)."""
        return self._call("GET", path, params, None, None, _timeouts(timeout)).body

    # create/replace/delete (and patch) share one parameter list but stay separate public
    # verbs, as client-go's, so that mypy checks each caller by name.
    def create(
        self,
        path: str,
        body: JSON,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> JSON:
        return self._json("POST", path, params, body, timeout)

    def replace(
        self,
        path: str,
        body: JSON,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> JSON:
        return self._json("PUT", path, params, body, timeout)

    def patch(
        self,
        path: str,
        body: Any,
        *,
        patch_type: str = "application/merge-patch+json",
        params: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        discard_response: bool = False,
    ) -> JSON:
        """`discard_response`: read the answer but do not decode it (returns `{}`), for
        callers that only need to know the write succeeded."""
        return self._json("PATCH", path, params, body, timeout, patch_type, discard_response)

    def delete(
        self,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> JSON:
        return self._json("DELETE", path, params, body, timeout)

    def watch(
        self,
        path: str,
        params: Mapping[str, Any],
        *,
        read_timeout: float,
        canceller: StreamCanceller | None = None,
    ) -> Generator[JSON, None, None]:
        """Yield watch events (`{"type": ..., "object": {...}}`) until the server ends the
        stream. A read that stalls longer than `read_timeout` raises ApiError(0), as does
        a body cut off mid-event. `canceller.cancel()` from another thread ends the
        stream at once, also while it is being dialled or awaits its answer (quietly, or
        with ApiError(0) if the transport complains); a watch started after it ends
        at once without a request."""
        if canceller is not None and canceller.cancelled:
            return
        stream = self._call(
            "GET",
            path,
            {**params, "watch": "true"},
            None,
            None,
            Timeouts(connect=CONNECT_TIMEOUT, read=read_timeout),
            stream=True,
            canceller=canceller,
        )
        try:
            body = stream.data()
            buf = bytearray()
            while True:
                try:
                    chunk = next(body, b"")
                except TransportError as err:
                    if not (canceller and canceller.cancelled):
                        self._transport_failed(err)
                    raise ApiError(0, f"watch stream: {err}") from err
                if not chunk:
                    break
                search = len(buf)  # what was kept holds no newline
                buf += chunk
                pos = 0
                while (nl := buf.find(b"\n", search)) >= 0:
                    line = buf[pos:nl]
                    pos = search = nl + 1
                    if line.strip():
                        yield _event(line)
                del buf[:pos]  # once per chunk: a stream of small events is not quadratic
            if buf.strip() and not (canceller and canceller.cancelled):
                yield _event(buf)
        finally:
            stream.close()


def _event(line: bytes | bytearray) -> JSON:
    try:
        event = orjson.loads(line)
    except ValueError as err:
        raise ApiError(0, f"watch stream: undecodable event: {err}") from err
    if not isinstance(event, dict):
        raise ApiError(0, "watch stream: event is not an object")
    return event


def _timeouts(seconds: float | None) -> Timeouts:
    """A whole-request bound: connect and each read within `seconds` (None: default)."""
    if seconds is None:
        return DEFAULT_TIMEOUTS
    return Timeouts(connect=min(CONNECT_TIMEOUT, seconds), read=seconds, total=seconds)


def _query(params: Mapping[str, Any] | None) -> str:
    if params:
        clean = {k: _query_value(v) for k, v in params.items() if v is not None}
        if clean:
            return "?" + urlencode(clean)
    return ""


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _error_from(status: int, reason: str, raw: bytes, retry_after: str | None) -> ApiError:
    body: JSON = {}
    try:
        parsed = orjson.loads(raw) if raw else {}
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        body = {"message": raw[:500].decode(errors="replace")}
    delay: float | None = None
    if retry_after:
        try:
            delay = float(retry_after)
        except ValueError:
            delay = None
    return ApiError(status, reason, body, delay)


_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")


def path_segment(name: str) -> str:
    """Quote a name for a URL path (signer names contain `/` and `:`). Object names
    (DNS subdomains) need no quoting, and most take the fast path."""
    if _PLAIN_SEGMENT.fullmatch(name):
        return name
    return quote(name, safe="")
