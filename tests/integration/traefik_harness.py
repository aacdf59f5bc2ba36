"""A Gateway in front of a backend the real kubelet's certificate serves, for the Traefik
tests and the soak: the objects (GatewayClass, Gateway, HTTPRoute, BackendTLSPolicy, a
Service Traefik dials at its ClusterIP), the backend on that ClusterIP, and a steady
request loop that counts answers."""

from __future__ import annotations

import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from controlplane.traefik import CONTROLLER_NAME, NATIVE_LB_ANNOTATION, Traefik
from controlplane.workload import VolumeFiles
from kube.client import Client, is_not_found
from tests.integration.webhook_server import WebhookServer

GW = "/apis/gateway.networking.k8s.io/v1"
BACKEND_PORT = 8443


def gateway_class(client: Client) -> str:
    """A GatewayClass Traefik controls (unique name; deleted by the caller)."""
    name = f"traefik-{uuid.uuid4().hex[:8]}"
    client.create(
        f"{GW}/gatewayclasses",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": name},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
    )
    return name


def backend_service(client: Client, namespace: str, name: str, app: str) -> str:
    """A Service Traefik dials at its ClusterIP (kube-apiserver refuses loopback
    EndpointSlice addresses); its ClusterIP."""
    svc = client.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "annotations": {NATIVE_LB_ANNOTATION: "true"}},
            "spec": {
                "selector": {"app": app},
                "ports": [{"name": "https", "port": BACKEND_PORT}],
            },
        },
    )
    return str(svc["spec"]["clusterIP"])


def route_through(
    client: Client,
    namespace: str,
    traefik: Traefik,
    class_name: str,
    service: str,
    ca_config_map: str,
    hostname: str | None = None,
) -> None:
    """Gateway (HTTP on Traefik's `web` entry point) → HTTPRoute for host `route_host`
    (every test's Gateway shares the entry point) → Service, with a BackendTLSPolicy
    that trusts `ca_config_map`'s `ca.crt` and verifies `hostname` (default
    `<service>.<namespace>.svc`)."""
    ns = f"{GW}/namespaces/{namespace}"
    trust = {"group": "", "kind": "ConfigMap", "name": ca_config_map}
    client.create(
        f"{ns}/gateways",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "gw"},
            "spec": {
                "gatewayClassName": class_name,
                "listeners": [{"name": "web", "protocol": "HTTP", "port": traefik.web_port}],
            },
        },
    )
    client.create(
        f"{ns}/httproutes",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": service},
            "spec": {
                "parentRefs": [{"name": "gw"}],
                "hostnames": [route_host(namespace)],
                "rules": [{"backendRefs": [{"name": service, "port": BACKEND_PORT}]}],
            },
        },
    )
    # One policy per Service: Traefik before v3.6.20 (#13306; the pin is v3.6.12) can
    # match a policy with several targetRefs against the wrong Service.
    client.create(
        f"{ns}/backendtlspolicies",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "BackendTLSPolicy",
            "metadata": {"name": service},
            "spec": {
                "targetRefs": [{"group": "", "kind": "Service", "name": service}],
                "validation": {
                    "caCertificateRefs": [trust],
                    "hostname": hostname or f"{service}.{namespace}.svc",
                },
            },
        },
    )


def route_host(namespace: str) -> str:
    """The Host a test's requests carry: its own route, whatever other Gateways exist."""
    return f"{namespace}.gateway.test"


def conditions(obj: dict[str, Any], *path: str) -> dict[str, str]:
    """type → status of the conditions at `status.<path...>` (lists: every element's)."""
    found: dict[str, str] = {}

    def walk(node: Any, rest: tuple[str, ...]) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item, rest)
        elif isinstance(node, dict):
            if not rest:
                for c in node.get("conditions") or []:
                    found[c["type"]] = c["status"]
            else:
                walk(node.get(rest[0]), rest[1:])

    walk(obj.get("status") or {}, path)
    return found


def get(url: str, host: str) -> int:
    """The status code of a GET with Host `host` (0 when nothing answers)."""
    try:
        request = urllib.request.Request(url, headers={"Host": host})
        with urllib.request.urlopen(request, timeout=5) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return 0


def answer(traefik: Traefik, namespace: str) -> int:
    """What Traefik answers to `GET /ok` on the test's route."""
    return get(traefik.url("/ok"), route_host(namespace))


class Requests:
    """GETs at a steady `rate` per second; `codes` counts the answers."""

    def __init__(self, url: str, host: str, rate: float) -> None:
        self.url = url
        self.host = host
        self.period = 1.0 / rate
        self.codes: Counter[int] = Counter()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            code = get(self.url, self.host)
            self.codes[code] += 1
            if code != 200:
                self.failed.append(f"{time.strftime('%H:%M:%S')} {code}")
            next_at += self.period
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    @property
    def ok(self) -> int:
        return self.codes[200]

    def __enter__(self) -> Requests:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)


@contextmanager
def backend(
    cluster_ip: str, chain: bytes, key: bytes, port: int = BACKEND_PORT
) -> Iterator[WebhookServer]:
    """The backend on the Service's ClusterIP, serving `chain` (`/ok` answers 200)."""
    server = WebhookServer(cluster_ip, port, chain, key).start()
    try:
        yield server
    finally:
        server.close()


@contextmanager
def following_backend(
    cluster_ip: str, files: VolumeFiles, port: int = BACKEND_PORT
) -> Iterator[WebhookServer]:
    """`backend` serving what the kubelet keeps in `files`: a changed chain (the kubelet's
    refresh) is served from the next connection on, as a server re-reading its files."""
    chain, key = files.chain, files.key
    stop = threading.Event()
    with backend(cluster_ip, chain, key, port) as server:

        def follow() -> None:
            nonlocal chain
            while not stop.wait(1.0):
                try:
                    new_chain, new_key = files.chain, files.key
                    if new_chain != chain:
                        server.use_certificate(new_chain, new_key)
                        chain = new_chain
                except (OSError, ValueError, ssl.SSLError):
                    continue  # caught between the kubelet's two writes: next second

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            stop.set()
            thread.join(5)


def delete_quietly(client: Client, path: str) -> None:
    try:
        client.delete(path)
    except Exception as err:
        if not is_not_found(err):
            raise
