"""A small JSON REST client on top of the official `kubernetes` client's transport.

The official client owns what it does well — kubeconfig and in-cluster loading, TLS,
client certificates, the urllib3 pool — and we own the rest: credentials cached and
re-read on a timer and after a 401 (`kube.credentials`),
requests and responses are plain dicts parsed with `orjson` (the generated pydantic
models cost several times the CPU and reject fields they do not know; the standard
`json` module takes ~3x orjson's CPU to decode a watch event and ~10x to encode a
status body), watch bodies are streamed line by line, every request has a read
timeout, errors carry the status code and `Retry-After`, and writes pass a client-side
token bucket (`--kube-api-qps` / `--kube-api-burst`) like client-go's.

Connection liveness (docs/reference.md §6): every socket has TCP keepalive and a user
timeout (a black-holed peer is noticed in ~45 s, as client-go's HTTP/2 ping does), every
request a read timeout, and a timeout closes the pool's idle connections too, so the retry dials
a fresh connection instead of meeting the next dead one.
"""

from __future__ import annotations

import contextlib
import queue
import re
import socket
import threading
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config import incluster_config, kube_config
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from kube.credentials import Credentials, Headers, kubeconfig_token_file
from kube.http1 import Exchanger, Stream, TransportError
from kube.types import JSON

DEFAULT_TIMEOUT = urllib3.Timeout(connect=10.0, read=30.0)

# TCP keepalive on every connection, tuned to notice a silently dead peer (a NAT or
# load-balancer drop) about as fast as client-go's HTTP/2 health check does (ping after
# 30 s of silence, dead 15 s later): first probe after 30 s idle, then every 5 s, dead
# after 3 unanswered; TCP_USER_TIMEOUT bounds data left unacknowledged the same way.
# (The kubernetes client's own keepalive defaults, idle 30 s x 9 probes of 15 s, take
# 165 s.) A peer whose kernel still answers — a frozen proxy, a hung server — is caught
# by the read timeouts instead: `DEFAULT_TIMEOUT` here, the bookmark-derived watch read
# timeout in `kube.informer`.
KEEPALIVE_IDLE = 30
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
USER_TIMEOUT_MS = (KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT) * 1000


def socket_options() -> list[tuple[int, int, int]]:
    """urllib3 socket options: its defaults (TCP_NODELAY), keepalive, user timeout."""
    options: list[tuple[int, int, int]] = tcp_keepalive_socket_options(
        idle=KEEPALIVE_IDLE, interval=KEEPALIVE_INTERVAL, count=KEEPALIVE_COUNT
    )
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


