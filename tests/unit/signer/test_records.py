"""Records are compact but keep value semantics: interning shares what many Pods share
without changing equality (the re-drive decisions), and without keeping maps alive past
their records or handing one namespace's objects to another's."""

from __future__ import annotations

import base64
import gc
import sys
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from signer.records import (
    Labels,
    frozen_map,
    interned_maps,
    pcr_record,
    pod_record,
    service_record,
)


def raw_pod(namespace: str, name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": labels},
        "spec": {"nodeName": "node-1", "serviceAccountName": "sa", **spec},
    }


def test_pods_of_one_replicaset_share_one_label_map_that_compares_by_value() -> None:
    labels = {"app": "web", "pod-template-hash": "5d4f"}
    a = pod_record(raw_pod("ns1", "web-1", dict(labels)))
    b = pod_record(raw_pod("ns1", "web-2", dict(labels)))
    assert a.labels is b.labels
    assert a.labels == labels and a.labels == MappingProxyType(labels)
    assert a.labels != {"app": "web"}
    moved = pod_record(raw_pod("ns1", "web-1", {**labels, "tier": "x"}))
    assert moved.labels != a.labels, "a label change is still seen as a change"
    assert pod_record(raw_pod("ns1", "web-1", dict(labels))) == a, "records equal by value"


def test_interning_is_per_namespace_and_releases_maps_with_their_records() -> None:
    gc.collect()
    baseline = interned_maps()
    labels = {"app": "unique-to-this-test"}
    first = pod_record(raw_pod("ns-a", "p", dict(labels)))
    other = pod_record(raw_pod("ns-b", "p", dict(labels)))
    assert first.labels == other.labels
    assert first.labels is not other.labels, "no object is shared across namespaces"
    service = service_record(
        {"metadata": {"namespace": "ns-b", "name": "s"}, "spec": {"selector": dict(labels)}}
    )
    assert service.selector is other.labels
    assert interned_maps() == baseline + 2
    del first, other, service
    gc.collect()
    assert interned_maps() == baseline, "an interned map outlived every record using it"


def test_shared_names_are_interned_and_records_are_slotted() -> None:
    a = pod_record(raw_pod("".join(["n", "s1"]), "p1", {}))
    b = pod_record(raw_pod("".join(["n", "s1"]), "p2", {}))
    assert a.namespace is b.namespace and a.node_name is b.node_name
    assert a.service_account_name is b.service_account_name
    assert not hasattr(a, "__dict__")
    assert sys.getsizeof(a) < 120


def test_labels_are_read_only_and_hashable() -> None:
    labels = frozen_map({"a": "1"})
    assert isinstance(labels, Labels)
    assert dict(labels) == {"a": "1"} and "a" in labels and len(labels) == 1
    assert not hasattr(labels, "__setitem__")
    assert hash(labels) == hash(Labels({"a": "1"}))
    assert frozen_map({}) == {} and frozen_map(None) == {}


def test_a_pod_record_shares_its_key_string_with_the_informer_cache() -> None:
    import dataclasses

    from kube.informer import Informer

    pod = pod_record(raw_pod("ns1", "web-1", {"app": "web"}))
    assert (pod.namespace, pod.name, pod.key) == ("ns1", "web-1", "ns1/web-1")
    assert dataclasses.replace(pod, node_name="n2").name == "web-1"
    inf: Informer[Any] = Informer(None, "/api/v1/pods", name="pods", key=lambda r: r.key)  # type: ignore[arg-type]
    inf._store(inf._stored_key("ns1/web-1", pod), pod)
    newer = pod_record(raw_pod("ns1", "web-1", {"app": "web", "v": "2"}))
    inf._store(inf._stored_key("ns1/web-1", newer), newer)
    (stored_key,) = inf._items
    assert stored_key is newer.key, "the cache keys by the current record's own string"


def test_a_pod_uid_is_packed_but_reads_back_the_same_string() -> None:
    import dataclasses

    def with_uid(uid: str) -> dict[str, Any]:
        raw = raw_pod("ns1", "p", {})
        raw["metadata"]["uid"] = uid
        return raw

    uid = "6f1c2d3e-4a5b-4c6d-8e9f-000000000123"
    pod = pod_record(with_uid(uid))
    assert pod.uid == uid and isinstance(pod.packed_uid, bytes)
    assert dataclasses.replace(pod, node_name="n2").uid == uid
    assert pod == pod_record(with_uid(uid))
    for odd in ("uid-p", "6F1C2D3E-4A5B-4C6D-8E9F-000000000123", ""):
        assert pod_record(with_uid(odd)).uid == odd, "a non-canonical UID is kept verbatim"


def _canonical_uuid(uid: str) -> bool:
    import uuid

    try:
        return str(uuid.UUID(uid)) == uid
    except ValueError:
        return False


_UID_ALPHABET = "0123456789abcdefABCDEF- {}urn:x"


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.uuids().map(str),
        st.uuids().map(lambda u: str(u).upper()),
        st.uuids().map(lambda u: str(u).replace("-", "")),
        st.uuids().map(lambda u: "{" + str(u) + "}"),
        st.uuids().map(lambda u: str(u)[:9] + " " + str(u)[10:]),
        st.text(alphabet=_UID_ALPHABET, min_size=30, max_size=40),
        st.text(max_size=40),
    )
)
def test_any_uid_reads_back_exactly_and_only_canonical_ones_are_packed(uid: str) -> None:
    raw = raw_pod("ns1", "p", {})
    raw["metadata"]["uid"] = uid
    pod = pod_record(raw)
    assert pod.uid == uid
    assert isinstance(pod.packed_uid, bytes) is _canonical_uuid(uid)


def raw_pcr(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns1", "name": "req-1", "uid": "u1", "resourceVersion": "7"},
        "spec": {
            "signerName": "kubernetes.io/service-serving",
            "podName": "web-1",
            "podUID": "pod-uid",
            "nodeName": "node-1",
            "serviceAccountName": "sa",
            "stubPKCS10Request": base64.b64encode(b"stub-der" * 40).decode(),
            "pkixPublicKey": base64.b64encode(b"spki-der" * 10).decode(),
            "unverifiedUserAnnotations": {"kubernetes.io/service-names": "web"},
        },
        "status": status or {},
    }


def test_a_finished_request_keeps_no_key_material_in_the_cache() -> None:
    # Finished requests stay cached until kube-apiserver deletes them (15 minutes): after
    # a 10,000-Pod roll-out that is 10,000 stubs nobody will read again.
    pending = pcr_record(raw_pcr())
    assert pending.terminal is None
    assert pending.stub_pkcs10 == b"stub-der" * 40 and pending.pkix_public_key is not None
    for kind in ("Issued", "Denied", "Failed"):
        done = pcr_record(
            raw_pcr({"conditions": [{"type": kind, "status": "True", "reason": kind}]})
        )
        assert done.terminal == kind
        assert done.stub_pkcs10 is None and done.pkix_public_key is None
        assert (done.key, done.pod_key, done.pod_uid) == (pending.key, pending.pod_key, "pod-uid")
