"""`signer.decide.Decider` on its own: built over plain stores (as `explain` builds it),
its steps in order, and the live reads it makes only where a cache may lag."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from controlplane.kubelet import pcr_manifest
from signer.decide import Decider, Sign, Terminal, Wait
from signer.records import PCRRecord, PodRecord, ServiceRecord, pcr_record, pod_record
from tests.unit import pki

NS = "team-a"
SIGNER = "kubernetes.io/service-serving"


class RecordingLookups:
    """`signer.decide.Lookups` answering from dicts, recording every read."""

    def __init__(self, *, legacy_key: bytes | None = None) -> None:
        self.pods: dict[str, PodRecord] = {}
        self.services: dict[str, ServiceRecord] = {}
        self.legacy_key = legacy_key
        self.reads: list[tuple[str, str]] = []

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        self.reads.append(("pod", f"{namespace}/{name}"))
        return self.pods.get(f"{namespace}/{name}")

    def service(self, namespace: str, name: str) -> ServiceRecord | None:
        self.reads.append(("service", f"{namespace}/{name}"))
        return self.services.get(f"{namespace}/{name}")

    def legacy_pkix_key(self, namespace: str, name: str) -> bytes | str | None:
        self.reads.append(("legacy", f"{namespace}/{name}"))
        return self.legacy_key


def pod_object(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-0", "namespace": NS, "uid": str(uuid.uuid4())},
        "spec": {"nodeName": "node-1", "serviceAccountName": "default", **spec},
    }


def request(pod: dict[str, Any], annotations: dict[str, str], **kw: Any) -> PCRRecord:
    body = pcr_manifest(
        pod, pki.leaf_key("ECDSAP256"), signer_name=SIGNER, annotations=annotations, **kw
    )
    body["metadata"].update(name="req-1", uid="u-1", resourceVersion="1")
    return pcr_record(body)


def decider(
    pods: dict[str, PodRecord],
    services: dict[str, ServiceRecord],
    lookups: RecordingLookups,
    pcr_version: str = "v1",
) -> Decider:
    return Decider(pods, services, lookups, domain="cluster.local", pcr_version=pcr_version)


def test_decides_over_plain_stores_with_no_controller_around_it() -> None:
    obj = pod_object()
    obj["metadata"]["labels"] = {"app": "web"}
    pod = pod_record(obj)
    web = ServiceRecord(NS, "web", {"app": "web"})
    lookups = RecordingLookups()

    decision = decider({pod.key: pod}, {web.key: web}, lookups).decide(
        request(obj, {"kubernetes.io/service-names": "web"})
    )

    assert isinstance(decision, Sign)
    assert decision.dns_names == (f"web.{NS}.svc.cluster.local", f"web.{NS}.svc")
    assert lookups.reads == []  # everything came from the stores


def test_the_legacy_key_is_read_before_anything_is_parsed() -> None:
    """Step 1 comes first, so the rest of the decision is a function of what the request
    holds: a denial of its annotations is made with its key already read."""
    obj = pod_object()
    pod = pod_record(obj)
    legacy = request(obj, {"kubernetes.io/service-names": "Not A Name"}, legacy_pkix=True)
    assert legacy.pkix_public_key is not None
    lookups = RecordingLookups(legacy_key=legacy.pkix_public_key)
    v1_view = dataclasses.replace(legacy, pkix_public_key=None)

    decision = decider({pod.key: pod}, {}, lookups).decide(v1_view)

    assert isinstance(decision, Terminal)
    assert (decision.condition, decision.reason) == ("Denied", "InvalidUnverifiedUserAnnotations")
    assert lookups.reads == [("legacy", f"{NS}/req-1")]


def test_the_legacy_key_read_is_made_only_by_a_v1_signer_for_a_request_without_a_key() -> None:
    """The extra GET costs nothing on the ordinary path: a request with a stub CSR (v1 or
    v1beta1) and any request a v1beta1 signer sees (its view hides no key) decide
    without it."""
    obj = pod_object()
    pod = pod_record(obj)
    annotations = {"kubernetes.io/service-names": "Not A Name"}
    with_stub = request(obj, annotations)
    legacy = request(obj, annotations, legacy_pkix=True)
    without_key = dataclasses.replace(legacy, pkix_public_key=None)

    for version, pcr, reads in [
        ("v1", with_stub, []),
        ("v1beta1", with_stub, []),
        ("v1beta1", legacy, []),
        ("v1beta1", without_key, []),
        ("v1", without_key, [("legacy", f"{NS}/req-1")]),
    ]:
        lookups = RecordingLookups()
        decider({pod.key: pod}, {}, lookups, pcr_version=version).decide(pcr)
        assert lookups.reads == reads, (version, pcr)


def test_a_pod_without_hostname_is_denied_before_any_service_is_read() -> None:
    obj = pod_object()
    pod = pod_record(obj)
    lookups = RecordingLookups()

    decision = decider({pod.key: pod}, {}, lookups).decide(
        request(obj, {"kubernetes.io/service-names": "web", "kubernetes.io/add-pod-fqdn": "true"})
    )

    assert isinstance(decision, Terminal)
    assert decision.reason == "PodHostnameRequired"
    assert lookups.reads == []


def test_a_cached_pod_that_disagrees_is_read_live_before_anything_final() -> None:
    obj = pod_object()
    obj["metadata"]["labels"] = {"app": "web"}
    live = pod_record(obj)
    stale = pod_record({**obj, "metadata": {**obj["metadata"], "uid": "an-older-pod"}})
    lookups = RecordingLookups()
    lookups.pods[live.key] = live

    decision = decider({stale.key: stale}, {}, lookups).decide(
        request(obj, {"kubernetes.io/service-names": "web"})
    )

    assert isinstance(decision, Wait)  # not Failed PodNotFound: the live Pod agrees
    assert [b.reason for b in decision.blockers] == ["ServiceNotFound"]
    assert decision.seen_services == {f"{NS}/web": None}
    assert lookups.reads == [("pod", f"{NS}/web-0"), ("service", f"{NS}/web")]


# --cluster-ip-sans (KEP-6283) ------------------------------------------------------------


def test_cluster_ip_sans_are_the_named_services_cluster_ips_and_a_headless_has_none() -> None:
    obj = pod_object(hostname="web-0", subdomain="peers")
    obj["metadata"]["labels"] = {"app": "web"}
    pod = pod_record(obj)
    web = ServiceRecord(NS, "web", {"app": "web"}, "ClusterIP", "10.96.0.10", ("10.96.0.10",))
    dual = ServiceRecord(
        NS, "dual", {"app": "web"}, "LoadBalancer", "10.96.0.11", ("10.96.0.11", "fd00::11")
    )
    peers = ServiceRecord(NS, "peers", {"app": "web"}, "ClusterIP", "None", ("None",))
    services = {s.key: s for s in (web, dual, peers)}
    pcr = request(
        obj,
        {"kubernetes.io/service-names": "web,dual,peers", "kubernetes.io/add-pod-fqdn": "true"},
    )

    with_ips = Decider(
        {pod.key: pod},
        services,
        RecordingLookups(),
        domain="cluster.local",
        pcr_version="v1",
        cluster_ip_sans=True,
    ).decide(pcr)
    without = decider({pod.key: pod}, services, RecordingLookups()).decide(pcr)

    assert isinstance(with_ips, Sign) and isinstance(without, Sign)
    assert with_ips.ip_addresses == ("10.96.0.10", "10.96.0.11", "fd00::11")
    assert without.ip_addresses == ()
    assert with_ips.dns_names == without.dns_names
