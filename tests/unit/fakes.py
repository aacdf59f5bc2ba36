"""The fakes the controller unit tests share: an informer's cache as a controller reads
it, seeded by the test, and an Event recorder that keeps what it is asked to record.

Every controller takes its caches in its constructor (`kube.controller`), so a unit test
builds it over `FakeCache`s: `get`/`keys`/`list`/`by_index`/`has_synced`/`add_handler`
like `kube.informer.Informer`, with the items a plain dict the test edits. A read of a
key can run a hook once — `before[key]` just before it, `after[key]` just after — the
moment another informer event lands in the middle of a decision.

`FakeCache.add_handler` and `FakeRecorder` (which satisfies `kube.events.Recorder`) bind
each call against the protocol's signature, so a wrong argument fails as it would against
the real thing; the recorder keeps each event as a `Recorded` and sends nothing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kube.controller import Cache
from kube.events import ObjectRef, Recorder

T = TypeVar("T")
_ADD_HANDLER = inspect.signature(Cache.add_handler)


class FakeCache(Generic[T]):
    def __init__(
        self,
        items: Iterable[T] | Mapping[str, T] = (),
        *,
        key: Callable[[T], str] | None = None,
        indexers: Mapping[str, Callable[[T], list[str]]] | None = None,
        synced: bool = True,
    ) -> None:
        self._key = key
        self.indexers = dict(indexers or {})
        self.synced = synced
        self.items: dict[str, T] = {}
        self.before: dict[str, Callable[[], None]] = {}
        self.after: dict[str, Callable[[], None]] = {}
        self.handlers: list[
            tuple[
                Callable[[T], None] | None,
                Callable[[T, T], None] | None,
                Callable[[T], None] | None,
            ]
        ] = []
        if isinstance(items, Mapping):
            self.items.update(items)
        else:
            for item in items:
                self.put(item)

    # seeding

    def put(self, item: T) -> None:
        """Store `item` under the key the constructor's `key` gives it."""
        assert self._key is not None, "FakeCache(key=...) is needed to put by record"
        self.items[self._key(item)] = item

    def __setitem__(self, key: str, item: T) -> None:
        self.items[key] = item

    def __delitem__(self, key: str) -> None:
        del self.items[key]

    def __getitem__(self, key: str) -> T:
        return self.items[key]

    def __contains__(self, key: object) -> bool:
        return key in self.items

    # what a controller reads

    def get(self, key: str) -> T | None:
        if key in self.before:
            self.before.pop(key)()
        value = self.items.get(key)
        if key in self.after:
            self.after.pop(key)()
        return value

    def keys(self) -> list[str]:
        return list(self.items)

    def by_index(self, index_name: str, value: str) -> list[T]:
        indexer = self.indexers[index_name]
        return [item for _, item in sorted(self.items.items()) if value in indexer(item)]

    def has_synced(self) -> bool:
        return self.synced

    def add_handler(self, *args: Any, **kwargs: Any) -> None:
        """`kube.controller.Cache.add_handler`: the call is bound against its signature."""
        handler = _ADD_HANDLER.bind(self, *args, **kwargs)
        handler.apply_defaults()
        self.handlers.append(
            (
                handler.arguments["on_add"],
                handler.arguments["on_update"],
                handler.arguments["on_delete"],
            )
        )

    def list(self) -> list[T]:  # last: below it, `list` in the class body is this method
        return [*self.items.values()]


@dataclass(frozen=True)
class Recorded:
    type: str
    regarding: ObjectRef
    reason: str
    note: str
    action: str
    related: ObjectRef | None


_RECORD = inspect.signature(Recorder.warning)


class FakeRecorder:
    """Keeps every event in `events`, in order; `warnings` are the Warning ones."""

    def __init__(self) -> None:
        self.events: list[Recorded] = []

    def warning(self, *args: Any, **kwargs: Any) -> None:
        self._record("Warning", args, kwargs)

    def normal(self, *args: Any, **kwargs: Any) -> None:
        self._record("Normal", args, kwargs)

    def _record(self, type_: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        bound = _RECORD.bind(self, *args, **kwargs)
        bound.apply_defaults()
        del bound.arguments["self"]
        self.events.append(Recorded(type_, **bound.arguments))

    @property
    def warnings(self) -> list[Recorded]:
        return [e for e in self.events if e.type == "Warning"]

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]