class TokenBucket:
    """client-go's `flowcontrol.NewTokenBucketRateLimiter(qps, burst)`: `take()` blocks
    until a token is free. `qps <= 0` disables limiting."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def take(self) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            time.sleep(wait)


@dataclass(frozen=True)
class RequestCount:
    """Requests sent, by verb; read by benchmarks (API requests per PCR)."""

    by_method: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.by_method.values())


class Client:
    """JSON over HTTPS to one API server. Thread-safe (urllib3 pools are)."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        qps: float = 50.0,
        burst: int = 100,
        user_agent: str = "service-serving-signer",
        credentials: Credentials | None = None,
    ) -> None:
        self.configuration = configuration
        self.credentials = credentials or Credentials.from_configuration(configuration)
        configuration.connection_pool_maxsize = max(
            getattr(configuration, "connection_pool_maxsize", 4) or 4, 32
        )
        if configuration.socket_options is None:
            configuration.socket_options = socket_options()
        self._api = k8s_client.ApiClient(configuration)
        self._pool = self._api.rest_client.pool_manager
        self.host = configuration.host.rstrip("/")
        # Requests go straight to the one host's connection pool: PoolManager.request
        # re-parses the URL and re-derives the pool key on every call, a sizeable part
        # of the ~0.5 ms of client CPU a status write costs. Through a proxy, the
        # manager's URL handling is needed, so it stays in that path.
        self._host_pool: urllib3.HTTPConnectionPool | None = None
        # Writes (every verb but GET) and watches take the lean HTTP/1.1 path of
        # `kube.http1` over connections dialled by that same pool (same TLS, same socket
        # options); single GETs (LIST pages among them) stay on urllib3.
        self._http1: Exchanger | None = None
        if not isinstance(self._pool, urllib3.ProxyManager):
            host_pool = self._pool.connection_from_url(self.host)
            self._host_pool = host_pool
            new_conn: Any = host_pool._new_conn  # untyped enough: returns a connection
            self._http1 = Exchanger(new_conn, urlsplit(self.host).netloc)
        self._path_prefix = urlsplit(self.host).path
        # (User-Agent, credentials, the header lines they make): one tuple, swapped whole.
        self._head: tuple[str, Headers, bytes] = ("", {}, b"")
        self.user_agent = user_agent
        self.write_limiter = TokenBucket(qps, burst)
        self._counts: dict[str, int] = {}
        self._count_lock = threading.Lock()

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
        configuration = k8s_client.Configuration()
        if kubeconfig is None and context is None:
            try:
                load_incluster: Any = k8s_config.load_incluster_config  # untyped upstream
                load_incluster(client_configuration=configuration)
            except k8s_config.ConfigException:
                pass
            else:
                # The projected ServiceAccount token: ours to re-read (kube.credentials).
                configuration.refresh_api_key_hook = None
                credentials = Credentials.token_file(str(incluster_config.SERVICE_TOKEN_FILENAME))
                return cls(configuration, qps=qps, burst=burst, credentials=credentials)
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
        configuration = k8s_client.Configuration()
        configuration.host = self.configuration.host
        configuration.ssl_ca_cert = self.configuration.ssl_ca_cert
        configuration.verify_ssl = self.configuration.verify_ssl
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        return Client(
            configuration,
            qps=self.write_limiter.qps,
            burst=self.write_limiter.burst,
            credentials=Credentials.static({"Authorization": f"Bearer {token}"}),
        )

    def close(self) -> None:
        """Close the idle connections (a watch in flight keeps its own until it ends)."""
        if self._http1 is not None:
            self._http1.close_idle()
        api: Any = self._api  # ApiClient.close is untyped upstream
        api.close()

    # requests -----------------------------------------------------------------------

    def request_count(self) -> RequestCount:
        with self._count_lock:
            return RequestCount(dict(self._counts))

    def _headers(self, content_type: str | None, auth: Mapping[str, str]) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent, **auth}
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        return f"{self.host}{path}{_query(params)}"

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: urllib3.Timeout | None = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        if method not in ("GET", "HEAD"):
            self.write_limiter.take()
        with self._count_lock:
            self._counts[method] = self._counts.get(method, 0) + 1
        data = None
        if body is not None:
            data = orjson.dumps(body)
            content_type = content_type or "application/json"
        auth = self.credentials.headers()
        resp = self._urlopen(method, path, params, data, self._headers(content_type, auth), timeout)
        if resp.status == 401 and self.credentials.after_unauthorized(auth):
            # Rotated credentials (a re-read token file): the request was not acted on,
            # so send it once more with the new ones.
            _discard(resp)
            auth = self.credentials.headers()
            headers = self._headers(content_type, auth)
            resp = self._urlopen(method, path, params, data, headers, timeout)
        if resp.status >= 400:
            try:
                raw = resp.read()
            except (urllib3.exceptions.HTTPError, OSError) as err:
                resp.close()
                self._transport_failed(err)
                raise ApiError(0, f"{type(err).__name__}: {err}") from err
            finally:
                resp.release_conn()
            raise _error_from(resp.status, resp.reason or "", raw, resp.headers.get("Retry-After"))
        response: urllib3.BaseHTTPResponse = resp
        return response

    def _urlopen(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        data: bytes | None,
        headers: dict[str, str],
        timeout: urllib3.Timeout | None,
    ) -> urllib3.BaseHTTPResponse:
        try:
            if self._host_pool is not None:
                resp: urllib3.BaseHTTPResponse = self._host_pool.urlopen(
                    method,
                    f"{self._path_prefix}{path}{_query(params)}",
                    body=data,
                    headers=headers,
                    timeout=timeout or DEFAULT_TIMEOUT,
                    preload_content=False,
                    retries=False,
                    redirect=False,
                )
            else:
                resp = self._pool.request(
                    method,
                    self.url(path, params),
                    body=data,
                    headers=headers,
                    timeout=timeout or DEFAULT_TIMEOUT,
                    preload_content=False,
                    retries=False,
                )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            self._transport_failed(err)
            raise ApiError(0, f"{type(err).__name__}: {err}") from err
        return resp

    def _transport_failed(self, err: BaseException) -> None:
        """A request timed out: the connection it used is dead or hung (urllib3 has
        already closed it), and the idle ones in the pool went the same way to the same
        server, so retries would meet them one timeout at a time. Close them all, as an
        HTTP/2 client loses every stream with its one connection; the next requests
        dial afresh. Other failures (refused, reset) leave the pool alone."""
        if isinstance(err, urllib3.exceptions.TimeoutError | TimeoutError) or (
            isinstance(err, TransportError) and err.timeout
        ):
            self.drop_idle_connections()

    def drop_idle_connections(self) -> None:
        """Close every idle pooled connection (connections in use are left alone)."""
        if self._http1 is not None:
            self._http1.close_idle()
        if self._host_pool is None:
            self._pool.clear()
            return
        slots: Any = self._host_pool.pool  # a LifoQueue of connections or None slots
        if slots is None:
            return
        taken = 0
        while True:
            try:
                conn = slots.get(block=False)
            except queue.Empty:
                break
            taken += 1
            if conn is not None:
                conn.close()
        for _ in range(taken):
            try:
                slots.put(None, block=False)
            except queue.Full:  # a connection came back meanwhile and took the slot
                break

    def _json(self, method: str, path: str, *, discard: bool = False, **kwargs: Any) -> JSON:
        if method != "GET" and self._http1 is not None:
            raw = self._write(method, path, **kwargs)
        else:
            raw = self._body(method, path, **kwargs)
        if not raw or discard:
            return {}
        result: JSON = orjson.loads(raw)
        return result

    def _body(self, method: str, path: str, **kwargs: Any) -> bytes:
        resp = self._send(method, path, **kwargs)
        try:
            raw: bytes = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as err:
            resp.close()
            self._transport_failed(err)
            raise ApiError(0, f"{type(err).__name__}: {err}") from err
        finally:
            resp.release_conn()
        return raw

    def _write(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: urllib3.Timeout | None = None,
    ) -> bytes:
        """`_send` + read for a write, through `kube.http1`: the same rate limit, counts,
        401 retry and errors, fewer layers. Returns the answer's body."""
        assert self._http1 is not None
        self.write_limiter.take()
        with self._count_lock:
            self._counts[method] = self._counts.get(method, 0) + 1
        data = None
        if body is not None:
            data = orjson.dumps(body)
            content_type = content_type or "application/json"
        target = f"{self._path_prefix}{path}{_query(params)}"
        limits = timeout or DEFAULT_TIMEOUT
        auth = self.credentials.headers()
        for attempt in (0, 1):
            head = self._head_for(auth)
            if content_type:
                head += b"Content-Type: " + content_type.encode("latin-1") + b"\r\n"
            try:
                answer = self._http1.exchange(
                    method,
                    target,
                    head,
                    data,
                    connect_timeout=_seconds(limits.connect_timeout),
                    read_timeout=_seconds(limits.read_timeout),
                    total=_seconds(limits.total),
                )
            except TransportError as err:
                self._transport_failed(err)
                raise ApiError(0, str(err)) from err
            if answer.status == 401 and attempt == 0 and self.credentials.after_unauthorized(auth):
                # Rotated credentials (a re-read token file): the request was not acted
                # on, so send it once more with the new ones.
                auth = self.credentials.headers()
                continue
            break
        if answer.status >= 400:
            raise _error_from(answer.status, answer.reason, answer.body, answer.retry_after)
        return answer.body

    def _head_for(self, auth: Headers) -> bytes:
        """The header lines every write carries (Accept, User-Agent, credentials),
        encoded once per credentials value."""
        agent, seen, head = self._head
        if agent != self.user_agent or seen is not auth:
            lines = {"Accept": "application/json", "User-Agent": self.user_agent, **auth}
            if any(c in text for kv in lines.items() for text in kv for c in "\r\n\0"):
                raise ValueError("a request header contains a line break or NUL")
            head = "".join(f"{k}: {v}\r\n" for k, v in lines.items()).encode("latin-1")
            self._head = (self.user_agent, auth, head)
        return head

    def get(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> JSON:
        return self._json("GET", path, params=params, timeout=_timeout(timeout))

    def get_bytes(
        self, path: str, params: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> bytes:
        """`get`, undecoded: the JSON body as it came (for callers that decode it
        elsewhere, e.g. on another thread than the one that waits for the network)."""
        return self._body("GET", path, params=params, timeout=_timeout(timeout))

    def create(
        self,
        path: str,
        body: JSON,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> JSON:
        return self._json("POST", path, body=body, params=params, timeout=_timeout(timeout))

    def replace(
        self,
        path: str,
        body: JSON,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> JSON:
        return self._json("PUT", path, body=body, params=params, timeout=_timeout(timeout))

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
        return self._json(
            "PATCH",
            path,
            body=body,
            content_type=patch_type,
            params=params,
            timeout=_timeout(timeout),
            discard=discard_response,
        )

    def delete(
        self,
        path: str,
        body: JSON | None = None,
        params: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> JSON:
        return self._json("DELETE", path, body=body, params=params, timeout=_timeout(timeout))

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
        stream at once (quietly, or with ApiError(0) if the transport complains)."""
        watch_params = {**params, "watch": "true"}
        if self._http1 is not None:
            stream = self._open_stream(path, watch_params, read_timeout)
            body: Iterator[bytes] = stream.data()
            handle: Any = stream
        else:
            resp = self._send(
                "GET",
                path,
                params=watch_params,
                timeout=urllib3.Timeout(connect=10.0, read=read_timeout),
                stream=True,
            )
            body, handle = _read1_chunks(resp), resp
        if canceller is not None:
            canceller._attach(handle)
        try:
            buf = bytearray()
            while True:
                try:
                    chunk = next(body, b"")
                except (TransportError, urllib3.exceptions.HTTPError, OSError, ValueError) as err:
                    if not (canceller and canceller.cancelled):
                        self._transport_failed(err)
                    raise ApiError(0, f"watch stream: {type(err).__name__}: {err}") from err
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
            if canceller is not None:
                canceller._detach(handle)
            # Close before releasing: a half-read stream must not go back to the pool.
            handle.close()
            if isinstance(handle, urllib3.BaseHTTPResponse):
                handle.release_conn()

    def _open_stream(self, path: str, params: Mapping[str, Any], read_timeout: float) -> Stream:
        """A watch's GET over `kube.http1` (a connection of its own): the same counts,
        401 re-read + one retry and errors as `_send`."""
        assert self._http1 is not None
        with self._count_lock:
            self._counts["GET"] = self._counts.get("GET", 0) + 1
        target = f"{self._path_prefix}{path}{_query(params)}"
        auth = self.credentials.headers()
        for attempt in (0, 1):
            try:
                stream = self._http1.stream(
                    "GET",
                    target,
                    self._head_for(auth),
                    connect_timeout=10.0,
                    read_timeout=read_timeout,
                )
            except TransportError as err:
                self._transport_failed(err)
                raise ApiError(0, str(err)) from err
            if stream.status == 401 and attempt == 0 and self.credentials.after_unauthorized(auth):
                stream.close()
                auth = self.credentials.headers()
                continue
            break
        if stream.status >= 400:
            try:
                raw = stream.read_all()
            except TransportError as err:
                self._transport_failed(err)
                raise ApiError(0, str(err)) from err
            finally:
                stream.close()
            raise _error_from(stream.status, stream.reason, raw, stream.retry_after)
        return stream


def _read1_chunks(resp: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    while chunk := resp.read1(65536):
        yield chunk


class StreamCanceller:
    """Ends a watch blocked in a socket read, from another thread.

    `cancel()` shuts down the read side of the response's socket (urllib3's
    `HTTPResponse.shutdown()`), so the blocked `recv` returns at once; a watch started
    after `cancel()` ends immediately. This is what lets `Informer.run` return promptly
    when its stop event is set, whatever the read timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._resp: urllib3.BaseHTTPResponse | None = None
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._resp is not None:
                _shutdown(self._resp)

    def _attach(self, resp: urllib3.BaseHTTPResponse) -> None:
        with self._lock:
            self._resp = resp
            if self.cancelled:
                _shutdown(resp)

    def _detach(self, resp: urllib3.BaseHTTPResponse) -> None:
        with self._lock:
            if self._resp is resp:
                self._resp = None


def _discard(resp: urllib3.BaseHTTPResponse) -> None:
    """Read and drop an answer we will not use, returning its connection to the pool."""
    with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
        resp.read()
    resp.release_conn()


def _shutdown(resp: urllib3.BaseHTTPResponse) -> None:
    # Already closed or released: nothing is blocked on it.
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        resp.shutdown()


def _event(line: bytes | bytearray) -> JSON:
    try:
        event = orjson.loads(line)
    except ValueError as err:
        raise ApiError(0, f"watch stream: undecodable event: {err}") from err
    if not isinstance(event, dict):
        raise ApiError(0, "watch stream: event is not an object")
    return event


def _timeout(seconds: float | None) -> urllib3.Timeout | None:
    """A whole-request bound: connect and each read within `seconds` (None: default)."""
    if seconds is None:
        return None
    return urllib3.Timeout(total=seconds, connect=min(10.0, seconds), read=seconds)


def _seconds(value: Any) -> float | None:
    """A urllib3 timeout value as seconds for a socket (its "default" sentinel: None)."""
    return float(value) if isinstance(value, int | float) else None


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
