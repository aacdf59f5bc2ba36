"""How a process that caches a cluster gives memory back to the system.

A LIST page is parsed into a few MB of short-lived objects and then dropped, while the
records kept from it live on. Two glibc behaviours turn that churn into RSS that is
never returned: the dynamic mmap threshold (after the first ~1 MB response buffer is
freed, later ones come from the heap, which only shrinks from the top), and freed heap
pages that stay mapped until `malloc_trim`. This module decides:

* `tune_allocator()` (once, at process start): a fixed 128 KiB mmap threshold, so every
  response buffer and page-sized object is mapped and unmapped on its own instead of
  fragmenting the heap.
* `release_free_memory()` (after a big LIST is applied): `malloc_trim(0)`, returning
  every free heap page to the system.

Both are no-ops where the C library is not glibc (musl, macOS) or cannot be loaded.
What they saved is measured in bench/README.md ("Figures behind module decisions").

And how it keeps Python's cyclic garbage collector out of the way of a big cache:

* `collector_paused()` (around a LIST): parsing a page makes tens of thousands of
  short-lived, acyclic dicts and lists, each allocation counting toward a young
  collection, and the records kept meanwhile make every full collection longer. The
  collector is paused while any LIST is in progress (a count across threads: three
  informers list at once at start-up), so refcounting alone frees the pages, as it
  would anyway: none of them is cyclic.
* When the last LIST ends after a big one (`freeze=True`): `gc.collect()` (whatever
  cyclic garbage other threads made meanwhile goes now), then `gc.freeze()`: every live
  object — the cache above all — moves to the permanent generation, which later
  collections do not traverse. Frozen objects are still freed by refcount when dropped
  (records are acyclic); only a frozen object that later joins a reference cycle is
  never collected, and only live objects are frozen. The collector was a large share of
  the signer's start-up CPU at scale (bench/README.md, "Start-up").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import threading
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc <malloc.h>
MMAP_THRESHOLD = 128 * 1024


@functools.cache
def _glibc() -> Any | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        if not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
            return None
        return libc
    except OSError:
        return None


def tune_allocator() -> bool:
    """Fix glibc's mmap threshold; True if applied."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def release_free_memory() -> bool:
    """Return free heap memory to the system; True if something was released."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.malloc_trim(0))


_pause_lock = threading.Lock()
_lists_in_progress = 0
_enabled_before = True  # the collector's state before the first pause
_freeze_when_done = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the duration of a LIST (counts across
    threads; the last one out restores the state from before the first pause)."""
    global _lists_in_progress, _enabled_before, _freeze_when_done
    with _pause_lock:
        if _lists_in_progress == 0:
            _enabled_before = gc.isenabled()
            gc.disable()
        _lists_in_progress += 1
    try:
        yield
    finally:
        with _pause_lock:
            _lists_in_progress -= 1
            if _lists_in_progress == 0:
                if _enabled_before:
                    gc.enable()
                if _freeze_when_done:
                    _freeze_when_done = False
                    gc.collect()
                    gc.freeze()


def freeze_after_lists() -> None:
    """Ask for `gc.collect(); gc.freeze()` when the last LIST in progress ends (call
    inside `collector_paused()`, after a big LIST was applied)."""
    global _freeze_when_done
    with _pause_lock:
        _freeze_when_done = True
