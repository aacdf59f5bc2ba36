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
Measured (bench "scale", 20,000 synthetic Pods): RSS per cached Pod after a paged LIST
835 → 592 bytes in a micro-benchmark.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
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
