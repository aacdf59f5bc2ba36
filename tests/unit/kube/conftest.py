"""The fake API server the kube unit tests talk to: one per test, with the `default`
namespace present (what a fresh cluster has). Modules that need other contents put
them in their own `fake` fixture."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.fakeapi import FakeApi


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi().start()
    api.put("/api/v1/namespaces", {"metadata": {"name": "default"}})
    yield api
    api.stop()
