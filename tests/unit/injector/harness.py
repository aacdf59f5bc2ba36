"""The injector controller with seeded caches, a recording client and recorded Events:
what the sync tests drive."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from prometheus_client import CollectorRegistry

from injector import decide as decisions
from injector.controller import (
    SELECTION_INDEX,
    Caches,
    InjectorController,
)
from injector.kinds import API_SERVICE, CRD, MUTATING_WEBHOOK, VALIDATING_WEBHOOK
from injector.targets import Target
from kube.client import ApiError, Client
from kube.events import ObjectRef
from tests.unit.fakes import FakeCache

# the sync, against seeded caches ------------------------------------------------------


def selection(target: Target) -> list[str]:
    selector = decisions.selector_of(target)
    return decisions.selection_keys(selector) if selector is not None else []


def target_cache() -> FakeCache[Target]:
    return FakeCache(key=lambda target: target.name, indexers={SELECTION_INDEX: selection})


class FakeClient:
    def __init__(self, error: ApiError | None = None) -> None:
        self.patches: list[tuple[str, Any, str, Any]] = []
        self.error = error

    def patch(self, path: str, body: Any, *, patch_type: str, params: Any, **_: Any) -> Any:
        self.patches.append((path, body, patch_type, params))
        if self.error is not None:
            raise self.error
        return {}

    def get(self, path: str, *_: Any, **__: Any) -> Any:
        return {"items": []}  # the departed-ConfigMap sweep's LIST: none


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, ObjectRef, str, str]] = []

    def warning(
        self,
        regarding: ObjectRef,
        reason: str,
        note: str,
        action: str,
        related: ObjectRef | None = None,
    ) -> None:
        self.events.append(("Warning", regarding, reason, note))


def controller(
    targets: list[Target],
    bundles: list[Any],
    client: FakeClient | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    **kw: Any,
) -> tuple[InjectorController, FakeClient, Events, dict[str, FakeCache[Target]]]:
    fake = client or FakeClient()
    events = Events()
    caches = {
        k.kind: target_cache() for k in (VALIDATING_WEBHOOK, MUTATING_WEBHOOK, API_SERVICE, CRD)
    }
    for target in targets:
        caches[target.kind].put(target)
    ctrl = InjectorController(
        cast(Client, fake),
        Caches(caches, FakeCache(bundles, key=lambda b: str(b["metadata"]["name"]), **kw)),
        events,
        registry=CollectorRegistry(),
        clock=clock,
    )
    return ctrl, fake, events, caches
