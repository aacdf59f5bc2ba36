"""Event names against the real API server: a name cut to fit 253 characters stays a
DNS subdomain, so the Event is stored rather than refused with 422 and lost."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.kubelet import Kubelet
from kube.client import ApiError, Client
from kube.events import EventRecorder, ObjectRef


def test_an_event_about_a_237_character_pod_whose_cut_ends_in_a_dash_is_stored(
    client: Client, kubelet: Kubelet, namespace: str
) -> None:
    at = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
    suffix = f".{int(at.timestamp()) * 10**9:x}"
    kept = 253 - len(suffix)
    name = "a" * (kept - 1) + "-b"  # the cut to `kept` characters ends in "-"
    assert len(name) == 237
    pod = kubelet.create_pod(name, namespace)
    regarding = ObjectRef(kind="Pod", namespace=namespace, name=name, uid=pod["metadata"]["uid"])
    events = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    # What a plain cut makes, the API server refuses.
    with pytest.raises(ApiError) as refused:
        client.create(
            events,
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": name[:kept] + suffix},
                "eventTime": "2026-12-02T06:00:00.000000Z",
                "reportingController": "test",
                "reportingInstance": "test",
                "action": "Sign",
                "reason": "Test",
                "type": "Normal",
                "regarding": regarding.to_json(),
            },
        )
    assert refused.value.status == 422

    recorder = EventRecorder(client, "service-serving-signer", "test", now=lambda: at)
    try:
        recorder.warning(regarding, "ServiceNotFound", "no Service web", "Sign")
        assert recorder.flush()
    finally:
        recorder.stop()

    [stored] = client.get(events)["items"]
    assert stored["regarding"]["name"] == name
    assert stored["reason"] == "ServiceNotFound"
    assert stored["metadata"]["name"].endswith(suffix)
