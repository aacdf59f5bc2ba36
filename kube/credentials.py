"""Request credentials: computed once, cached, refreshed on a timer and after a 401.

What it decides:

* **Cost.** The headers a request carries are cached. The official client recomputes them
  on every request through its `refresh_api_key_hook`, which for kubeconfig and
  in-cluster identities re-applies the whole configuration (setting the host calls
  `urllib.request.getproxies()`): a measurable share of a write's client CPU
  (bench/README.md, "Figures behind module decisions"), for a value that changes once an
  hour.
* **Freshness.** A bearer token read from a file — a kubeconfig `tokenFile`, or the
  in-cluster ServiceAccount token (`/var/run/secrets/kubernetes.io/serviceaccount/
  token`, a projected token kubelet rotates, expiring after about an hour) — is re-read
  when the cached value is older than `period` (60 s), as client-go's
  `cachingTokenSource` does, so a rotated token is picked up within a minute; the
  official client reads a kubeconfig `tokenFile` only once. Other identities (a static
  token, client certificates, exec plugins, auth providers) are re-derived from the
  client configuration on the same timer, which runs any refresh hook it has.
* **401.** An Unauthorized answer invalidates the cache at once; if the re-read gives
  different headers, the caller retries the request once with them (a 401 means the
  request was not acted on). A token file that cannot be read keeps the last good
  headers (kubelet may be mid-rotation) and is logged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

REFRESH_PERIOD = 60.0  # client-go transport.NewCachedFileTokenSource period

Headers = Mapping[str, str]


class Credentials:
    """Cached auth headers from `source` (see the module docstring). Thread-safe."""

    def __init__(
        self,
        source: Callable[[], Headers],
        *,
        period: float = REFRESH_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        what: str = "credentials",
    ) -> None:
        self._source = source
        self.period = period
        self._clock = clock
        self.what = what
        self._lock = threading.Lock()
        self._headers: Headers = {}
        self._loaded = False
        self._expires = float("-inf")

    @classmethod
    def token_file(cls, path: str, **kwargs: Any) -> Credentials:
        def read() -> Headers:
            with open(path) as f:
                token = f.read().strip()
            if not token:
                raise ValueError(f"token file {path} is empty")
            return {"Authorization": f"Bearer {token}"}

        kwargs.setdefault("what", f"token file {path}")
        return cls(read, **kwargs)

    @classmethod
    def static(cls, headers: Headers) -> Credentials:
        fixed = dict(headers)
        return cls(lambda: fixed, period=float("inf"), what="static credentials")

    @classmethod
    def from_configuration(cls, configuration: Any, **kwargs: Any) -> Credentials:
        """Whatever the official client's configuration would send (running its refresh
        hook, so exec plugins and auth providers renew), derived once per period."""

        def derive() -> Headers:
            settings: Mapping[str, Any] = configuration.auth_settings()
            return {a["key"]: a["value"] for a in settings.values() if a["in"] == "header"}

        return cls(derive, **kwargs)

    def headers(self) -> Headers:
        if self._clock() >= self._expires:
            self._reload(force=False)
        return self._headers

    def after_unauthorized(self, sent: Headers) -> bool:
        """A 401 answered a request sent with `sent`: re-read now. True if the headers
        changed, so one retry with them is worth it."""
        self._reload(force=True)
        return dict(self._headers) != dict(sent)

    def _reload(self, *, force: bool) -> None:
        with self._lock:
            now = self._clock()
            if not force and now < self._expires:
                return  # another thread just did it
            try:
                fresh = self._source()
            except Exception as err:
                if not self._loaded:
                    raise
                log.warning("could not refresh %s (keeping the last good one): %s", self.what, err)
                fresh = self._headers
            self._headers = dict(fresh)
            self._loaded = True
            self._expires = now + self.period


def kubeconfig_token_file(loader: Any) -> str | None:
    """The current user's `tokenFile` of a loaded kubeconfig (`KubeConfigLoader`), as an
    absolute path, or None. A `token` beside it wins, as in client-go."""
    user = getattr(loader, "_user", None)
    if user is None or "token" in user or "tokenFile" not in user:
        return None
    path = str(user["tokenFile"])
    if os.path.isabs(path):
        return path
    base: str = loader._get_base_path(getattr(user, "path", None))
    return os.path.join(base, path)
