"""A TCP proxy that can go silent on its open connections while still accepting new ones.

`freeze()` is what a NAT or load balancer that dropped its state looks like from the
client, or a partitioned server behind a proxy: every connection open at that moment
stays open (the proxy's kernel keeps ACKing, so TCP keepalive sees nothing wrong) but no
byte crosses it again in either direction; connections dialled after the freeze work
normally. Loopback only; a thread per direction per connection (tests open few)."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class _Pair:
    client: socket.socket
    upstream: socket.socket
    frozen: threading.Event = field(default_factory=threading.Event)


class FreezingProxy:
    """`listen`: where it accepts (default a free port on 127.0.0.1; a Service's loopback
    ClusterIP and port makes it that Service's kube-proxy)."""

    def __init__(
        self, upstream_host: str, upstream_port: int, listen: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._listener = socket.create_server(listen)
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._closed = threading.Event()
        self.accepted = 0

    @property
    def port(self) -> int:
        port: int = self._listener.getsockname()[1]
        return port

    def start(self) -> FreezingProxy:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def freeze(self) -> int:
        """Silence every connection open now; returns how many."""
        with self._lock:
            pairs = [p for p in self._pairs if not p.frozen.is_set()]
            for pair in pairs:
                pair.frozen.set()
        return len(pairs)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            # Closing alone leaves a thread blocked in accept(); one such thread in the
            # unit tests took connections meant for a later server of the same session.
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in (pair.client, pair.upstream):
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.append(pair)
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(pair, src, dst), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, pair: _Pair, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self._closed.is_set():
                if pair.frozen.is_set():
                    # Read nothing, send nothing, close nothing: a silent peer.
                    self._closed.wait()
                    return
                readable, _, _ = select.select([src], [], [], 0.05)
                if not readable or pair.frozen.is_set():
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        if not pair.frozen.is_set():
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
