"""Credentials are computed once and cached; a token file is re-read every minute and
after a 401, against the in-process fake API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client

from kube import incluster
from kube.client import Client
from kube.credentials import Credentials
from tests.unit.fakeapi import FakeApi
from tests.unit.kube.helpers import token_kubeconfig

NAMESPACE = "/api/v1/namespaces/default"


def sent_tokens(fake: FakeApi) -> list[str]:
    return [r.authorization for r in fake.matching("GET", NAMESPACE)]


def test_kubeconfig_token_file_is_re_read_after_a_minute(fake: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    client = Client.from_kubeconfig(str(token_kubeconfig(fake, tmp_path, "token")), qps=0)
    now = [0.0]
    client.credentials._clock = lambda: now[0]  # the loader's credentials, on our clock
    assert "token file" in client.credentials.what and str(token) in client.credentials.what

    client.get(NAMESPACE)
    token.write_text("second")  # kubelet rotated the projected token
    now[0] += 59
    client.get(NAMESPACE)
    now[0] += 2
    client.get(NAMESPACE)

    assert sent_tokens(fake) == ["Bearer first", "Bearer first", "Bearer second"]


def test_a_401_re_reads_the_token_file_and_retries_once(fake: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")
    client = Client.from_kubeconfig(str(token_kubeconfig(fake, tmp_path, str(token))), qps=0)
    client.get(NAMESPACE)
    token.write_text("new")
    fake.fail("GET", NAMESPACE, 401, times=100, when=lambda r: r.authorization == "Bearer old")

    assert client.get(NAMESPACE)["metadata"]["name"] == "default"

    assert sent_tokens(fake) == ["Bearer old", "Bearer old", "Bearer new"]
    assert client.request_count().total == 2, "the retry is the same request"


def test_a_401_with_unchanged_credentials_is_not_retried(fake: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("revoked")
    client = Client.from_kubeconfig(str(token_kubeconfig(fake, tmp_path, str(token))), qps=0)
    fake.fail("GET", NAMESPACE, 401, times=100)

    with pytest.raises(Exception, match="401"):
        client.get(NAMESPACE)
    assert len(sent_tokens(fake)) == 1


def test_an_unreadable_token_file_keeps_the_last_good_token(fake: FakeApi, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("good")
    now = [0.0]
    client = Client.from_kubeconfig(str(token_kubeconfig(fake, tmp_path, str(token))), qps=0)
    client.credentials._clock = lambda: now[0]
    client.get(NAMESPACE)
    token.unlink()  # mid-rotation
    now[0] += 61
    client.get(NAMESPACE)
    assert sent_tokens(fake) == ["Bearer good", "Bearer good"]


def test_the_configuration_refresh_hook_runs_once_per_period_not_per_request(
    fake: FakeApi,
) -> None:
    """The official client's hook re-applies the whole kubeconfig per request (~165 µs:
    setting the host calls getproxies()); the header is cached instead."""
    calls: list[int] = []
    configuration = k8s_client.Configuration()
    configuration.host = fake.url
    configuration.api_key = {"BearerToken": "static"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}

    def hook(_config: Any) -> None:
        calls.append(1)

    configuration.refresh_api_key_hook = hook
    client = Client(configuration, qps=0)
    for _ in range(10):
        client.get(NAMESPACE)

    assert len(calls) == 1
    assert set(sent_tokens(fake)) == {"Bearer static"}


def test_static_credentials_never_expire() -> None:
    creds = Credentials.static({"Authorization": "Bearer x"})
    assert creds.headers() == {"Authorization": "Bearer x"}
    assert not creds.after_unauthorized({"Authorization": "Bearer x"})


def test_in_cluster_service_account_token_is_ours_to_re_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("projected-1")
    ca.write_text("not parsed here")
    monkeypatch.setattr(incluster, "TOKEN_FILE", str(token))
    monkeypatch.setattr(incluster, "CA_FILE", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")

    client = Client.from_kubeconfig(None, qps=0)
    now = [0.0]
    client.credentials._clock = lambda: now[0]

    assert isinstance(client.configuration, incluster.ServerConfig), "no per-request hook"
    assert client.credentials.headers() == {"Authorization": "Bearer projected-1"}
    token.write_text("projected-2")  # kubelet rotated it
    now[0] += 61
    assert client.credentials.headers() == {"Authorization": "Bearer projected-2"}
