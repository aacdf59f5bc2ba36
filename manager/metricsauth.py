"""Authenticated, authorized `/metrics` (opt-in, `run --metrics-secure`), as
kube-controller-manager serves its metrics (component-base's delegated authentication and
authorization):

* **TLS.** The metrics port speaks HTTPS. The certificate is `--metrics-tls-cert-file`
  and `--metrics-tls-private-key-file` (re-read when either file changes, looked at most
  every `RELOAD_CHECK` seconds, so a rotated Secret is served without a restart), or, with
  neither, a self-signed one made at start in memory (as kube-controller-manager makes one
  when given no `--tls-cert-file`): ECDSA P-256, for the host name, `localhost`,
  127.0.0.1 and ::1. The key never touches a disk: it is handed to OpenSSL through an
  anonymous memory file.
* **Authentication**: the `Authorization: Bearer <token>` header, checked with a
  TokenReview. No token, or one the API server does not authenticate: 401 with
  `WWW-Authenticate: Bearer`. A TokenReview that fails (API server unreachable) is 401
  too, not cached, as the API server's authentication filter answers.
* **Authorization**: a SubjectAccessReview for the authenticated user, groups, uid and
  extra, `nonResourceAttributes: {path: /metrics, verb: get}` (the request's method,
  lower-case). Denied: 403. A review that fails: 500, not cached.
* **Cache**, as kube-controller-manager's defaults: a token's review for `TTL` (10 s),
  authenticated or not, keyed by the token's SHA-256 (the token itself is never kept);
  a user's access decision for `TTL`, allowed or not. Each cache holds at most
  `MAX_ENTRIES` (1024) entries, least recently used out first, so a scraper costs two
  API calls per `TTL` rather than per scrape, and a flood of made-up tokens costs bounded
  memory (each still costs one TokenReview, as it does kube-controller-manager).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube.client import ApiError, Client
from trust.memfile import memory_file

log = logging.getLogger(__name__)

TTL = 10.0
MAX_ENTRIES = 1024
RELOAD_CHECK = 10.0
PATH = "/metrics"

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """A bounded LRU whose entries expire `ttl` seconds after they were put. Thread-safe."""

    def __init__(
        self, ttl: float, max_entries: int, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._monotonic = monotonic
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry[0] <= self._monotonic():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = (self._monotonic() + self.ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


@dataclass(frozen=True)
class User:
    name: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Verdict:
    """What to answer: 200 (serve), 401, 403 or 500, and a short reason for the body."""

    status: int
    reason: str


UNAUTHENTICATED = object()  # cached: the token was reviewed and not authenticated


class DelegatedAuth:
    """TokenReview + SubjectAccessReview for `path`, cached (module docstring)."""

    def __init__(
        self,
        client: Client,
        *,
        path: str = PATH,
        ttl: float = TTL,
        max_entries: int = MAX_ENTRIES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.path = path
        self.tokens: TTLCache[str, object] = TTLCache(ttl, max_entries, monotonic)
        self.access: TTLCache[tuple[User, str], bool] = TTLCache(ttl, max_entries, monotonic)

    def check(self, authorization: str | None, method: str = "GET") -> Verdict:
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return Verdict(401, "Unauthorized")
        user = self._authenticate(token)
        if user is None:
            return Verdict(401, "Unauthorized")
        verb = method.lower()
        allowed = self.access.get((user, verb))
        if allowed is None:
            try:
                allowed = self._review_access(user, verb)
            except ApiError as err:
                log.warning("metrics: SubjectAccessReview failed", extra={"error": str(err)})
                return Verdict(500, "Internal Server Error")
            self.access.put((user, verb), allowed)
        if not allowed:
            return Verdict(403, f'Forbidden (user={user.name}, verb={verb}, path="{self.path}")')
        return Verdict(200, "OK")

    def _authenticate(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self.tokens.get(key)
        if cached is UNAUTHENTICATED:
            return None
        if isinstance(cached, User):
            return cached
        try:
            reviewed = self.client.create(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                },
            )
        except ApiError as err:
            log.warning("metrics: TokenReview failed", extra={"error": str(err)})
            return None
        status = reviewed.get("status") or {}
        if not status.get("authenticated"):
            self.tokens.put(key, UNAUTHENTICATED)
            return None
        info = status.get("user") or {}
        extra = info.get("extra") or {}
        user = User(
            str(info.get("username") or ""),
            str(info.get("uid") or ""),
            tuple(str(g) for g in info.get("groups") or ()),
            tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
        )
        self.tokens.put(key, user)
        return user

    def _review_access(self, user: User, verb: str) -> bool:
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": self.path, "verb": verb},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        reviewed = self.client.create(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
        )
        return bool((reviewed.get("status") or {}).get("allowed"))


# TLS ------------------------------------------------------------------------------------


class ServingCert:
    """The SSL context the metrics port serves with: from files (re-read when they
    change) or self-signed in memory (module docstring)."""

    def __init__(
        self,
        cert_file: str = "",
        key_file: str = "",
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._checked = monotonic()
        self._stamp = self._files_stamp()
        self._context = self._load()

    def context(self) -> ssl.SSLContext:
        if not self.cert_file:
            return self._context
        with self._lock:
            now = self._monotonic()
            if now - self._checked >= RELOAD_CHECK:
                self._checked = now
                stamp = self._files_stamp()
                if stamp != self._stamp:
                    try:
                        self._context = self._load()
                        self._stamp = stamp
                        log.info("metrics: serving certificate re-read")
                    except (OSError, ssl.SSLError, ValueError) as err:
                        # Mid-rotation (key and cert not yet a pair): keep serving the old.
                        log.warning(
                            "metrics: serving certificate unusable", extra={"error": str(err)}
                        )
            return self._context

    def _files_stamp(self) -> tuple[float, ...]:
        if not self.cert_file:
            return ()
        return tuple(os.stat(p).st_mtime for p in (self.cert_file, self.key_file))

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        else:
            cert, key = self_signed()
            with memory_file(cert + key, "metrics-tls") as path:
                context.load_cert_chain(path)
        return context


def self_signed(now: dt.datetime | None = None) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM): ECDSA P-256, a year, for this host and loopback."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname() or "localhost"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}@{int(now.timestamp())}")])
    names: list[x509.GeneralName] = [x509.DNSName(n) for n in dict.fromkeys((host, "localhost"))]
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1")]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem
