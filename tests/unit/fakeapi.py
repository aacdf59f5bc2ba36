"""A tiny in-process fake Kubernetes API server for unit tests of edge cases.

Plain HTTP on 127.0.0.1 (threaded `http.server`). It keeps objects in memory and serves
what our `kube/` building blocks need, plus the misbehaviour a real server is hard to
provoke into on cue:

* LIST with paging (`limit`/`continue`), `labelSelector` (kubectl -l syntax), simple
  `fieldSelector` equality;
* streaming lists (`sendInitialEvents=true`, KEP-3157) only when `watch_list` is set: an
  ADDED per object, then the `k8s.io/initial-events-end` BOOKMARK, then the script;
  otherwise 422, as a server with the WatchList feature off answers;
* WATCH streams (chunked, one JSON event per line) played from per-collection scripts:
  events, BOOKMARKs, ERROR 410, pauses, and *stalls* (headers sent, then silence);
  with no script a watch stays open and silent until its `timeoutSeconds` or shutdown;
* create/get/replace (resourceVersion conflicts)/merge-patch/delete of any resource;
* discovery documents for `/apis/<group>/<version>` registered by the test;
* injected failures (`fail(method, path, status, times)`), and a request log.

Not a conformance fake: the real control plane covers real behaviour.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from kubernetes import client as k8s_client

from kube.client import Client
from kube.labels import parse_label_selector
from kube.types import JSON

# watch script actions ----------------------------------------------------------------


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Stall:
    """Send nothing more until the server stops (or `seconds` pass)."""

    seconds: float = 60.0


@dataclass(frozen=True)
class Gate:
    """Hold the stream (sending nothing) until the test sets `event`."""

    event: threading.Event
    timeout: float = 10.0


@dataclass(frozen=True)
class Raw:
    """Send these bytes as one HTTP chunk, as they are (events cut anywhere)."""

    data: bytes


Action = JSON | Sleep | Stall | Gate | Raw


def event(type_: str, obj: JSON) -> JSON:
    return {"type": type_, "object": obj}


def bookmark(resource_version: str | int) -> JSON:
    return {
        "type": "BOOKMARK",
        "object": {"kind": "Bookmark", "metadata": {"resourceVersion": str(resource_version)}},
    }


def gone(message: str = "too old resource version") -> JSON:
    return {"type": "ERROR", "object": status_body(410, "Expired", message)}


def status_body(code: int, reason: str, message: str) -> JSON:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


# requests ------------------------------------------------------------------------------


# A request as the fake saw it.
@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    at: float
    user_agent: str = ""
    authorization: str = ""

    @property
    def watch(self) -> bool:
        return self.query.get("watch") == "true"


@dataclass
class _Failure:
    method: str
    path: str
    status: int
    times: int
    watch: bool | None
    retry_after: str | None
    when: Callable[[Request], bool] | None = None


@dataclass
class _Route:
    collection: str  # e.g. /api/v1/namespaces/ns/pods
    name: str | None
    subresource: str | None
    namespace: str | None


def _route(path: str) -> _Route | None:
    parts = [unquote(p) for p in path.split("/") if p]  # names may be quoted (`:`)
    if parts[:1] == ["api"]:
        prefix, rest = parts[:2], parts[2:]
    elif parts[:1] == ["apis"]:
        prefix, rest = parts[:3], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace = rest[1]
        coll, tail = rest[:3], rest[3:]
    else:
        coll, tail = rest[:1], rest[1:]
    return _Route(
        collection="/" + "/".join(prefix + coll),
        name=tail[0] if tail else None,
        subresource=tail[1] if len(tail) > 1 else None,
        namespace=namespace,
    )


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _dotted(obj: JSON, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def _selected(obj: JSON, label_selector: str | None, field_selector: str | None) -> bool:
    if label_selector:
        labels = obj.get("metadata", {}).get("labels") or {}
        parsed = parse_label_selector(label_selector)
        for k, v in (parsed.get("matchLabels") or {}).items():
            if labels.get(k) != v:
                return False
        for expr in parsed.get("matchExpressions") or []:
            key, operator, values = expr["key"], expr["operator"], expr.get("values") or []
            present = key in labels
            holds = {
                "In": present and labels.get(key) in values,
                "NotIn": not present or labels.get(key) not in values,
                "Exists": present,
                "DoesNotExist": not present,
            }[operator]
            if not holds:
                return False
    if field_selector:
        for term in field_selector.split(","):
            k, _, v = term.partition("=")
            if str(_dotted(obj, k.strip())) != v.strip():
                return False
    return True


class FakeApi:
    """Start with `FakeApi().start()`, stop with `.stop()`; `.client()` talks to it."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.objects: dict[str, dict[str, JSON]] = {}
        self.discovery: dict[str, JSON] = {}
        self.requests: list[Request] = []
        self._rv = 100
        self._scripts: dict[str, deque[list[Action]]] = {}
        self._failures: list[_Failure] = []
        self._holes: list[tuple[Callable[[Request], bool], threading.Event]] = []
        self._stopping = threading.Event()
        self.watch_list = False  # serve sendInitialEvents (a WatchList-enabled server)
        self.initial_events_end = True  # False: a streaming list's end BOOKMARK never comes
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeApi:
        api = self

        class Handler(_Handler):
            fake = api

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def client(self, qps: float = 0.0, burst: int = 100) -> Client:
        configuration = k8s_client.Configuration()
        configuration.host = self.url
        return Client(configuration, qps=qps, burst=burst)

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # store -----------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self.lock:
            return str(self._rv)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def put(self, collection: str, obj: JSON) -> JSON:
        """Create or overwrite an object directly (no events), bumping its RV."""
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            route = _route(collection)
            if route is not None and route.namespace is not None:
                meta.setdefault("namespace", route.namespace)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = self._next_rv()
            self.objects.setdefault(collection, {})[meta["name"]] = obj
            return copy.deepcopy(obj)

    def remove(self, collection: str, name: str) -> JSON | None:
        with self.lock:
            obj = self.objects.get(collection, {}).pop(name, None)
            self._next_rv()
            return obj

    def get(self, collection: str, name: str) -> JSON | None:
        with self.lock:
            obj = self.objects.get(collection, {}).get(name)
            return copy.deepcopy(obj) if obj is not None else None

    def items(self, collection: str) -> list[JSON]:
        with self.lock:
            return [copy.deepcopy(o) for o in self.objects.get(collection, {}).values()]

    # scripting -------------------------------------------------------------------------

    def script_watch(self, collection: str, *actions: Action) -> None:
        """The next WATCH on `collection` plays `actions`, then ends the stream."""
        with self.lock:
            self._scripts.setdefault(collection, deque()).append(list(actions))

    def fail(
        self,
        method: str,
        path: str,
        status: int,
        *,
        times: int = 1,
        watch: bool | None = None,
        retry_after: str | None = None,
        when: Callable[[Request], bool] | None = None,
    ) -> None:
        """Answer the next `times` matching requests (and, with `when`, only those it
        accepts) with `status` (a Status body)."""
        with self.lock:
            self._failures.append(_Failure(method, path, status, times, watch, retry_after, when))

    def black_hole(self, when: Callable[[Request], bool]) -> threading.Event:
        """From now on, requests `when` accepts get no answer at all (the connection stays
        open and silent, as behind a partition) until the returned event is set or the
        server stops; then the connection is closed without a response."""
        release = threading.Event()
        with self.lock:
            self._holes.append((when, release))
        return release

    def count(
        self, method: str | None = None, path: str | None = None, *, watch: bool | None = None
    ) -> int:
        with self.lock:
            return sum(1 for r in self.matching(method, path, watch=watch))

    def matching(
        self, method: str | None = None, path: str | None = None, *, watch: bool | None = None
    ) -> Iterator[Request]:
        with self.lock:
            reqs = list(self.requests)
        for r in reqs:
            if method is not None and r.method != method:
                continue
            if path is not None and r.path != path:
                continue
            if watch is not None and r.watch != watch:
                continue
            yield r

    def wait_for(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        watch: bool | None = None,
        count: int = 1,
        timeout: float = 5.0,
    ) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(method, path, watch=watch) >= count:
                return True
            time.sleep(0.005)
        return False

    # internals used by the handler -----------------------------------------------------

    def _take_failure(self, req: Request) -> _Failure | None:
        with self.lock:
            for f in self._failures:
                if f.times <= 0 or f.method != req.method or f.path != req.path:
                    continue
                if f.watch is not None and f.watch != req.watch:
                    continue
                if f.when is not None and not f.when(req):
                    continue
                f.times -= 1
                return f
            return None

    def _take_script(self, collection: str) -> list[Action] | None:
        with self.lock:
            scripts = self._scripts.get(collection)
            return scripts.popleft() if scripts else None

    def _list(self, route: _Route, query: dict[str, str]) -> JSON:
        with self.lock:
            if route.namespace is None:
                # A cluster-wide list also sees namespaced collections of the resource.
                prefix, _, resource = route.collection.rpartition("/")
                pool: list[JSON] = []
                for coll, objs in self.objects.items():
                    if coll == route.collection or (
                        coll.startswith(prefix + "/namespaces/") and coll.endswith("/" + resource)
                    ):
                        pool.extend(objs.values())
            else:
                pool = list(self.objects.get(route.collection, {}).values())
            selected = [
                copy.deepcopy(o)
                for o in pool
                if _selected(o, query.get("labelSelector"), query.get("fieldSelector"))
            ]
            rv = str(self._rv)
        selected.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        offset = 0
        token = query.get("continue")
        if token:
            offset_s, _, rv = token.partition(":")
            offset = int(offset_s)
        limit = int(query.get("limit", "0") or 0)
        page = selected[offset : offset + limit] if limit else selected[offset:]
        meta: JSON = {"resourceVersion": rv}
        if limit and offset + limit < len(selected):
            meta["continue"] = f"{offset + limit}:{rv}"
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": page}

    def _create(self, route: _Route, body: JSON) -> tuple[int, JSON]:
        with self.lock:
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                return 422, status_body(422, "Invalid", "name is required")
            if name in self.objects.get(route.collection, {}):
                return 409, status_body(409, "AlreadyExists", f"{name} already exists")
            meta.pop("resourceVersion", None)
            return 201, self.put(route.collection, body)

    def _stored(self, route: _Route) -> JSON | None:
        """The object `route` names, if any (the caller holds the lock)."""
        assert route.name is not None
        return self.objects.get(route.collection, {}).get(route.name)

    def _replace(self, route: _Route, body: JSON) -> tuple[int, JSON]:
        with self.lock:
            current = self._stored(route)
            if current is None:
                return _not_found(route)
            sent_rv = body.get("metadata", {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                return 409, status_body(
                    409, "Conflict", "the object has been modified; please apply your changes"
                )
            body.setdefault("metadata", {})
            for keep in ("uid", "creationTimestamp", "namespace"):
                if keep in current["metadata"]:
                    body["metadata"][keep] = current["metadata"][keep]
            return 200, self.put(route.collection, body)

    def _patch(self, route: _Route, body: Any) -> tuple[int, JSON]:
        with self.lock:
            current = self._stored(route)
            if current is None:
                return _not_found(route)
            return 200, self.put(route.collection, merge_patch(current, body))

    def _delete(self, route: _Route) -> tuple[int, JSON]:
        assert route.name is not None
        with self.lock:
            obj = self.remove(route.collection, route.name)
        if obj is None:
            return _not_found(route)
        return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}


def _not_found(route: _Route) -> tuple[int, JSON]:
    return 404, status_body(404, "NotFound", f"{route.name} not found")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send_json(self, status: int, body: JSON, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()  # compact, as kube-apiserver writes
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        fake = self.fake
        req = Request(
            self.command,
            parts.path,
            query,
            body,
            time.monotonic(),
            self.headers.get("User-Agent") or "",
            self.headers.get("Authorization") or "",
        )
        with fake.lock:
            fake.requests.append(req)
            hole = next((r for (when, r) in fake._holes if not r.is_set() and when(req)), None)
        if hole is not None:
            while not hole.wait(0.05) and not fake._stopping.is_set():
                pass
            self.close_connection = True
            return

        failure = fake._take_failure(req)
        if failure is not None:
            headers = {"Retry-After": failure.retry_after} if failure.retry_after else None
            self._send_json(
                failure.status,
                status_body(failure.status, "Injected", f"injected {failure.status}"),
                headers,
            )
            return

        if self.command == "GET" and parts.path in fake.discovery:
            self._send_json(200, fake.discovery[parts.path])
            return
        route = _route(parts.path)
        if route is None:
            self._send_json(404, status_body(404, "NotFound", "no such path"))
            return
        if self.command == "GET" and route.name is None:
            if req.watch and query.get("sendInitialEvents") == "true" and not fake.watch_list:
                message = (
                    "sendInitialEvents is forbidden for watch unless the WatchList feature "
                    "gate is enabled"
                )
                self._send_json(422, status_body(422, "Invalid", message))
            elif req.watch:
                self._watch(route, query)
            else:
                self._send_json(200, fake._list(route, query))
            return
        if self.command == "GET":
            obj = fake.get(route.collection, route.name or "")
            if obj is None:
                self._send_json(404, status_body(404, "NotFound", f"{route.name} not found"))
            else:
                self._send_json(200, obj)
            return
        if self.command == "POST" and route.name is None:
            self._send_json(*fake._create(route, body or {}))
        elif self.command == "PUT" and route.name is not None:
            self._send_json(*fake._replace(route, body or {}))
        elif self.command == "PATCH" and route.name is not None:
            self._send_json(*fake._patch(route, body))
        elif self.command == "DELETE" and route.name is not None:
            self._send_json(*fake._delete(route))
        else:
            self._send_json(405, status_body(405, "MethodNotAllowed", self.command))

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, route: _Route, query: dict[str, str]) -> None:
        fake = self.fake
        script = fake._take_script(route.collection)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        try:
            if query.get("sendInitialEvents") == "true":
                listed = fake._list(route, {k: v for k, v in query.items() if k != "limit"})
                for obj in listed["items"]:
                    self._chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
                end = bookmark(int(listed["metadata"]["resourceVersion"]))
                end["object"]["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                if fake.initial_events_end:
                    self._chunk(json.dumps(end).encode() + b"\n")
            if script is None:
                timeout = float(query.get("timeoutSeconds", "60"))
                fake._stopping.wait(timeout)
            else:
                for action in script:
                    if isinstance(action, Sleep):
                        if fake._stopping.wait(action.seconds):
                            break
                    elif isinstance(action, Gate):
                        action.event.wait(action.timeout)
                    elif isinstance(action, Stall):
                        fake._stopping.wait(action.seconds)
                        break
                    elif isinstance(action, Raw):
                        if action.data:
                            self._chunk(action.data)
                    else:
                        self._chunk(json.dumps(action).encode() + b"\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass  # the client went away
        self.close_connection = True


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakeHandlers:
    """Collects informer handler calls for assertions (thread-safe)."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_add(self, obj: Any) -> None:
        with self.lock:
            self.calls.append(("add", obj))

    def on_update(self, old: Any, new: Any) -> None:
        with self.lock:
            self.calls.append(("update", (old, new)))

    def on_delete(self, obj: Any) -> None:
        with self.lock:
            self.calls.append(("delete", obj))

    def of(self, kind: str) -> list[Any]:
        with self.lock:
            return [obj for k, obj in self.calls if k == kind]

    def wait(self, kind: str, count: int = 1, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.of(kind)) >= count:
                return True
            time.sleep(0.005)
        return False
