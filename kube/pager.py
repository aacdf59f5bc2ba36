"""The pages of one paginated LIST, with the next page asked for while this one is decoded.

client-go's `ListPager` asks for a page, decodes it, and only then asks for the next:
the client and kube-apiserver take turns, each idle while the other works. At 150,000
Pods that is 300 pages, each costing the server tens of milliseconds to encode and us as
much to decode. What this module decides:

* **Read-ahead.** As soon as a page's bytes are in, its `continue` token is read from
  the head of the body (kube-apiserver writes a typed list as `kind`, `apiVersion`,
  `metadata`, `items`, in that order) and the next page is requested on a helper
  thread while this one is decoded and applied. The token in the fully decoded page is
  what counts: if the head could not be read (another field order, e.g. a custom
  resource's list) or disagrees, the read-ahead is dropped and the next page asked for
  with the decoded token — never a page out of order. At most one page is read ahead.
* **Expired continue tokens.** A 410 on a continue request (etcd compacted the
  snapshot) is answered as client-go's pager does (`FullListIfExpired`): one unpaged
  LIST. The caller is told with `RESTART` first, so it can drop the pages it has.
* **Stopping.** After `stop` is set no further page is requested; a read-ahead in
  flight is abandoned (bounded by the client's request timeout).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from kube.client import ApiError, Client
from kube.types import JSON

log = logging.getLogger(__name__)

RESTART: JSON = {}  # yielded (this very object) before the pages of a full relist

# `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"…"},`
_HEAD = re.compile(rb'\{"kind":"[^"\\]*","apiVersion":"[^"\\]*","metadata":(\{[^{}]*\})')
_HEAD_LIMIT = 4096


def peek_continue(body: bytes) -> str | None:
    """The `continue` token from the head of a LIST body, or None if there is none or
    the head is not in the expected form."""
    match = _HEAD.match(body, 0, min(len(body), _HEAD_LIMIT))
    if match is None:
        return None
    try:
        meta = orjson.loads(match.group(1))
    except orjson.JSONDecodeError:
        return None
    token = meta.get("continue") if isinstance(meta, dict) else None
    return token if isinstance(token, str) and token else None


def pages(
    client: Client,
    path: str,
    params: Mapping[str, Any],
    stop: threading.Event,
    *,
    name: str = "list",
) -> Iterator[JSON]:
    """Yield the decoded pages of a LIST of `path` (`params` carries `limit` and any
    selectors), or `RESTART` and then one unpaged LIST (see the module docstring)."""
    base = {k: v for k, v in params.items() if k != "continue"}
    ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"pager-{name}")
    try:
        token: str | None = None
        pending: Future[bytes] = ahead.submit(client.get_bytes, path, base)
        while True:
            try:
                body = pending.result()
            except ApiError as err:
                if err.status != 410 or token is None:
                    raise
                log.info("%s: continue token expired; listing in full", name)
                yield RESTART
                full = {k: v for k, v in base.items() if k != "limit"}
                yield orjson.loads(client.get_bytes(path, full))
                return
            guess = peek_continue(body)
            following: Future[bytes] | None = None
            if guess and not stop.is_set():
                following = ahead.submit(client.get_bytes, path, {**base, "continue": guess})
            page: JSON = orjson.loads(body) if body else {}
            del body
            token = (page.get("metadata") or {}).get("continue") or None
            if token != guess:
                following = None  # a guess that was wrong: its page is never used
            yield page
            del page
            if not token or stop.is_set():
                return
            if following is None:
                following = ahead.submit(client.get_bytes, path, {**base, "continue": token})
            pending = following
    finally:
        ahead.shutdown(wait=False, cancel_futures=True)
