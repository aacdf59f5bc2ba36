"""The informer lists in pages, watches with bookmarks, relists on 410, survives stalls and
errors with backoff, and keeps a transformed, indexed cache."""

from __future__ import annotations

import gc
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from kubernetes import client as k8s_client

from kube.client import Client
from kube.credentials import Credentials
from kube.informer import Backoff, Informer
from kube.types import JSON
from tests.unit.fakeapi import FakeApi, FakeHandlers, Gate, Stall, bookmark, event, gone
from tests.unit.kube.helpers import PODS, ScriptedServer, pod, running

T = TypeVar("T")


def three_pods_then_gone(fake: FakeApi) -> threading.Event:
    """Pods a, b and c; the first watch waits for the returned Event, then ends 410 Gone
    (the informer relists)."""
    for n in ("a", "b", "c"):
        fake.put(PODS, pod(n))
    changed = threading.Event()
    fake.script_watch(PODS, Gate(changed), gone())
    return changed


def informer(fake: FakeApi, **kwargs: Any) -> Informer[Any]:
    """Most tests here are about paged LIST + WATCH (a server without streaming lists);
    streaming lists have their own tests at the end."""
    kwargs.setdefault("watch_list", False)
    kwargs.setdefault("backoff_initial", 0.01)
    kwargs.setdefault("backoff_max", 0.05)
    return Informer(fake.client(), PODS, name="pods", **kwargs)


def names(objs: list[Any]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objs)


def test_initial_list_is_paged_and_fills_the_cache_before_synced(fake: FakeApi) -> None:
    for i in range(7):
        fake.put(PODS, pod(f"p{i}"))
    rec = FakeHandlers()
    inf = informer(fake, page_size=3)
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    assert not inf.has_synced()
    with running(inf):
        assert inf.has_synced()
        assert names(rec.of("add")) == [f"p{i}" for i in range(7)]
        lists = list(fake.matching("GET", PODS, watch=False))
        assert [r.query.get("limit") for r in lists] == ["3", "3", "3"]
        assert lists[0].query.get("continue") is None
        assert all(r.query.get("continue") for r in lists[1:])
        assert inf.get("ns/p4") is not None
        assert len(inf.list()) == 7


def test_watch_resumes_from_list_rv_and_bookmarks_advance_it(fake: FakeApi) -> None:
    fake.put(PODS, pod("a"))
    list_rv = fake.resource_version
    fake.script_watch(PODS, bookmark(900))
    inf = informer(fake, min_watch_timeout=5, max_watch_timeout=7)
    with running(inf):
        assert fake.wait_for("GET", PODS, watch=True, count=2)
        first, second = list(fake.matching("GET", PODS, watch=True))[:2]
    assert first.query["resourceVersion"] == list_rv
    assert first.query["allowWatchBookmarks"] == "true"
    assert 5 <= int(first.query["timeoutSeconds"]) <= 7
    assert second.query["resourceVersion"] == "900"
    assert fake.count("GET", PODS, watch=False) == 1, "a bookmark never causes a relist"


def test_watch_events_fire_add_update_delete_and_update_the_cache(fake: FakeApi) -> None:
    fake.put(PODS, pod("a"))
    b = {**pod("b"), "metadata": {**pod("b")["metadata"], "resourceVersion": "201"}}
    b2 = {**pod("b", node="n2"), "metadata": {**pod("b")["metadata"], "resourceVersion": "202"}}
    a_gone = {**pod("a"), "metadata": {**pod("a")["metadata"], "resourceVersion": "203"}}
    fake.script_watch(
        PODS, event("ADDED", b), event("MODIFIED", b2), event("DELETED", a_gone), Stall()
    )
    rec = FakeHandlers()
    inf = informer(fake)
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    with running(inf):
        assert rec.wait("delete")
        assert names(rec.of("add")) == ["a", "b"]
        [(old, new)] = rec.of("update")
        assert (old["spec"]["nodeName"], new["spec"]["nodeName"]) == ("n1", "n2")
        assert names(rec.of("delete")) == ["a"]
        assert inf.get("ns/a") is None
        cached = inf.get("ns/b")
        assert cached is not None and cached["spec"]["nodeName"] == "n2"
        assert inf.resource_version == "203"


