"""A paginated LIST asks for the next page while the caller still works on this one, never
yields a page out of order, and answers an expired continue token with one full LIST."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from kube import pager
from kube.client import ApiError
from kube.types import JSON
from tests.unit.fakeapi import FakeApi

PODS = "/api/v1/namespaces/ns/pods"


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi().start()
    for n in range(5):
        api.put(PODS, {"metadata": {"name": f"p{n}", "namespace": "ns"}})
    yield api
    api.stop()


def names(page: JSON) -> list[str]:
    return [item["metadata"]["name"] for item in page.get("items") or []]


@pytest.mark.parametrize(
    ("body", "token"),
    [
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9",'
            b'"continue":"eyJ2Ijo","remainingItemCount":3},"items":[]}',
            "eyJ2Ijo",
        ),
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[]}',
            None,
        ),
        # An unstructured (custom resource) list: keys sorted, metadata after the items.
        (b'{"apiVersion":"x/v1","items":[],"kind":"FooList","metadata":{"continue":"c"}}', None),
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"continue":"c"', None),
        (b"", None),
        (b'{"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": "c"}}', None),
    ],
)
def test_the_continue_token_is_read_from_the_head_of_a_typed_list(
    body: bytes, token: str | None
) -> None:
    assert pager.peek_continue(body) == token


def test_the_next_page_is_requested_while_the_caller_still_holds_this_one(
    fake: FakeApi,
) -> None:
    stop = threading.Event()
    seen: list[list[str]] = []
    for page in pager.pages(fake.client(), PODS, {"limit": 2}, stop):
        if not seen:
            assert fake.wait_for("GET", PODS, count=2), "page 2 asked for before page 1 is done"
        seen.append(names(page))
    assert seen == [["p0", "p1"], ["p2", "p3"], ["p4"]]
    assert fake.count("GET", PODS) == 3


def test_stop_asks_for_no_further_page(fake: FakeApi) -> None:
    stop = threading.Event()
    got = []
    for page in pager.pages(fake.client(), PODS, {"limit": 2}, stop):
        got.append(names(page))
        stop.set()
    assert got == [["p0", "p1"]]
    assert fake.count("GET", PODS) <= 2  # at most the read-ahead already in flight


class HeadLies:
    """A client whose bodies carry a head `continue` that is not the decoded one (a
    duplicate `metadata` key: the decoder keeps the last)."""

    def __init__(self) -> None:
        self.asked: list[str | None] = []

    def get_bytes(self, path: str, params: dict[str, Any] | None = None, **_: Any) -> bytes:
        token = (params or {}).get("continue")
        self.asked.append(token)
        page = {None: ("1", "wrong", "real-2"), "real-2": ("2", "wrong", "")}[token]
        number, head, real = page
        meta = orjson.dumps({"continue": real} if real else {}).decode()
        head_meta = '{"continue":"' + head + '"}'
        body = (
            b'{"kind":"PodList","apiVersion":"v1","metadata":'
            + head_meta.encode()
            + b',"metadata":'
            + meta.encode()
            + b',"items":[{"metadata":{"name":"page-'
            + number.encode()
            + b'"}}]}'
        )
        return body


def test_a_wrong_guess_is_dropped_and_the_pages_come_in_order() -> None:
    client = HeadLies()
    pages = list(pager.pages(client, PODS, {"limit": 1}, threading.Event()))  # type: ignore[arg-type]
    assert [names(p) for p in pages] == [["page-1"], ["page-2"]]
    assert client.asked[0] is None
    assert "real-2" in client.asked


def test_an_expired_continue_token_restarts_with_one_full_list(fake: FakeApi) -> None:
    fake.fail("GET", PODS, 410, when=lambda r: "continue" in r.query)
    pages = list(pager.pages(fake.client(), PODS, {"limit": 2}, threading.Event()))
    assert [names(p) for p in pages if p is not pager.RESTART] == [
        ["p0", "p1"],
        ["p0", "p1", "p2", "p3", "p4"],
    ]
    assert pages[1] is pager.RESTART
    last = list(fake.matching("GET", PODS))[-1]
    assert "limit" not in last.query and "continue" not in last.query


def test_a_410_on_the_first_page_is_an_error(fake: FakeApi) -> None:
    fake.fail("GET", PODS, 410)
    with pytest.raises(ApiError) as err:
        list(pager.pages(fake.client(), PODS, {"limit": 2}, threading.Event()))
    assert err.value.status == 410
