"""The connection settings of a client: where the API server is, how its certificate is
verified, how we prove who we are at the TLS layer, and which proxy (if any) is between.

`ServerConfig` spells them with the official client's `Configuration` attribute names, so
`kube.client.Client` takes either: ours in a Pod, the official one from a kubeconfig.

In a Pod (the production path) the settings are read as client-go's `rest.InClusterConfig`
reads them — `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT`, the ServiceAccount's CA
file — and the token file is `kube.credentials`' to re-read as it rotates; so `run` in a
Pod never imports the official `kubernetes` package (~19 MiB of RSS). A proxy from the
environment (`HTTPS_PROXY`, `NO_PROXY`) applies as it does for client-go's transport.
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_FILE = f"{SERVICE_ACCOUNT_DIR}/token"
CA_FILE = f"{SERVICE_ACCOUNT_DIR}/ca.crt"
HOST_ENV, PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"


@dataclass
class ServerConfig:
    """What the transport needs to reach one API server (the official `Configuration`'s
    names for the same settings; authentication headers are `kube.credentials`')."""

    host: str
    ssl_ca_cert: str | None = None
    verify_ssl: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    ca_cert_data: str | bytes | None = None
    assert_hostname: str | bool | None = None
    tls_server_name: str | None = None
    proxy: str | None = None
    no_proxy: str | None = None
    proxy_headers: Mapping[str, str] | None = None
    proxy_ssl_context: ssl.SSLContext | None = None
    retries: Any = None
    socket_options: list[tuple[int, int, int]] | None = None
    connection_pool_maxsize: int | None = None

    def auth_settings(self) -> dict[str, Any]:
        """None here (the official `Configuration.auth_settings` shape): the client's
        credentials carry the identity."""
        return {}


def environment_proxy(host: str, proxies: Mapping[str, str] | None = None) -> str | None:
    """The proxy the environment names for `host` (`https_proxy`, else `all_proxy`), unless
    `no_proxy` exempts it: what Go's `http.ProxyFromEnvironment` gives client-go."""
    found = urllib.request.getproxies_environment() if proxies is None else dict(proxies)
    scheme, _, rest = host.partition("://")
    proxy = found.get(scheme) or found.get("all")
    if not proxy or bypassed(rest.split("/")[0], found):
        return None
    return proxy


def bypassed(hostname: str, proxies: Mapping[str, str]) -> bool:
    """`no_proxy` (`proxies["no"]`) exempts `hostname` (host or host:port), as urllib reads it."""
    bypass: Any = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return bool(bypass(hostname, proxies))


def in_cluster(
    environ: Mapping[str, str] | None = None,
    *,
    token_file: str | None = None,
    ca_file: str | None = None,
) -> ServerConfig | None:
    """The API server of the Pod we run in, or None when we do not run in one (the
    variables unset or empty, the token or CA file missing or the CA file empty): then a
    kubeconfig is used, as client-go's callers fall back."""
    env = os.environ if environ is None else environ
    token_file = token_file or TOKEN_FILE
    ca_file = ca_file or CA_FILE
    host, port = env.get(HOST_ENV, ""), env.get(PORT_ENV, "")
    if not host or not port or not os.path.isfile(token_file):
        return None
    try:
        with open(ca_file, "rb") as f:
            if not f.read(1):
                return None
    except OSError:
        return None
    server = f"https://[{host}]:{port}" if ":" in host or "%" in host else f"https://{host}:{port}"
    return ServerConfig(host=server, ssl_ca_cert=ca_file, proxy=environment_proxy(server))