def test_gone_error_event_relists_and_fires_deletes_and_updates_for_changes(
    fake: FakeApi,
) -> None:
    changed = three_pods_then_gone(fake)
    rec = FakeHandlers()
    inf = informer(fake)
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    with running(inf):
        fake.remove(PODS, "b")
        fake.put(PODS, pod("c", node="n9"))
        fake.put(PODS, pod("d"))
        changed.set()
        assert rec.wait("delete")
        assert fake.wait_for("GET", PODS, watch=False, count=2)
        assert names(rec.of("add")) == ["a", "b", "c", "d"]
        assert names(rec.of("delete")) == ["b"]
        updates = rec.of("update")
        assert [(o["spec"]["nodeName"], n["spec"]["nodeName"]) for o, n in updates] == [
            ("n1", "n9")
        ], "only the changed object fires an update"
        assert sorted(inf.keys()) == ["ns/a", "ns/c", "ns/d"]


def test_http_410_on_watch_relists(fake: FakeApi) -> None:
    fake.put(PODS, pod("a"))
    fake.fail("GET", PODS, 410, watch=True)
    inf = informer(fake)
    with running(inf):
        assert fake.wait_for("GET", PODS, watch=False, count=2)
        assert fake.wait_for("GET", PODS, watch=True, count=2)


def test_stalled_watch_is_detected_by_the_read_timeout_and_reestablished(
    fake: FakeApi,
) -> None:
    fake.script_watch(PODS, Stall())
    fake.script_watch(
        PODS,
        event(
            "ADDED",
            {**pod("late"), "metadata": {**pod("late")["metadata"], "resourceVersion": "300"}},
        ),
        Stall(),
    )
    rec = FakeHandlers()
    inf = informer(fake, read_timeout=0.3)
    inf.add_handler(on_add=rec.on_add)
    with running(inf):
        started = time.monotonic()
        # The default read timeout is 75 s: an add well before that came from the 0.3 s one.
        assert rec.wait("add", timeout=30)
        assert time.monotonic() - started >= 0.25
        watches = list(fake.matching("GET", PODS, watch=True))
        assert len(watches) == 2
        assert watches[1].query["resourceVersion"] == watches[0].query["resourceVersion"]
        assert fake.count("GET", PODS, watch=False) == 1, "a stall needs no relist"


@pytest.mark.parametrize("watch", [False, True], ids=["list", "watch"])
def test_server_errors_back_off_exponentially(fake: FakeApi, watch: bool) -> None:
    fake.fail("GET", PODS, 500, watch=watch, times=1000)
    inf = informer(fake, backoff_initial=0.05, backoff_max=10.0)
    with running(inf, sync=watch):
        deadline = time.monotonic() + 30
        while len(list(fake.matching("GET", PODS, watch=watch))) < 4:
            assert time.monotonic() < deadline, "the informer stopped retrying"
            time.sleep(0.02)
    failed = list(fake.matching("GET", PODS, watch=watch))[:4]
    # Waits of at least 0.05, 0.1, 0.2 s (jitter only adds): a loaded machine can only
    # stretch them, so these lower bounds are what separates backoff from a hot loop.
    gaps = [b.at - a.at for a, b in itertools.pairwise(failed)]
    for i, gap in enumerate(gaps):
        assert gap >= 0.05 * 2**i * 0.9, gaps


def test_backoff_doubles_with_jitter_caps_and_resets_after_a_quiet_spell() -> None:
    now = [0.0]
    backoff = Backoff(0.8, 30.0, reset_after=120.0, clock=lambda: now[0])
    delays = []
    for _ in range(8):
        delays.append(backoff.next())
        now[0] += 1
    for i, d in enumerate(delays[:5]):
        assert 0.8 * 2**i <= d <= min(30.0, 1.6 * 2**i)
    assert delays[-1] <= 30.0
    now[0] += 121
    assert backoff.next() <= 1.6


