"""A lean HTTP/1.1 client for the API requests made per certificate: writes and watches.

Why it exists: a status write through urllib3 + `http.client` spends most of its client
CPU on layers a JSON API client does not need — header objects assembled field by field
and sent in several TLS writes, the response headers parsed by the `email` package,
response wrappers, pool bookkeeping. Here a request is one bytes object written with one
`sendall`, and the answer is parsed from a buffer: the status line, the three headers we
read (`Content-Length`, `Transfer-Encoding`, `Connection`, plus `Retry-After`), and a body
by length or chunked, for a fraction of the client CPU of a write (bench/README.md,
"Figures behind module decisions"). A watch is one request on a connection of its own
whose chunked body is de-chunked straight off the socket.

What it keeps from the urllib3 path (it is built on it):

* **Dialling, TLS and sockets** are urllib3's: a connection comes from the host pool's
  `_new_conn()` and `connect()`, so the CA, client certificate, server name checks,
  TCP_NODELAY, keepalive and TCP_USER_TIMEOUT (`kube.client.socket_options`) are exactly
  those of every other request.
* **Reuse.** Idle connections wait in a LIFO (the most recently used first, like
  urllib3's pool); one the server closed (readable while idle) is discarded before use;
  an answer with `Connection: close`, a body read to EOF, or anything unparsed left
  over closes the connection instead of returning it.
* **Timeouts.** The connect timeout bounds the dial, the read timeout every socket
  read and write; a timeout (or any transport error) raises `TransportError` and closes
  that connection; `close_idle()` closes the idle ones (the client does so on a timeout).
* **Cancelling a stream.** A stream's socket is handed to its `StreamCanceller` as soon
  as the TCP connection is up (a duplicate of its descriptor, so shutting it down from
  another thread never touches the TLS object in use): a cancel ends the TLS handshake,
  the wait for the head or a read of the body at once.

It implements `kube.transport.Transport`; the request policy above it is
`kube.client.Client`'s.

What it does not do: redirects, proxies (a proxied client keeps urllib3 for everything),
`Expect: 100-continue`, compressed bodies (it asks for `identity`), HTTP/2.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from kube.transport import Answer, StreamCanceller, Timeouts, TransportError

MAX_HEADER_BYTES = 1 << 20  # kube-apiserver's own MaxHeaderBytes
_RECV = 65536


class Stream:
    """A response read as it arrives, on a connection of its own (never reused): a
    `kube.transport.Stream`."""

    def __init__(
        self, link: _Link, head: _Head, buf: bytearray, canceller: StreamCanceller | None
    ) -> None:
        self._link = link
        self._head = head
        self._buf = buf
        self._canceller = canceller
        self.status = head.status
        self.reason = head.reason
        self.retry_after = head.retry_after
        self.date = head.date

    def data(self) -> Iterator[bytes]:
        """The body, de-chunked, as the server sends it. Raises `TransportError`
        (a timeout, a reset, a body cut off)."""
        try:
            yield from _stream_body(self._link.sock, self._buf, self._head)
        except TimeoutError as err:
            raise TransportError(f"TimeoutError: {err or 'timed out'}", timeout=True) from err
        except (OSError, ValueError) as err:
            raise TransportError(f"{type(err).__name__}: {err}") from err

    def read_all(self) -> bytes:
        return b"".join(self.data())

    def close(self) -> None:
        _release(self._link, self._canceller)


class _Connection(Protocol):
    """What we use of a urllib3 `HTTPConnection`."""

    sock: Any
    timeout: Any

    def connect(self) -> None: ...

    def close(self) -> None: ...


class _Link:
    """One connected urllib3 connection and its socket (and, for a stream, the
    duplicate descriptor its canceller shuts down)."""

    __slots__ = ("conn", "interrupter", "sock")

    def __init__(self, conn: _Connection, interrupter: _Interrupter | None = None) -> None:
        self.conn = conn
        self.sock: Any = conn.sock
        self.interrupter = interrupter

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.interrupter is not None:
            self.interrupter.close()


class _Interrupter:
    """A duplicate of a connection's TCP socket descriptor. `shutdown()` acts on the
    socket, not the descriptor, so it ends a read blocked on the original (or on the TLS
    socket wrapped around it) without touching either object from another thread."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock.dup()

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._sock.close()


def _release(link: _Link, canceller: StreamCanceller | None) -> None:
    """Close a stream's connection, detached first: a cancel must not shut down a
    descriptor number that is closed (and maybe reused)."""
    if canceller is not None and link.interrupter is not None:
        canceller.detach(link.interrupter)
    link.close()


