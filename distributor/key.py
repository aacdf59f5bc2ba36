"""This installation's secret key, the one `decide.ownership_mark` is keyed by.

Ownership must rest on something a tenant cannot read: every name, label, UID and
annotation of the cluster is readable by whoever holds cluster-wide `view` (the
namespace's UID, once the key, among them), Secrets are not. So the key is 32 random
bytes in the Secret `KEY_SECRET` (data key `KEY_FIELD`) in the injector's namespace.

* **Who makes it.** config/injector-distribution (and the chart) ship the Secret empty;
  the first leader fills it once, by a PUT conditional on the resourceVersion it read (two
  leaders racing: one wins, the other reads the winner's key). The ServiceAccount may get
  and update that Secret by name and create no Secret (creating Secrets in a namespace
  lets one mint a token for any ServiceAccount there). An administrator may put a key in
  it beforehand (`KEY_FIELD`, at least 32 bytes): that key is used as it is.
* **What survives.** The mark no longer depends on the namespace: a namespace deleted and
  made again with the Secret restored (a backup, a sealed or external secret) keeps every
  copy ours. A lost key cannot be recovered from anything in the cluster — that is the
  point — and its copies are then never updated or deleted (docs/trust-consumers.md says
  how to clean up).
* **Reads.** One GET, kept for `ttl` seconds (a key restored by an administrator is used
  within that; while there is none, retried every `retry` seconds), never on a metrics
  scrape.
"""

from __future__ import annotations

import base64
import logging
import secrets
import threading
import time
from typing import Any

from kube.client import ApiError, Client, is_conflict, is_not_found
from trust.consumers import FIELD_MANAGER

log = logging.getLogger(__name__)

KEY_SECRET = "service-serving-signer-distribution-key"
KEY_FIELD = "key"
KEY_BYTES = 32


class SecretKey:
    """`get()`: the key as text ("" while there is none: nothing is distributed)."""

    def __init__(
        self,
        client: Client,
        namespace: str,
        name: str = KEY_SECRET,
        *,
        ttl: float = 300.0,
        retry: float = 10.0,
    ) -> None:
        self.client = client
        self.path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        self.ttl = ttl
        self.retry = min(retry, ttl)
        self._lock = threading.Lock()
        self._key = ""
        self._error: ApiError | None = None
        self._read_at = float("-inf")

    def get(self) -> str:
        """The key, read at most once per `ttl` (once per `retry` while there is none, so
        ten thousand namespaces' syncs cost one GET, not one each). A refusal other than
        NotFound (RBAC missing after an upgrade) is raised to every sync until the next
        read: the syncs fail loudly, without a GET each."""
        with self._lock:
            if time.monotonic() - self._read_at < (self.ttl if self._key else self.retry):
                if self._error is not None:
                    raise self._error
                return self._key
            self._read_at = time.monotonic()
            self._key, self._error = "", None
            try:
                self._key = self._read_or_fill()
            except ApiError as err:
                if not is_not_found(err):
                    self._error = err
                    raise
                log.warning(
                    "the distribution key Secret does not exist; nothing distributed "
                    "(config/injector-distribution ships it)",
                    extra={"object": self.path},
                )
            return self._key

    def _read_or_fill(self) -> str:
        for _ in range(3):
            secret: dict[str, Any] = self.client.get(self.path)
            stored = _decoded(secret)
            if stored is not None:
                return stored
            secret["data"] = {
                **(secret.get("data") or {}),
                KEY_FIELD: base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode(),
            }
            try:
                # The resourceVersion read is in the body: a conflict means another
                # leader filled it first; read theirs.
                self.client.replace(self.path, secret, params={"fieldManager": FIELD_MANAGER})
            except ApiError as err:
                if not is_conflict(err):
                    raise
                continue
            log.info("filled the distribution key Secret", extra={"object": self.path})
            return str(secret["data"][KEY_FIELD])
        return ""


def _decoded(secret: dict[str, Any]) -> str | None:
    """The stored key as text ("" when it is too short to use), None when the Secret
    holds no key yet (the one case in which it is filled)."""
    value = (secret.get("data") or {}).get(KEY_FIELD)
    if not isinstance(value, str) or not value:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raw = b""
    if len(raw) < KEY_BYTES:
        log.error(
            f"the distribution key must be at least {KEY_BYTES} bytes; nothing distributed",
            extra={"object": (secret.get("metadata") or {}).get("name", "")},
        )
        return ""
    return value
