"""`signer.decide.Decider` on its own: built over plain stores (as `explain` builds it),
its steps in order, the live reads it makes only where a cache may lag, and every rule
of docs/reference.md §5.2 as one table (`RULES`). The controller's harness
(test_controller.py) keeps only what needs the controller: writes, Events, the waiting
index, metrics, races."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from controlplane.kubelet import pcr_manifest, stub_csr
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


# the rules, as a table (docs/reference.md §5.2) --------------------------------------------
#
# Each row: the request's annotations, the Pod and Services the stores hold, what is
# changed on the request, and the outcome. A live read finds the Pod unless the row says
# otherwise, and no Service: a Service absent from the store is absent.

WEB = ServiceRecord(NS, "web", {"app": "web"}, "ClusterIP", "10.96.0.10")
API = ServiceRecord(NS, "api", {"app": "web"}, "ClusterIP", "10.96.0.11")
PEERS = ServiceRecord(NS, "peers", {"app": "web"}, "ClusterIP", "None")
NAMES = "kubernetes.io/service-names"
FQDN = "kubernetes.io/add-pod-fqdn"


@dataclasses.dataclass(frozen=True)
class Rule:
    annotations: dict[str, str]
    outcome: str  # "Sign", "Wait", "Denied" or "Failed"
    reason: str = ""  # a Terminal's reason, or the Wait's blocker reasons joined by "+"
    in_message: str = ""  # a piece of the Terminal's message, or the Sign's DNS names
    services: tuple[ServiceRecord, ...] = (WEB,)
    pod: dict[str, Any] = dataclasses.field(default_factory=dict)  # Pod spec fields
    labels: dict[str, str] = dataclasses.field(default_factory=lambda: {"app": "web"})
    deleting: bool = False
    cached_pod: bool = True
    live_pod: bool = True  # a live read of the Pod finds it
    change: dict[str, Any] = dataclasses.field(default_factory=dict)  # PCRRecord fields
    key: str = "ECDSAP256"
    stub_subject: str | None = None


def stub_with_subject(key_type: str, subject: str | None) -> bytes:
    return stub_csr(pki.leaf_key(key_type), subject_cn=subject)


RULES: dict[str, Rule] = {
    # step 1: annotations
    "other-annotation": Rule(
        {"example.com/x": "1"}, "Denied", "InvalidUnverifiedUserAnnotations", "example.com/x"
    ),
    "no-annotation": Rule({}, "Denied", "InvalidUnverifiedUserAnnotations", "at least one"),
    "fqdn-not-true": Rule({FQDN: "yes"}, "Denied", "InvalidUnverifiedUserAnnotations", "'yes'"),
    "empty-name": Rule({NAMES: "web,,api"}, "Denied", "InvalidUnverifiedUserAnnotations", "empty"),
    "dotted-name": Rule({NAMES: "web.team-a"}, "Denied", "InvalidUnverifiedUserAnnotations", "dot"),
    "namespaced-name": Rule(
        {NAMES: "team-a/web"}, "Denied", "InvalidUnverifiedUserAnnotations", "web"
    ),
    "uppercase-name": Rule(
        {NAMES: "Web"}, "Denied", "InvalidUnverifiedUserAnnotations", "uppercase"
    ),
    # step 2: public key
    "stub-with-a-subject": Rule(
        {NAMES: "web"}, "Denied", "InvalidStubPKCS10Request", stub_subject="evil"
    ),
    "rsa-2048": Rule({NAMES: "web"}, "Denied", "UnsupportedKeyType", "ECDSAP256", key="RSA2048"),
    "no-key": Rule(
        {NAMES: "web"},
        "Denied",
        "InvalidStubPKCS10Request",
        change={"stub_pkcs10": None, "pkix_public_key": None},
    ),
    # step 3: the Pod
    "pod-missing": Rule({NAMES: "web"}, "Failed", "PodNotFound", cached_pod=False, live_pod=False),
    "pod-other-uid": Rule({NAMES: "web"}, "Failed", "PodNotFound", change={"pod_uid": "u-2"}),
    "other-node": Rule(
        {NAMES: "web"}, "Denied", "PodMismatch", "node-2", change={"node_name": "node-2"}
    ),
    "other-service-account": Rule(
        {NAMES: "web"},
        "Denied",
        "PodMismatch",
        "intruder",
        change={"service_account_name": "intruder"},
    ),
    "pod-terminating": Rule({NAMES: "web"}, "Failed", "PodTerminating", deleting=True),
    "fqdn-without-hostname": Rule(
        {FQDN: "true"}, "Denied", "PodHostnameRequired", "spec.hostname", services=(PEERS,)
    ),
    # steps 4 and 5, waiting (step 6)
    "service-missing": Rule({NAMES: "web"}, "Wait", "ServiceNotFound", services=()),
    "selector-other-value": Rule(
        {NAMES: "web"}, "Wait", "ServiceSelectorMismatch", labels={"app": "api"}
    ),
    "selector-empty": Rule(
        {NAMES: "web"},
        "Wait",
        "ServiceSelectorMismatch",
        services=(dataclasses.replace(WEB, selector={}),),
    ),
    "selector-superset": Rule(
        {NAMES: "web"},
        "Wait",
        "ServiceSelectorMismatch",
        services=(dataclasses.replace(WEB, selector={"app": "web", "tier": "front"}),),
    ),
    "external-name": Rule(
        {NAMES: "web"},
        "Wait",
        "ServiceSelectorMismatch",
        services=(dataclasses.replace(WEB, type="ExternalName"),),
    ),
    "only-the-failing-services": Rule(
        {NAMES: "web,api,metrics"}, "Wait", "ServiceNotFound+ServiceNotFound", services=(WEB,)
    ),
    "subdomain-not-headless": Rule(
        {FQDN: "true"},
        "Wait",
        "ServiceNotHeadless",
        services=(dataclasses.replace(PEERS, cluster_ip="10.0.0.7"),),
        pod={"hostname": "web-0", "subdomain": "peers"},
    ),
    # sign
    "one-service": Rule(
        {NAMES: "web"}, "Sign", in_message=f"web.{NS}.svc.cluster.local,web.{NS}.svc"
    ),
    "services-in-order-deduplicated-then-the-fqdn": Rule(
        {NAMES: "api,web,api", FQDN: "true"},
        "Sign",
        in_message=(
            f"api.{NS}.svc.cluster.local,api.{NS}.svc,web.{NS}.svc.cluster.local,web.{NS}.svc,"
            f"web-0.peers.{NS}.svc.cluster.local,web-0.peers.{NS}.svc"
        ),
        services=(WEB, API, PEERS),
        pod={"hostname": "web-0", "subdomain": "peers"},
    ),
}


@pytest.mark.parametrize("rule", RULES.values(), ids=RULES.keys())
def test_each_rule_of_reference_section_5_2(rule: Rule) -> None:
    obj = pod_object(**rule.pod)
    obj["metadata"]["labels"] = rule.labels
    if rule.deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-12-04T00:00:00Z"
    pod = pod_record(obj)
    body = pcr_manifest(
        obj,
        pki.leaf_key(rule.key),
        signer_name=SIGNER,
        annotations=rule.annotations,
        stub=stub_with_subject(rule.key, rule.stub_subject) if rule.stub_subject else None,
    )
    body["metadata"].update(name="req-1", uid="u-1", resourceVersion="1")
    pcr = dataclasses.replace(pcr_record(body), **rule.change)
    pods = {pod.key: pod} if rule.cached_pod else {}
    lookups = RecordingLookups()
    if rule.live_pod:
        lookups.pods[pod.key] = pod

    decision = decider(pods, {s.key: s for s in rule.services}, lookups).decide(pcr)

    match decision:
        case Terminal():
            got = (decision.condition, decision.reason)
            assert rule.in_message in decision.message
        case Wait():
            got = ("Wait", "+".join(b.reason for b in decision.blockers))
        case Sign():
            got = ("Sign", "")
            assert ",".join(decision.dns_names) == rule.in_message
    assert got == (rule.outcome, rule.reason)