class Exchanger:
    """Sends requests over reused connections to one origin: a
    `kube.transport.Transport`. Thread-safe: a connection is used by one request at a
    time."""

    def __init__(self, new_connection: Callable[[], _Connection], authority: str) -> None:
        self._new_connection = new_connection
        self._prefix = f"Host: {authority}\r\nAccept-Encoding: identity\r\n".encode("latin-1")
        self._idle: list[_Link] = []
        self._lock = threading.Lock()
        self.dialled = 0

    def exchange(
        self,
        method: str,
        target: str,
        headers: bytes,
        body: bytes | None,
        timeouts: Timeouts,
    ) -> Answer:
        """One request → its answer. `headers`: `Name: value\\r\\n` lines (no Host, no
        Content-Length). Each socket read waits at most `timeouts.read`, and at most what
        is left of `timeouts.total` after connecting (as urllib3's `Timeout(total=...)`).
        Raises `TransportError`."""
        head = [f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self._prefix, headers]
        if body is not None:
            head.append(b"Content-Length: %d\r\n\r\n" % len(body))
            head.append(body)
        else:
            head.append(b"Content-Length: 0\r\n\r\n" if method != "GET" else b"\r\n")
        request = b"".join(head)
        read_timeout, total = timeouts.read, timeouts.total
        started = time.monotonic()
        link = self._take(timeouts.connect)
        if total is not None:
            left = max(total - (time.monotonic() - started), 0.001)
            read_timeout = left if read_timeout is None else min(read_timeout, left)
        try:
            link.sock.settimeout(read_timeout)
            link.sock.sendall(request)
            answer, reusable = _read_answer(link.sock, method)
        except TimeoutError as err:
            link.close()
            raise TransportError(f"TimeoutError: {err or 'timed out'}", timeout=True) from err
        except (OSError, ValueError) as err:
            link.close()
            raise TransportError(f"{type(err).__name__}: {err}") from err
        if reusable:
            with self._lock:
                self._idle.append(link)
        else:
            link.close()
        return answer

    def stream(
        self,
        method: str,
        target: str,
        headers: bytes,
        timeouts: Timeouts,
        canceller: StreamCanceller | None = None,
    ) -> Stream:
        """Send a bodiless request on a fresh connection and return once the answer's
        header block is in; the caller reads and closes the `Stream`. `canceller` gets
        the socket as soon as it is connected (see the module docstring)."""
        request = b"".join(
            (f"{method} {target} HTTP/1.1\r\n".encode("latin-1"), self._prefix, headers, b"\r\n")
        )
        link = self._dial(timeouts.connect, canceller)
        try:
            link.sock.settimeout(timeouts.read)
            link.sock.sendall(request)
            buf = bytearray()
            head = _read_head(link.sock, buf)
        except TimeoutError as err:
            _release(link, canceller)
            raise TransportError(f"TimeoutError: {err or 'timed out'}", timeout=True) from err
        except (OSError, ValueError) as err:
            _release(link, canceller)
            raise TransportError(f"{type(err).__name__}: {err}") from err
        return Stream(link, head, buf, canceller)

    def close_idle(self) -> None:
        """Close every idle connection (those in use are left alone)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for link in idle:
            link.close()

    def _take(self, connect_timeout: float | None) -> _Link:
        while True:
            with self._lock:
                link = self._idle.pop() if self._idle else None
            if link is None:
                break
            # Readable while idle: the server closed it (or sent something unasked).
            try:
                poller = select.poll()
                poller.register(link.sock, select.POLLIN)
                dropped = bool(poller.poll(0))
            except (OSError, ValueError):
                dropped = True
            if not dropped:
                return link
            link.close()
        return self._dial(connect_timeout)

    def _dial(
        self, connect_timeout: float | None, canceller: StreamCanceller | None = None
    ) -> _Link:
        conn = self._new_connection()
        conn.timeout = connect_timeout
        interrupter: list[_Interrupter] = []
        if canceller is not None:
            # urllib3 makes the TCP connection in `_new_conn()` and then, for HTTPS,
            # shakes hands on it inside `connect()`: hand the socket over in between.
            hooked: Any = conn
            tcp_connect: Callable[[], socket.socket] = hooked._new_conn

            def connected() -> socket.socket:
                sock = tcp_connect()
                interrupter.append(_Interrupter(sock))
                canceller.attach(interrupter[0])
                return sock

            hooked._new_conn = connected
        try:
            conn.connect()
        except Exception as err:
            _release(_Link(conn, interrupter[0] if interrupter else None), canceller)
            if isinstance(err, TimeoutError):
                msg = f"TimeoutError: connect: {err or 'timed out'}"
                raise TransportError(msg, timeout=True) from err
            raise TransportError(f"{type(err).__name__}: {err}") from err
        self.dialled += 1
        return _Link(conn, interrupter[0] if interrupter else None)


@dataclass(frozen=True, slots=True)
class _Head:
    status: int
    reason: str
    length: int | None
    chunked: bool
    close: bool
    retry_after: str | None
    date: str | None


def _read_head(sock: Any, buf: bytearray) -> _Head:
    """Read one response header block into a `_Head` (skipping 1xx answers), leaving the
    bytes after it in `buf`. Raises OSError/TimeoutError, ValueError when malformed."""
    while True:
        end = buf.find(b"\r\n\r\n")
        while end < 0:
            if len(buf) > MAX_HEADER_BYTES:
                raise ValueError("response header too large")
            chunk = sock.recv(_RECV)
            if not chunk:
                raise ConnectionResetError("server closed the connection before answering")
            buf += chunk
            end = buf.find(b"\r\n\r\n", max(0, len(buf) - len(chunk) - 3))
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        del buf[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit() or len(code) != 3:
            raise ValueError(f"malformed status line {lines[0][:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            continue
        length: int | None = None
        chunked = False
        close = version == "HTTP/1.0"
        retry_after: str | None = None
        date: str | None = None
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"malformed header line {line[:80]!r}")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
                if length < 0:
                    raise ValueError("negative Content-Length")
            elif name == "transfer-encoding":
                chunked = value.strip().lower().endswith("chunked")
            elif name == "connection":
                tokens = {t.strip().lower() for t in value.split(",")}
                close = "close" in tokens or (close and "keep-alive" not in tokens)
            elif name == "retry-after":
                retry_after = value.strip()
            elif name == "date":
                date = value.strip()
            elif name == "content-encoding" and value.strip().lower() not in ("", "identity"):
                raise ValueError(f"unexpected Content-Encoding {value.strip()!r}")
        return _Head(status, reason, length, chunked, close, retry_after, date)


def _read_answer(sock: Any, method: str) -> tuple[Answer, bool]:
    """Read one whole response; returns it and whether the connection can be reused."""
    buf = bytearray()
    head = _read_head(sock, buf)
    close = head.close
    if method == "HEAD" or head.status in (204, 304):
        body = b""
    elif head.chunked:
        body = _read_chunked(sock, buf)
    elif head.length is not None:
        while len(buf) < head.length:
            chunk = sock.recv(max(_RECV, head.length - len(buf)))
            if not chunk:
                raise ConnectionResetError("body cut off")
            buf += chunk
        body = bytes(buf[: head.length])
        del buf[: head.length]
    else:  # delimited by the end of the connection
        while chunk := sock.recv(_RECV):
            buf += chunk
        body, close = bytes(buf), True
        buf.clear()
    answer = Answer(head.status, head.reason, body, head.retry_after, head.date)
    return answer, not close and not buf


def _read_chunked(sock: Any, buf: bytearray) -> bytes:
    """Decode a chunked body from `buf` + the socket; leaves what follows in `buf`."""
    out = bytearray()
    pos = 0
    while True:
        nl = buf.find(b"\r\n", pos)
        while nl < 0:
            _fill(sock, buf)
            nl = buf.find(b"\r\n", pos)
        size = int(bytes(buf[pos:nl]).split(b";", 1)[0].strip(), 16)
        start = nl + 2
        if size == 0:
            # Trailers (none from kube-apiserver) end with an empty line.
            while True:
                nl = buf.find(b"\r\n", start)
                while nl < 0:
                    _fill(sock, buf)
                    nl = buf.find(b"\r\n", start)
                if nl == start:
                    del buf[: nl + 2]
                    return bytes(out)
                start = nl + 2
        while len(buf) < start + size + 2:
            _fill(sock, buf)
        out += buf[start : start + size]
        if buf[start + size : start + size + 2] != b"\r\n":
            raise ValueError("malformed chunk")
        pos = start + size + 2
        if pos > _RECV:
            del buf[:pos]
            pos = 0


def _stream_body(sock: Any, buf: bytearray, head: _Head) -> Iterator[bytes]:
    """The body as it arrives (de-chunked), for a response read as a stream."""
    if head.chunked:
        while True:
            nl = buf.find(b"\r\n")
            while nl < 0:
                _fill(sock, buf)
                nl = buf.find(b"\r\n")
            size = int(bytes(buf[:nl]).split(b";", 1)[0].strip(), 16)
            del buf[: nl + 2]
            if size == 0:
                return  # trailers, if any, die with the connection
            while size:
                if not buf:
                    _fill(sock, buf)
                take = min(size, len(buf))
                yield bytes(buf[:take])
                del buf[:take]
                size -= take
            while len(buf) < 2:
                _fill(sock, buf)
            if buf[:2] != b"\r\n":
                raise ValueError("malformed chunk")
            del buf[:2]
    left = head.length
    if buf:
        data = bytes(buf if left is None else buf[:left])
        buf.clear()
        if left is not None:
            left -= len(data)
        yield data
    while left is None or left > 0:
        chunk = sock.recv(_RECV if left is None else min(_RECV, left))
        if not chunk:
            if left is None:
                return
            raise ConnectionResetError("body cut off")
        if left is not None:
            left -= len(chunk)
        yield chunk


def _fill(sock: Any, buf: bytearray) -> None:
    chunk = sock.recv(_RECV)
    if not chunk:
        raise ConnectionResetError("body cut off")
    buf += chunk