@dataclass(frozen=True)
class PodRecord:
    name: str
    node: str


def test_transform_keeps_a_compact_record_keyed_from_raw_metadata_with_indexes(
    fake: FakeApi,
) -> None:
    fake.put(PODS, pod("a", node="n1"))
    fake.put(PODS, pod("b", node="n1"))
    moved = {**pod("b", node="n2"), "metadata": {**pod("b")["metadata"], "resourceVersion": "400"}}
    a_del = {**pod("a"), "metadata": {**pod("a")["metadata"], "resourceVersion": "401"}}
    go = threading.Event()
    fake.script_watch(PODS, Gate(go), event("MODIFIED", moved), event("DELETED", a_del), Stall())
    rec = FakeHandlers()
    inf: Informer[PodRecord] = Informer(
        fake.client(),
        PODS,
        name="pods",
        transform=lambda raw: PodRecord(raw["metadata"]["name"], raw["spec"]["nodeName"]),
        indexers={"node": lambda r: [r.node]},
    )
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    with running(inf):
        assert inf.get("ns/a") == PodRecord("a", "n1")
        assert inf.by_index("node", "n1") == [PodRecord("a", "n1"), PodRecord("b", "n1")]
        go.set()
        assert rec.wait("delete")
        assert inf.by_index("node", "n1") == []
        assert inf.by_index("node", "n2") == [PodRecord("b", "n2")]
        assert rec.of("update") == [(PodRecord("b", "n1"), PodRecord("b", "n2"))]
        assert rec.of("delete") == [PodRecord("a", "n1")]


def test_selectors_are_passed_to_list_and_watch(fake: FakeApi) -> None:
    fake.put(PODS, pod("a", labels={"app": "x"}))
    fake.put(PODS, pod("b", labels={"app": "y"}))
    inf = informer(fake, label_selector="app=x", field_selector="spec.nodeName=n1")
    with running(inf):
        assert inf.keys() == ["ns/a"]
        assert fake.wait_for("GET", PODS, watch=True)
    for r in fake.matching("GET", PODS):
        assert r.query["labelSelector"] == "app=x"
        assert r.query["fieldSelector"] == "spec.nodeName=n1"


def test_run_returns_promptly_after_stop_whatever_the_read_timeout(fake: FakeApi) -> None:
    inf = informer(fake)  # the default read timeout (WATCH_READ_TIMEOUT)
    stop = threading.Event()
    thread = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    thread.start()
    assert inf.wait_for_sync(stop, timeout=5)
    assert fake.wait_for("GET", PODS, watch=True)
    time.sleep(0.05)
    stop.set()
    thread.join(timeout=10)  # the read timeout it must not wait out is 75 s
    assert not thread.is_alive()


def test_late_handler_gets_cached_objects_as_adds_and_a_failing_handler_is_contained(
    fake: FakeApi,
) -> None:
    fake.put(PODS, pod("a"))
    new = {**pod("n"), "metadata": {**pod("n")["metadata"], "resourceVersion": "500"}}
    go = threading.Event()
    fake.script_watch(PODS, Gate(go), event("ADDED", new), Stall())
    inf = informer(fake)

    def explode(obj: Any) -> None:
        raise RuntimeError("handler bug")

    inf.add_handler(on_add=explode)
    with running(inf):
        rec = FakeHandlers()
        inf.add_handler(on_add=rec.on_add)
        assert names(rec.of("add")) == ["a"]
        go.set()
        assert rec.wait("add", count=2)
        assert inf.get("ns/n") is not None


def test_wait_for_sync_gives_up_on_stop_or_timeout(fake: FakeApi) -> None:
    fake.fail("GET", PODS, 500, times=1000, watch=False)
    inf = informer(fake)
    stop = threading.Event()
    assert inf.wait_for_sync(stop, timeout=0.1) is False
    stop.set()
    assert inf.wait_for_sync(stop) is False


