"""kube.memory talks to glibc's allocator where there is one and is a no-op elsewhere."""

from __future__ import annotations

import gc
import platform
import threading
import weakref

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


def test_the_collector_is_paused_while_any_list_runs_and_restored_after() -> None:
    assert gc.isenabled()
    first_in, second_done = threading.Event(), threading.Event()
    states: list[bool] = []

    def second_list() -> None:
        first_in.wait()
        with memory.collector_paused():
            states.append(gc.isenabled())
        second_done.set()

    t = threading.Thread(target=second_list)
    t.start()
    with memory.collector_paused():
        first_in.set()
        second_done.wait(5)
        states.append(gc.isenabled())  # the other LIST ended; this one still runs
    t.join(5)
    assert states == [False, False]
    assert gc.isenabled()


def test_a_big_list_leaves_live_objects_frozen_and_cyclic_garbage_collected() -> None:
    class Node:
        other: object = None

    gc.unfreeze()
    try:
        with memory.collector_paused():
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle that is garbage once the names go
            probe = weakref.ref(a)
            del a, b
            kept = Node()
            memory.freeze_after_lists()
        assert probe() is None, "garbage made during the LIST was collected, not frozen"
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(kept)
        assert not any(o is kept for o in gc.get_objects()), "not in a collected generation"
        with memory.collector_paused():
            pass
        assert gc.isenabled()
    finally:
        gc.unfreeze()
