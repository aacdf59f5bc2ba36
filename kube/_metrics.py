"""Metric families shared by several objects on one Prometheus registry.

Decides how a metric family is created once per registry: several work queues (or
leader electors) report into one `CollectorRegistry` under different `name` labels, and
prometheus_client refuses to register the same family twice. A per-registry cache,
keyed weakly by the registry object, hands every caller the same family. With no
registry the families are created unregistered (private to the caller).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import CollectorRegistry

F = TypeVar("F")

_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, object]] = (
    weakref.WeakKeyDictionary()
)


def family(
    registry: CollectorRegistry | None,
    key: str,
    make: Callable[[CollectorRegistry | None], F],
) -> F:
    """Return the family `key` on `registry`, creating it with `make(registry)` once."""
    if registry is None:
        return make(None)
    with _lock:
        families = _cache.setdefault(registry, {})
        if key not in families:
            families[key] = make(registry)
        result: F = families[key]  # type: ignore[assignment]
        return result
