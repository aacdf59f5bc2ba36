"""The urllib3 transport: `kube.transport.Transport` over a urllib3 pool manager, for a
client configured with an HTTP proxy (`kube.http1` does not speak to proxies).

It only moves bytes: the header lines the policy encoded are handed to urllib3 as a
dict, urllib3's failures become `TransportError` (flagged when they are timeouts), and
no retries or redirects are made. A stream is handed to its `StreamCanceller` once its
head is in (`HTTPResponse.shutdown()` ends a blocked read); a cancel while the request
is dialled or awaits its head waits for the timeouts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import urllib3

from kube.transport import Answer, StreamCanceller, Timeouts, TransportError

_READ = 65536


class Urllib3Transport:
    """Requests to one origin (`scheme://host:port`) through `pool`."""

    def __init__(self, pool: urllib3.PoolManager, origin: str) -> None:
        self._pool = pool
        self._origin = origin

    def exchange(
        self, method: str, target: str, headers: bytes, body: bytes | None, timeouts: Timeouts
    ) -> Answer:
        resp = self._open(method, target, headers, body, timeouts)
        try:
            raw: bytes = resp.read()
        except (urllib3.exceptions.HTTPError, OSError) as err:
            resp.close()
            raise _failure(err) from err
        finally:
            resp.release_conn()
        got = resp.headers
        return Answer(resp.status, resp.reason or "", raw, got.get("Retry-After"), got.get("Date"))

    def stream(
        self,
        method: str,
        target: str,
        headers: bytes,
        timeouts: Timeouts,
        canceller: StreamCanceller | None = None,
    ) -> _ResponseStream:
        return _ResponseStream(self._open(method, target, headers, None, timeouts), canceller)

    def close_idle(self) -> None:
        self._pool.clear()

    def _open(
        self, method: str, target: str, headers: bytes, body: bytes | None, timeouts: Timeouts
    ) -> urllib3.BaseHTTPResponse:
        try:
            return self._pool.request(
                method,
                f"{self._origin}{target}",
                body=body,
                headers=_header_dict(headers),
                timeout=urllib3.Timeout(
                    connect=timeouts.connect, read=timeouts.read, total=timeouts.total
                ),
                preload_content=False,
                retries=False,
                redirect=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise _failure(err) from err


class _ResponseStream:
    """A urllib3 response read as it arrives: a `kube.transport.Stream`."""

    def __init__(self, resp: urllib3.BaseHTTPResponse, canceller: StreamCanceller | None) -> None:
        self._resp = resp
        self._canceller = canceller
        self.status = resp.status
        self.reason = resp.reason or ""
        self.retry_after: str | None = resp.headers.get("Retry-After")
        self.date: str | None = resp.headers.get("Date")
        if canceller is not None:
            canceller.attach(self)

    def data(self) -> Iterator[bytes]:
        try:
            while chunk := self._resp.read1(_READ):
                yield chunk
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as err:
            raise _failure(err) from err

    def read_all(self) -> bytes:
        return b"".join(self.data())

    def shutdown(self) -> None:
        self._resp.shutdown()

    def close(self) -> None:
        if self._canceller is not None:
            self._canceller.detach(self)
        # Close before releasing: a half-read stream must not go back to the pool.
        with contextlib.suppress(OSError):
            self._resp.close()
        self._resp.release_conn()


def _header_dict(lines: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines.decode("latin-1").split("\r\n"):
        if line:
            name, _, value = line.partition(": ")
            headers[name] = value
    return headers


def _failure(err: BaseException) -> TransportError:
    timeout = isinstance(err, urllib3.exceptions.TimeoutError | TimeoutError)
    return TransportError(f"{type(err).__name__}: {err}", timeout=timeout)
