"""What the convergence report may call complete and observed (injector.convergence.
Progress): only syncs that *started* after leading began, and after a bundle's version
was seen, count."""

from __future__ import annotations

from injector.convergence import Progress


def test_nothing_is_complete_before_leading_or_before_every_object_synced_since() -> None:
    progress = Progress()
    progress.synced("a", progress.started())  # before leading: does not count
    assert not progress.complete(["a"])
    progress.begin()
    assert not progress.complete(["a"])
    progress.synced("a", progress.started())
    assert progress.complete(["a"]) and not progress.complete(["a", "b"])
    assert progress.complete([])


def test_a_sync_that_started_before_the_bundle_was_seen_does_not_observe_it() -> None:
    progress = Progress()
    progress.begin()
    early = progress.started()  # read the cache before the bundle event
    progress.saw_bundle("b1", "7")
    progress.synced("a", early)
    assert not progress.observed("b1", "7", ["a"])
    progress.synced("a", progress.started())  # the re-queued sync
    assert progress.observed("b1", "7", ["a"])
    assert not progress.observed("b1", "8", ["a"]), "a newer version not yet seen"
    assert progress.observed("b1", "7", []), "selected by nothing: observed once seen"
    progress.forget_bundle("b1")
    assert not progress.observed("b1", "7", [])


def test_a_new_leadership_forgets_what_the_last_one_synced() -> None:
    progress = Progress()
    progress.begin()
    progress.saw_bundle("b1", "1")
    progress.synced("a", progress.started())
    assert progress.complete(["a"]) and progress.observed("b1", "1", ["a"])
    progress.begin()
    assert not progress.complete(["a"]) and not progress.observed("b1", "1", ["a"])
    progress.synced("a", next(progress.ticks), gone=True)
    assert progress.complete([])
