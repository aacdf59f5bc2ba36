"""kube.memory talks to glibc's allocator where there is one and is a no-op elsewhere."""

from __future__ import annotations

import platform

import pytest

from kube import memory


def test_allocator_tuning_applies_on_glibc_and_trim_runs() -> None:
    on_glibc = platform.libc_ver()[0] == "glibc"
    assert memory.tune_allocator() is on_glibc
    assert isinstance(memory.release_free_memory(), bool)


def test_no_c_library_means_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    memory._glibc.cache_clear()
    try:
        monkeypatch.setattr("ctypes.CDLL", _raise)
        assert memory.tune_allocator() is False
        assert memory.release_free_memory() is False
    finally:
        monkeypatch.undo()
        memory._glibc.cache_clear()


def _raise(*args: object) -> object:
    raise OSError("no libc here")
