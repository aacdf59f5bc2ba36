"""Shared steps of the managed-CA integration and soak tests: read the phase, move a
stored retire time into the past (retire is due hours after a swap; a test may move the
persisted timestamp, never a test-only flag in the product), and probe TLS handshakes
between what the kubelet wrote for a server Pod and a client Pod."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from controlplane.workload import BUNDLE_FILE, CHAIN_FILE, KEY_FILE, VolumeFiles
from kube.client import ApiError, Client, is_conflict, is_not_found
from kube.leases import leases_path
from kube.times import format_time
from managedca.codec import PHASE, PREVIOUS
from managedca.material import pem_fingerprints
from trust import convergence


def ca_cli(kubeconfig: object, *args: str) -> subprocess.CompletedProcess[str]:
    """`service-serving-signer ca <args> --kubeconfig=…` as the operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "cli", "ca", *args, f"--kubeconfig={kubeconfig}"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def phase(client: Client, secret_path: str) -> str | None:
    try:
        secret = client.get(secret_path)
    except ApiError as err:
        if is_not_found(err):
            return None
        raise
    return (secret["metadata"].get("annotations") or {}).get(PHASE)


def edit(client: Client, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Read, change and replace the object at `path`, again on a conflict: the
    controllers write the same object (a renewed report, a moved phase) between our read
    and our write."""
    for _ in range(10):
        obj = client.get(path)
        change(obj)
        try:
            client.replace(path, obj)
            return
        except ApiError as err:
            if not is_conflict(err):
                raise
    raise AssertionError(f"could not change {path}: it kept changing")


def shipped_report_lease(client: Client, namespace: str) -> None:
    """The injector's convergence report Lease as config/injector ships it (empty): from
    then on the swap waits for the injector's report."""
    client.create(
        leases_path(namespace),
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": convergence.REPORT_NAME},
            "spec": {},
        },
    )


def move_retire_time_to_the_past(client: Client, secret_path: str) -> None:
    def change(secret: dict[str, Any]) -> None:
        previous = json.loads(secret["metadata"]["annotations"][PREVIOUS])
        for p in previous:
            p["retireAt"] = format_time(datetime.now(UTC) - timedelta(seconds=1))
        secret["metadata"]["annotations"][PREVIOUS] = json.dumps(previous)

    edit(client, secret_path, change)


def roots(files: VolumeFiles) -> set[str]:
    return set(pem_fingerprints(files.read(BUNDLE_FILE)))


def handshake(
    server: VolumeFiles, client: VolumeFiles, hostname: str, bundle: str = BUNDLE_FILE
) -> None:
    """Serve `server`'s projected key and chain; connect trusting only `client`'s file
    `bundle` (its projected bundle; `ca.crt` of a mounted ConfigMap). Each file is read
    now (what the kubelet has written at this instant)."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server.directory / CHAIN_FILE, server.directory / KEY_FILE)
    client_ctx = ssl.create_default_context(cafile=str(client.directory / bundle))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        failure: list[BaseException] = []

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError) as err:
                failure.append(err)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_ctx.wrap_socket(raw, server_hostname=hostname) as tls,
        ):
            tls.sendall(b"x")
        thread.join(5)


class Prober:
    """Handshakes every `period` from the client Pod's bundle (file `bundle` of its
    volume) to each server Pod's files."""

    def __init__(
        self, client: VolumeFiles, hostname: str, period: float = 0.5, bundle: str = BUNDLE_FILE
    ) -> None:
        self.client = client
        self.bundle = bundle
        self.hostname = hostname
        self.period = period
        self.servers: dict[str, VolumeFiles] = {}
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            for name, server in list(self.servers.items()):
                try:
                    handshake(server, self.client, self.hostname, self.bundle)
                    self.ok += 1
                except (OSError, ssl.SSLError) as err:
                    self.failed.append(f"{datetime.now(UTC):%H:%M:%S} {name}: {err}")
