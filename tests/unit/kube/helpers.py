"""Helpers the kube/ tests share: a scripted HTTP/1.1 server, a kubeconfig with a token
file, informer test objects and a running informer."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from kube.client import Client
from kube.credentials import Credentials
from kube.incluster import ServerConfig
from kube.informer import Informer
from kube.types import JSON
from tests.unit.fakeapi import FakeApi

T = TypeVar("T")
PODS = "/api/v1/namespaces/ns/pods"


def pod(name: str, node: str = "n1", labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}},
        "spec": {"nodeName": node},
    }


@contextmanager
def running(inf: Informer[T], sync: bool = True) -> Iterator[threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    thread.start()
    try:
        if sync:
            assert inf.wait_for_sync(stop, timeout=5)
        yield stop
    finally:
        stop.set()
        thread.join(timeout=3)
        assert not thread.is_alive(), "informer did not stop"


def token_kubeconfig(fake: FakeApi, tmp_path: Path, token_file: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": fake.url}}],
                "users": [{"name": "u", "user": {"tokenFile": token_file}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


# a scripted HTTP/1.1 server ------------------------------------------------------------

Script = Callable[[socket.socket, int], None]


class ScriptedServer:
    """Accepts connections; for each request read, `script(conn, n)` writes the answer
    (n counts requests across connections)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.requests: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        with contextlib.suppress(OSError), conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                with self._lock:
                    self.requests.append(head + b"\r\n\r\n" + buf[:length])
                    n = len(self.requests)
                buf = buf[length:]
                self.script(conn, n)

    def close(self) -> None:
        """Stop accepting, and return once the accepting thread has ended. Closing the
        listener alone does not wake a thread blocked in accept(): it stayed there, on the
        descriptor number the next socket opened reuses, and took connections meant for
        later tests' servers (a FakeApi client got this server's scripted answer)."""
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes accept() with an error
        self.listener.close()
        self._acceptor.join(10)
        assert not self._acceptor.is_alive(), "the scripted server still accepts"

    def client(self) -> Client:
        return Client(ServerConfig(host=self.url), qps=0, credentials=Credentials.static({}))