def test_expired_continue_token_falls_back_to_one_full_list_at_once(fake: FakeApi) -> None:
    """client-go's pager (`FullListIfExpired`): a 410 on a continue token means the
    snapshot the pages came from was compacted; one unpaged LIST replaces it, with no
    backoff and no restart of the paging."""
    for i in range(7):
        fake.put(PODS, pod(f"p{i}"))
    fake.fail("GET", PODS, 410, when=lambda r: bool(r.query.get("continue")))
    inf = informer(fake, page_size=3, backoff_initial=5.0, backoff_max=5.0)
    rec = FakeHandlers()
    inf.add_handler(rec.on_add)
    with running(inf):
        assert sorted(inf.keys()) == [f"ns/p{i}" for i in range(7)]
        lists = list(fake.matching("GET", PODS, watch=False))
        assert [(r.query.get("limit"), bool(r.query.get("continue"))) for r in lists] == [
            ("3", False),
            ("3", True),
            (None, False),
        ]
        assert len(rec.of("add")) == 7


def test_relist_keeps_unchanged_records_and_reports_only_changed_ones(
    fake: FakeApi,
) -> None:
    changed = three_pods_then_gone(fake)
    transformed: list[str] = []

    def transform(raw: JSON) -> PodRecord:
        transformed.append(raw["metadata"]["name"])
        return PodRecord(raw["metadata"]["name"], raw["spec"]["nodeName"])

    rec = FakeHandlers()
    inf: Informer[PodRecord] = Informer(
        fake.client(), PODS, name="pods", transform=transform, page_size=2
    )
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    with running(inf):
        before = {k: inf.get(k) for k in ("ns/a", "ns/b")}
        transformed.clear()
        fake.put(PODS, pod("c", node="n9"))
        fake.put(PODS, pod("b"))  # a new resourceVersion, nothing the record keeps
        changed.set()
        assert rec.wait("update")
        assert fake.wait_for("GET", PODS, watch=False, count=4)  # two pages, twice
        assert sorted(transformed) == ["a", "b", "c"]
        assert inf.get("ns/a") is before["ns/a"], "the cached record is kept as it was"
        assert inf.get("ns/b") is before["ns/b"]
        assert inf.get("ns/c") == PodRecord("c", "n9")
        assert rec.of("update") == [(PodRecord("c", "n1"), PodRecord("c", "n9"))]
        assert rec.of("delete") == []


# streaming lists (sendInitialEvents, KEP-3157) -------------------------------------------


def streaming(fake: FakeApi, **kwargs: Any) -> Informer[Any]:
    fake.watch_list = True
    return informer(fake, watch_list=True, **kwargs)


def initial_event_watches(fake: FakeApi) -> list[Any]:
    return [r for r in fake.matching("GET", PODS, watch=True) if r.query.get("sendInitialEvents")]


def test_a_streaming_list_syncs_without_a_list_request_and_watches_on_the_same_stream(
    fake: FakeApi,
) -> None:
    for n in ("a", "b", "c"):
        fake.put(PODS, pod(n))
    fake.script_watch(
        PODS,
        event(
            "MODIFIED",
            {
                **pod("b", node="n2"),
                "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "999"},
            },
        ),
        Gate(hold := threading.Event()),  # the stream stays open until the end
    )
    rec = FakeHandlers()
    inf = streaming(fake)
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    with running(inf):
        assert sorted(inf.keys()) == ["ns/a", "ns/b", "ns/c"]
        assert rec.wait("update"), "the live event after the end BOOKMARK is applied"
        b = inf.get("ns/b")
        assert b is not None and b["spec"]["nodeName"] == "n2"
        assert fake.count("GET", PODS, watch=False) == 0
        (first,) = fake.matching("GET", PODS, watch=True)  # one request: list and watch
        hold.set()
        assert first.query["sendInitialEvents"] == "true"
        assert first.query["resourceVersionMatch"] == "NotOlderThan"
        assert first.query["allowWatchBookmarks"] == "true"
    assert len(rec.of("add")) == 3


