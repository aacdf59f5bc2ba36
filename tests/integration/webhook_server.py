"""A small HTTPS server that kube-apiserver calls as a webhook, an aggregated API server
and a CRD conversion webhook, bound to a Service's ClusterIP (the test control plane's
Service range is inside 127.0.0.0/8, all of which Linux routes to loopback).

Its serving certificate comes from our signer through a kubelet-style PCR, and can be
swapped while it runs (`use_certificate`): connections accepted after the swap use the
new chain and key, connections already open keep theirs (as a Go server reloading its
certificate does).

What it answers:
- `POST /validate` — an AdmissionReview v1: denies objects labelled `reject: "true"`
  with `REJECT_MESSAGE`, allows the rest; counts calls.
- `POST /convert` — a ConversionReview v1 between `<group>/v1` (`spec.size`) and
  `<group>/v2` (`spec.replicas`).
- `GET /apis/<group>/<version>` — an APIResourceList with one resource (`widgets`), so
  the aggregator's availability check and discovery through kube-apiserver work.
"""

from __future__ import annotations

import json
import socket
import ssl
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REJECT_MESSAGE = "rejected by the test webhook: label reject=true"


class WebhookServer:
    def __init__(self, host: str, port: int, chain_pem: bytes, key_pem: bytes) -> None:
        self.host = host
        self.port = port
        self._tmp = tempfile.TemporaryDirectory(prefix="webhook-")
        self._lock = threading.Lock()
        self._generation = 0
        self.admission_calls = 0
        self.conversion_calls = 0
        self.discovery_calls = 0
        self._context = self._make_context(chain_pem, key_pem)
        outer = self

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self) -> tuple[socket.socket, Any]:
                sock, addr = self.socket.accept()
                # The handshake happens in the handler thread (first read), so one slow
                # client never blocks accept().
                return outer._wrap(sock), addr

        self._server = Server((host, port), _handler(self))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"webhook-{host}", daemon=True
        )

    # TLS ------------------------------------------------------------------------------

    def _make_context(self, chain_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
        self._generation += 1
        directory = Path(self._tmp.name)
        chain = directory / f"chain-{self._generation}.pem"
        key = directory / f"key-{self._generation}.pem"
        chain.write_bytes(chain_pem)
        key.write_bytes(key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(chain, key)
        return context

    def use_certificate(self, chain_pem: bytes, key_pem: bytes) -> None:
        """Serve a new chain from the next handshake on."""
        context = self._make_context(chain_pem, key_pem)
        with self._lock:
            self._context = context

    def _current(self) -> ssl.SSLContext:
        with self._lock:
            return self._context

    def _wrap(self, sock: socket.socket) -> ssl.SSLSocket:
        # Each connection takes the context current when it is accepted: a swap never
        # mixes one chain with another key mid-handshake.
        return self._current().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)

    # lifecycle --------------------------------------------------------------------------

    def start(self) -> WebhookServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
        self._tmp.cleanup()

    def __enter__(self) -> WebhookServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count(self, what: str) -> None:
        with self._lock:
            setattr(self, what, getattr(self, what) + 1)


def _handler(server: WebhookServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def _send(self, code: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            path = self.path.split("?")[0]
            if path == "/validate":
                server.count("admission_calls")
                self._send(200, admission_response(self._body()))
            elif path == "/convert":
                server.count("conversion_calls")
                self._send(200, conversion_response(self._body()))
            else:
                self._send(404, {"message": "not found"})

        def do_GET(self) -> None:
            parts = self.path.split("?")[0].strip("/").split("/")
            if parts == ["ok"]:  # a plain backend's answer (the Gateway tests)
                self._send(200, {"ok": True})
            elif len(parts) == 3 and parts[0] == "apis":
                server.count("discovery_calls")
                self._send(200, resource_list(parts[1], parts[2]))
            else:
                self._send(404, {"kind": "Status", "code": 404, "message": "not found"})

    return Handler


def admission_response(review: Any) -> dict[str, Any]:
    request = review.get("request") or {}
    labels = ((request.get("object") or {}).get("metadata") or {}).get("labels") or {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    if labels.get("reject") == "true":
        response = {
            "uid": request.get("uid", ""),
            "allowed": False,
            "status": {"code": 403, "message": REJECT_MESSAGE},
        }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }


def conversion_response(review: Any) -> dict[str, Any]:
    request = review.get("request") or {}
    desired = str(request.get("desiredAPIVersion", ""))
    converted = []
    for obj in request.get("objects") or []:
        out = dict(obj)
        spec = dict(out.get("spec") or {})
        if desired.endswith("/v2") and "size" in spec:
            spec["replicas"] = spec.pop("size")
        elif desired.endswith("/v1") and "replicas" in spec:
            spec["size"] = spec.pop("replicas")
        out["spec"] = spec
        out["apiVersion"] = desired
        converted.append(out)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {
            "uid": request.get("uid", ""),
            "convertedObjects": converted,
            "result": {"status": "Success"},
        },
    }


def resource_list(group: str, version: str) -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [
            {
                "name": "widgets",
                "singularName": "widget",
                "namespaced": True,
                "kind": "Widget",
                "verbs": ["get", "list"],
            }
        ],
    }
