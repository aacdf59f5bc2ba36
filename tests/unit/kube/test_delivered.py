"""The integration harness's `Delivered` wait ("the informer has handed this key at this
resourceVersion or later to its handlers") against the real informer: true once the
fact holds, also when a relist folded the version in and handed nothing, and never
before every handler registered ahead of it has run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from kube.informer import Informer
from kube.types import JSON
from tests.integration.injector_harness import Delivered, at_or_after, cache_key
from tests.unit.fakeapi import FakeApi, Gate, event, gone
from tests.unit.kube.helpers import PODS, pod, running


@dataclass(frozen=True)
class Placed:
    """What a controller reads of a Pod: where it runs (its labels are not kept)."""

    namespace: str
    name: str
    node: str


def placed(raw: JSON) -> Placed:
    meta = raw["metadata"]
    return Placed(meta["namespace"], meta["name"], raw["spec"]["nodeName"])


def placements(fake: FakeApi, *, watch_list: bool) -> Informer[Placed]:
    fake.watch_list = watch_list
    return Informer(
        fake.client(),
        PODS,
        name="pods",
        transform=placed,
        watch_list=watch_list,
        backoff_initial=0.01,
        backoff_max=0.05,
    )


def until(fact: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fact():
            return True
        time.sleep(0.005)
    return fact()


@pytest.mark.parametrize("watch_list", [False, True], ids=["paged", "streaming"])
def test_a_version_a_relist_folded_in_without_a_change_counts_as_handed(
    fake: FakeApi, watch_list: bool
) -> None:
    """A write whose watch event never came (410 Gone, then a relist) and whose record
    equals the cached one is handed to no handler: the relist keeps the cached record.
    Its fact holds all the same — the handlers have seen the key as it is at the
    relist's version — so the wait must not run into its timeout."""
    fake.put(PODS, pod("a"))
    release = threading.Event()
    fake.script_watch(PODS, Gate(release), gone())  # the first watch: held, then 410
    inf = placements(fake, watch_list=watch_list)
    calls: list[str] = []
    inf.add_handler(lambda _: calls.append("add"), lambda _o, _n: calls.append("update"))
    delivered = Delivered(inf, cache_key)
    with running(inf):
        written = fake.put(PODS, pod("a", labels={"tier": "web"}))["metadata"]["resourceVersion"]
        assert not delivered.handed("ns/a", written)
        release.set()
        assert until(lambda: at_or_after(inf.resource_version, written)), "relisted"
        assert calls == ["add"], "the relist handed nothing: the record did not change"
        assert delivered.handed("ns/a", written)


class Blocking:
    """A handler registered before `Delivered` (the controller's, in the harness) that
    holds the informer's thread in its `on_update` until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # whatever the test's outcome: the informer must stop

    def on_update(self, _old: Any, _new: Any) -> None:
        self.entered.set()
        self.release.wait(10)


def test_a_watched_version_is_not_handed_while_an_earlier_handler_still_runs(
    fake: FakeApi,
) -> None:
    """The informer stores a record (and takes its version) before it calls the
    handlers: a record equal to the cached one is in the cache at the new version, but
    until every handler ahead of `Delivered` has run, it is not handed over."""
    fake.put(PODS, pod("a"))
    go = threading.Event()
    written = str(int(fake.resource_version) + 10)  # a write the fake's watch reports
    relabelled = pod("a", labels={"tier": "web"})
    relabelled["metadata"]["resourceVersion"] = written
    fake.script_watch(PODS, Gate(go), event("MODIFIED", relabelled), Gate(threading.Event()))
    inf = placements(fake, watch_list=False)
    controller = Blocking()
    inf.add_handler(on_update=controller.on_update)
    delivered = Delivered(inf, cache_key)
    with running(inf), controller:
        go.set()
        assert controller.entered.wait(5)
        assert inf.resource_version == written and inf.get("ns/a") == Placed("ns", "a", "n1")
        assert not delivered.handed("ns/a", written)
        controller.release.set()
        assert until(lambda: delivered.handed("ns/a", written))


@pytest.mark.parametrize("watch_list", [False, True], ids=["paged", "streaming"])
def test_a_relisted_change_is_not_handed_while_an_earlier_handler_still_runs(
    fake: FakeApi, watch_list: bool
) -> None:
    fake.put(PODS, pod("a"))
    release = threading.Event()
    fake.script_watch(PODS, Gate(release), gone())
    inf = placements(fake, watch_list=watch_list)
    controller = Blocking()
    inf.add_handler(on_update=controller.on_update)
    delivered = Delivered(inf, cache_key)
    with running(inf), controller:
        written = fake.put(PODS, pod("a", node="n2"))["metadata"]["resourceVersion"]
        release.set()
        assert controller.entered.wait(5)
        assert at_or_after(inf.resource_version, written)
        assert not delivered.handed("ns/a", written)
        controller.release.set()
        assert until(lambda: delivered.handed("ns/a", written))
