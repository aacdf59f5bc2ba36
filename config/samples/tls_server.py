"""HTTPS server that keeps serving across certificate refreshes (docs/reload.md).

The kubelet replaces tls.key and tls.crt together (one atomic rename of the volume's
..data link) at about half of the certificate's life. Every new connection checks the
files' identity (inode, mtime, size) and loads the new pair when it changed; connections
already open keep the certificate they started with. A pair that fails to load (key and
chain not matching) keeps the previous one in service and is retried on the next
connection. Standard library only.
"""

import http.server
import os
import socket
import ssl
import sys
import threading

CERT = os.environ.get("TLS_CERT_FILE", "/var/run/tls/tls.crt")
KEY = os.environ.get("TLS_KEY_FILE", "/var/run/tls/tls.key")
HOST = os.environ.get("HOST", "::" if socket.has_dualstack_ipv6() else "0.0.0.0")
PORT = int(os.environ.get("PORT", "8443"))


def log(message):
    print(message, file=sys.stderr, flush=True)


class ReloadingContext:
    """The SSLContext for the current key and chain files."""

    def __init__(self, cert, key):
        self.cert, self.key = cert, key
        self._lock = threading.Lock()
        self._seen = None
        self._context = None
        self.current()  # refuse to start without a usable pair

    def _identity(self):
        return tuple(
            (s.st_ino, s.st_mtime_ns, s.st_size) for s in map(os.stat, (self.cert, self.key))
        )

    def current(self):
        with self._lock:
            try:
                seen = self._identity()
                if seen != self._seen:
                    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    context.minimum_version = ssl.TLSVersion.TLSv1_2
                    context.load_cert_chain(self.cert, self.key)
                    self._context, self._seen = context, seen
                    log(f"loaded {self.cert}")
            except OSError as err:  # ssl.SSLError is an OSError
                if self._context is None:
                    raise
                log(f"keeping the previous certificate: {err}")
            return self._context


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello from {socket.gethostname()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6 if ":" in HOST else socket.AF_INET
    daemon_threads = True

    def __init__(self, contexts):
        self.contexts = contexts
        super().__init__((HOST, PORT), Handler)

    def server_bind(self):
        if self.address_family == socket.AF_INET6:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def get_request(self):
        sock, address = super().get_request()
        context = self.contexts.current()
        # The handshake runs in the connection's thread, not in the accept loop.
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address


if __name__ == "__main__":
    server = Server(ReloadingContext(CERT, KEY))
    log(f"serving https on [{HOST}]:{PORT}")
    server.serve_forever()