def test_a_server_that_refuses_streaming_lists_gets_paged_lists_from_then_on(
    fake: FakeApi,
) -> None:
    fake.put(PODS, pod("a"))
    fake.script_watch(PODS, gone())  # the first plain watch: 410, so a relist
    inf = informer(fake, watch_list=True, page_size=1)  # fake.watch_list off: 422
    with running(inf):
        assert inf.keys() == ["ns/a"]
        assert fake.wait_for("GET", PODS, watch=False, count=2), "relisted in pages"
        assert len(initial_event_watches(fake)) == 1, "asked once, not on every relist"
        assert inf.watch_list is False


def test_a_streaming_relist_reports_only_what_changed(fake: FakeApi) -> None:
    changed = three_pods_then_gone(fake)  # after the first sync: 410 on its stream
    rec = FakeHandlers()
    inf = streaming(fake)
    inf.add_handler(rec.on_add, rec.on_update, rec.on_delete)
    with running(inf):
        kept = inf.get("ns/a")
        fake.put(PODS, pod("b", node="n9"))
        fake.objects[PODS].pop("c")
        changed.set()
        assert rec.wait("delete")
        assert len(initial_event_watches(fake)) == 2
        assert inf.get("ns/a") is kept, "an unchanged object keeps its cached record"
        assert [new["spec"]["nodeName"] for _, new in rec.of("update")] == ["n9"]
        assert [old["metadata"]["name"] for old in rec.of("delete")] == ["c"]
        assert fake.count("GET", PODS, watch=False) == 0


def test_stop_during_a_streaming_list_returns_promptly_and_resumes_the_collector(
    fake: FakeApi,
) -> None:
    for n in ("a", "b"):
        fake.put(PODS, pod(n))
    fake.initial_events_end = False
    fake.script_watch(PODS, Stall(60))  # initial events sent, the end BOOKMARK never comes
    inf = streaming(fake)
    stop = threading.Event()
    thread = threading.Thread(target=inf.run, args=(stop,), daemon=True)
    thread.start()
    assert fake.wait_for("GET", PODS, watch=True)
    time.sleep(0.2)  # the stream is open, the list not ended
    assert not inf.has_synced()
    assert not gc.isenabled(), "the collector is paused while a list is in progress"
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive(), "stop ends a streaming list that has not ended"
    assert not inf.has_synced()
    assert gc.isenabled(), "an abandoned list resumes the collector"


def test_a_stream_that_ends_before_its_initial_events_do_falls_back_to_pages(
    fake: FakeApi,
) -> None:
    fake.put(PODS, pod("a"))
    fake.initial_events_end = False
    fake.script_watch(PODS)  # the stream ends right after the initial ADDED events
    inf = streaming(fake)
    with running(inf):
        assert inf.keys() == ["ns/a"]
        assert fake.count("GET", PODS, watch=False) == 1
        assert inf.watch_list is True, "one cut stream does not turn streaming lists off"


def silent_client(server: ScriptedServer, scheme: str) -> Client:
    configuration = k8s_client.Configuration()
    configuration.host = server.url.replace("http", scheme, 1)
    configuration.verify_ssl = False
    return Client(configuration, qps=0, credentials=Credentials.static({}))


@pytest.mark.parametrize(
    "scheme", ["http", "https"], ids=["awaiting-the-answer", "dialling-the-tls-handshake"]
)
def test_stop_while_the_watch_is_dialled_or_awaits_its_answer_returns_promptly(
    scheme: str,
) -> None:
    # A server that accepts connections (the kernel completes each TCP handshake) and
    # never sends a byte: a hung API server, or a proxy that lost its upstream.
    server = ScriptedServer(lambda conn, n: None)
    try:
        inf: Informer[Any] = Informer(
            silent_client(server, scheme), PODS, name="pods", read_timeout=20.0
        )
        stop = threading.Event()
        thread = threading.Thread(target=inf.run, args=(stop,), daemon=True)
        thread.start()
        deadline = time.monotonic() + 5
        while server.connections == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # in the TLS handshake, or the request sent and its answer awaited
        stopped_at = time.monotonic()
        stop.set()
        thread.join(timeout=25)
        assert not thread.is_alive()
        assert time.monotonic() - stopped_at < 2.0, "stop waited for a timeout"
    finally:
        server.close()
