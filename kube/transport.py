"""The transport protocol under `kube.client`'s one request policy.

A transport moves bytes and nothing else: it sends one request (method, origin-form
target, encoded header lines, body) and returns the answer — whole (`exchange`) or as a
stream of body bytes (`stream`) — raises `TransportError` for anything that failed below
HTTP, and closes its idle connections on demand. Everything else is the policy's
(`kube.client.Client`), applied once on the way down, as httpx layers its clients: rate
limiting, request counts, JSON encoding, the header lines, the 401 token re-read and one
retry, error answers mapped to `ApiError` with `Retry-After`, and closing idle
connections after a timeout.

Two transports implement it; a client uses one for every request, so a write and the
read that follows it (a 409 re-read) go the same way:

* `kube.http1.Exchanger` — the lean HTTP/1.1 path, for a client that talks to the API
  server directly (every deployment without an HTTP proxy);
* `kube.urllib3_transport.Urllib3Transport` — urllib3's proxy manager, for a client
  configured with an HTTP proxy.

`StreamCanceller` ends a stream from another thread (an informer asked to stop). The
lean path hands it the connection's socket as soon as it is dialled — before the TLS
handshake and the wait for the answer's head — so a cancel never waits for a read
timeout; only the TCP connect itself (a black-holed address) is bounded by the connect
timeout alone. Behind a proxy the stream is handed over once its head is in.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


class TransportError(Exception):
    """The exchange failed below HTTP (dial, TLS, timeout, reset, malformed answer).
    `timeout` says whether it was a timeout (the client then drops idle connections)."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds: `connect` bounds the dial (TCP and TLS), `read` every socket read and
    write, `total` (when set) the reads together with what connecting took, as urllib3's
    `Timeout(total=...)`. None: no bound."""

    connect: float | None
    read: float | None
    total: float | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer. `read_all`/`close` let the policy treat it as a `Stream`."""

    status: int
    reason: str
    body: bytes
    retry_after: str | None
    date: str | None = None  # the `Date` header: the server's clock when it answered

    def read_all(self) -> bytes:
        return self.body

    def close(self) -> None:
        pass


class Stream(Protocol):
    """An answer whose head is in and whose body is read as it arrives. The reader
    closes it."""

    status: int
    reason: str
    retry_after: str | None
    date: str | None

    def data(self) -> Iterator[bytes]:
        """The body (de-chunked) as it arrives. Raises `TransportError`."""
        ...

    def read_all(self) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What `kube.client.Client` sends its requests over (see the module docstring).
    Its implementations (`kube.http1`, `kube.urllib3_transport`) restate these
    signatures."""

    def exchange(
        self, method: str, target: str, headers: bytes, body: bytes | None, timeouts: Timeouts
    ) -> Answer:
        """One request → its whole answer. `headers`: `Name: value\\r\\n` lines, without
        Host and Content-Length."""
        ...

    def stream(
        self,
        method: str,
        target: str,
        headers: bytes,
        timeouts: Timeouts,
        canceller: StreamCanceller | None = None,
    ) -> Stream:
        """A bodiless request on a connection of its own; returns once the head is in."""
        ...

    def close_idle(self) -> None:
        """Close every idle connection (those in use are left alone)."""
        ...


class Interruptible(Protocol):
    def shutdown(self) -> None:
        """End any blocked read or write on it at once (from another thread)."""
        ...


class StreamCanceller:
    """Ends a stream blocked in a socket read, from another thread.

    The transport `attach`es what can interrupt the stream (its socket) as soon as it
    has it and `detach`es it when the stream is closed; `cancel()` interrupts whatever is
    attached, and anything attached after `cancel()` is interrupted at once. This is
    what lets `Informer.run` return promptly when its stop event is set, whatever the
    read timeout."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handle: Interruptible | None = None
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            if self._handle is not None:
                _interrupt(self._handle)

    def attach(self, handle: Interruptible) -> None:
        with self._lock:
            self._handle = handle
            if self.cancelled:
                _interrupt(handle)

    def detach(self, handle: Interruptible) -> None:
        with self._lock:
            if self._handle is handle:
                self._handle = None


def _interrupt(handle: Interruptible) -> None:
    # Already closed or released: nothing is blocked on it.
    with contextlib.suppress(OSError, ValueError, RuntimeError):
        handle.shutdown()
