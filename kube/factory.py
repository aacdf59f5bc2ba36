"""The process's informers: built on request, started together, synced together.

What it decides (client-go's `SharedInformerFactory`, reduced to what we need): the
manager builds one factory per process; each controller's constructor is handed caches
the factory made (`InformerFactory.informer`), never informers it builds itself, so the
process starts them all at once — before leadership, so a standby replica is warm —
and a test builds the same controller over seeded caches instead. `start` is
idempotent and starts only informers not yet running (a controller built later gets
its informers started by the next call).

Informers are not shared between controllers: each asks for the transform and
selectors it reads (the signer's compact Pod records, the injector's
ClusterTrustBundles of every signer), and two asks are two watches. Share one here, by
path and selectors, when two controllers ever read the same records.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kube.client import Client
from kube.controller import wait_until
from kube.informer import Indexer, Informer
from kube.types import JSON

T = TypeVar("T")


class InformerFactory:
    def __init__(self, client: Client) -> None:
        self.client = client
        self._informers: list[Informer[Any]] = []
        self._threads: dict[int, threading.Thread] = {}
        self._lock = threading.Lock()

    def informer(
        self,
        list_path: str,
        *,
        name: str,
        transform: Callable[[JSON], T],
        field_selector: str | None = None,
        label_selector: str | None = None,
        key: Callable[[T], str] | None = None,
        indexers: dict[str, Indexer[T]] | None = None,
        page_size: int = 500,
    ) -> Informer[T]:
        """A new informer of `list_path`, started by the next `start`."""
        informer: Informer[T] = Informer(
            self.client,
            list_path,
            name=name,
            transform=transform,
            field_selector=field_selector,
            label_selector=label_selector,
            key=key,
            indexers=indexers,
            page_size=page_size,
        )
        with self._lock:
            self._informers.append(informer)
        return informer

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """Start every informer not yet started; the threads started now."""
        started = []
        with self._lock:
            for informer in self._informers:
                if id(informer) in self._threads:
                    continue
                thread = threading.Thread(
                    target=informer.run,
                    args=(stop,),
                    name=f"informer-{informer.name}",
                    daemon=True,
                )
                thread.start()
                self._threads[id(informer)] = thread
                started.append(thread)
        return started

    def has_synced(self) -> bool:
        with self._lock:
            informers = list(self._informers)
        return all(i.has_synced() for i in informers)

    def wait_for_sync(self, stop: threading.Event, timeout: float | None = None) -> bool:
        """Block until every informer has synced (True), or `stop`/`timeout` (False)."""
        return wait_until(self.has_synced, stop, timeout)
