"""Authenticated, authorized /metrics: TokenReview then SubjectAccessReview, cached
briefly and boundedly, over TLS. (The real API server's answers: the integration test.)"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry, Counter

from kube.client import ApiError
from manager.metricsauth import DelegatedAuth, ServingCert, TTLCache, self_signed
from manager.ops import OpsServer
from manager.options import BindAddress, Options, OptionsError

TOKENS = {
    "reader": {"username": "system:serviceaccount:mon:prometheus", "uid": "u1", "groups": ["g"]},
    "nobody": {"username": "system:serviceaccount:mon:other", "uid": "u2", "groups": ["g"]},
}
ALLOWED = {"system:serviceaccount:mon:prometheus"}


class Reviews:
    """The API server's TokenReview and SubjectAccessReview, counted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: str | None = None

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        kind = path.rsplit("/", 1)[1]
        self.calls.append((kind, body))
        if self.fail == kind:
            raise ApiError(0, "connection refused")
        if kind == "tokenreviews":
            user = TOKENS.get(body["spec"]["token"])
            return {"status": {"authenticated": True, "user": user} if user else {}}
        return {"status": {"allowed": body["spec"]["user"] in ALLOWED}}

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.calls if k == kind)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reviews() -> Reviews:
    return Reviews()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(reviews: Reviews, clock: Clock) -> DelegatedAuth:
    return DelegatedAuth(reviews, monotonic=clock)  # type: ignore[arg-type]


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer  ", "Basic dXNlcjpwYXNz"])
def test_no_bearer_token_is_401_without_asking(
    auth: DelegatedAuth, reviews: Reviews, header: str | None
) -> None:
    assert auth.check(header).status == 401
    assert reviews.calls == []


def test_an_authorized_token_is_200_and_asks_once_per_ttl(
    auth: DelegatedAuth, reviews: Reviews, clock: Clock
) -> None:
    for _ in range(5):
        assert auth.check("Bearer reader").status == 200
    assert (reviews.count("tokenreviews"), reviews.count("subjectaccessreviews")) == (1, 1)
    clock.now += 10.1
    assert auth.check("Bearer reader").status == 200
    assert (reviews.count("tokenreviews"), reviews.count("subjectaccessreviews")) == (2, 2)


def test_the_access_review_asks_for_get_on_the_metrics_path_as_that_user(
    auth: DelegatedAuth, reviews: Reviews
) -> None:
    auth.check("Bearer reader")
    [(_, sar)] = [c for c in reviews.calls if c[0] == "subjectaccessreviews"]
    assert sar["spec"] == {
        "user": "system:serviceaccount:mon:prometheus",
        "uid": "u1",
        "groups": ["g"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }
    token_review = reviews.calls[0][1]
    assert token_review["spec"] == {"token": "reader"}


def test_an_unauthorized_user_is_403_and_the_denial_is_cached(
    auth: DelegatedAuth, reviews: Reviews
) -> None:
    verdict = auth.check("Bearer nobody")
    assert verdict.status == 403 and "system:serviceaccount:mon:other" in verdict.reason
    assert auth.check("Bearer nobody").status == 403
    assert reviews.count("subjectaccessreviews") == 1


def test_an_unknown_token_is_401_and_cached_by_its_hash(
    auth: DelegatedAuth, reviews: Reviews
) -> None:
    assert auth.check("Bearer made-up").status == 401
    assert auth.check("Bearer made-up").status == 401
    assert reviews.count("tokenreviews") == 1
    assert "made-up" not in repr(auth.tokens._entries), "the token itself is never kept"


def test_a_failed_review_is_not_cached(auth: DelegatedAuth, reviews: Reviews) -> None:
    reviews.fail = "tokenreviews"
    assert auth.check("Bearer reader").status == 401
    reviews.fail = "subjectaccessreviews"
    assert auth.check("Bearer reader").status == 500
    reviews.fail = None
    assert auth.check("Bearer reader").status == 200
    assert reviews.count("tokenreviews") == 2 and reviews.count("subjectaccessreviews") == 2


def test_the_caches_are_bounded_least_recently_used_out_first() -> None:
    now = [0.0]
    cache: TTLCache[str, int] = TTLCache(10.0, 3, lambda: now[0])
    for i, key in enumerate("abcd"):
        cache.put(key, i)
    assert len(cache) == 3 and cache.get("a") is None
    assert cache.get("b") == 1  # b is now the most recent
    cache.put("e", 4)
    assert cache.get("c") is None and cache.get("b") == 1
    now[0] = 10.0
    assert cache.get("b") is None, "expired"


def test_a_flood_of_made_up_tokens_keeps_the_cache_bounded(reviews: Reviews) -> None:
    auth = DelegatedAuth(reviews, max_entries=50)  # type: ignore[arg-type]
    for i in range(500):
        assert auth.check(f"Bearer junk-{i}").status == 401
    assert len(auth.tokens) == 50


def test_the_self_signed_certificate_serves_the_host_and_loopback() -> None:
    cert_pem, _ = self_signed()
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}


@pytest.fixture
def secure_server(auth: DelegatedAuth) -> Iterator[OpsServer]:
    registry = CollectorRegistry()
    Counter("sss_test", "x", registry=registry).inc()
    server = OpsServer(BindAddress("127.0.0.1", 0), registry=registry, auth=auth, tls=ServingCert())
    server.start()
    yield server
    server.stop()


def fetch(port: int, token: str | None) -> tuple[int, str, str | None]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode(), None
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), err.headers.get("WWW-Authenticate")


def test_the_secure_port_answers_200_403_401_over_tls(secure_server: OpsServer) -> None:
    code, body, _ = fetch(secure_server.port, "reader")
    assert code == 200 and "sss_test_total 1.0" in body
    assert fetch(secure_server.port, "nobody")[0] == 403
    code, _, challenge = fetch(secure_server.port, None)
    assert (code, challenge) == (401, "Bearer")


def test_plain_http_to_the_secure_port_gets_400_saying_why_and_no_metrics(
    secure_server: OpsServer,
) -> None:
    """As Go's servers answer (kube-controller-manager's): a misconfigured scraper reads
    what is wrong instead of a closed connection."""
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{secure_server.port}/metrics", timeout=5)
    assert refused.value.code == 400
    assert refused.value.read() == b"Client sent an HTTP request to an HTTPS server.\n"
    assert fetch(secure_server.port, "reader")[0] == 200, "and the server still serves"


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        (
            {"metrics_tls_cert_file": "c.pem", "metrics_secure": True},
            "--metrics-tls-private-key-file",
        ),
        (
            {"metrics_tls_private_key_file": "k.pem", "metrics_secure": True},
            "--metrics-tls-cert-file",
        ),
        (
            {"metrics_tls_cert_file": "c", "metrics_tls_private_key_file": "k"},
            "--metrics-tls-cert-file",
        ),
        (
            {
                "metrics_secure": True,
                "metrics_bind_address": BindAddress("", 8443),
                "health_probe_bind_address": BindAddress("", 8443),
            },
            "--metrics-secure",
        ),
    ],
)
def test_metrics_security_flags_that_cannot_work_are_refused(
    changes: dict[str, Any], flag: str
) -> None:
    with pytest.raises(OptionsError) as caught:
        Options("/k", "/c", "/b", **changes)
    assert caught.value.flag == flag
