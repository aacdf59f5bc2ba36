"""Wake-ups that need a real informer (against the in-process fake API server): a Pod that
first reaches the Pod cache on a LIST — a relist, or the informer's first list after a
restart — wakes the requests waiting on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from kube.factory import InformerFactory
from kube.informer import Informer
from signer import controller as signers
from tests.unit import pki
from tests.unit.fakeapi import FakeApi
from tests.unit.fakes import FakeRecorder
from tests.unit.signer.helpers import FakeMaterialSource

NS = "team-a"


@pytest.fixture
def fake() -> Iterator[FakeApi]:
    api = FakeApi().start()
    yield api
    api.stop()


def test_pod_first_cached_by_a_list_wakes_its_waiting_requests(fake: FakeApi) -> None:
    client = fake.client()
    caches = signers.informers(
        InformerFactory(client), signer_name="kubernetes.io/service-serving", pcr_version="v1"
    )
    controller = signers.SignerController(
        client,
        caches,
        FakeMaterialSource(pki.ca()),
        signer_name="kubernetes.io/service-serving",
        registry=CollectorRegistry(),
        recorder=FakeRecorder(),
    )
    # Decided from a live GET while the Pod was not cached yet; waits on its labels.
    controller.index.wait(f"{NS}/req-1", f"{NS}/web-0", [f"{NS}/web"])
    controller.index.wait(f"{NS}/req-2", f"{NS}/other-0", [f"{NS}/web"])
    fake.put(
        f"/api/v1/namespaces/{NS}/pods",
        {"metadata": {"name": "web-0", "labels": {"app": "web"}}, "spec": {"nodeName": "n1"}},
    )

    stop = threading.Event()
    pods = caches.pods
    assert isinstance(pods, Informer)
    thread = threading.Thread(target=pods.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert pods.wait_for_sync(stop, timeout=10)
        assert controller.queue.get() == (f"{NS}/req-1", False)
        assert len(controller.queue) == 0
    finally:
        stop.set()
        thread.join(timeout=5)
