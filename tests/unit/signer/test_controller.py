"""`SignerController.sync` decisions with seeded caches and a recording fake client.

No server: the caches are dicts, the client records every request and answers from a
table, and the assertions are on the API actions (`sample-controller` style), the events,
the index and the metrics.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import logging
import time
import uuid
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from prometheus_client import CollectorRegistry

from controlplane.kubelet import pcr_manifest
from kube.client import ApiError
from kube.controller import Requeue, SyncFailed
from kube.events import ObjectRef
from kube.types import JSON
from signer.controller import Caches, SignerController
from signer.records import PCRRecord, PodRecord, ServiceRecord, pcr_record, pod_record
from tests.unit import pki
from tests.unit.fakes import FakeCache, FakeRecorder
from tests.unit.signer.helpers import FakeMaterialSource
from trust.ca import CertificateAuthority, generate_ca

SIGNER = "kubernetes.io/service-serving"
KUBELET_KEY_TYPES = (
    "RSA3072",
    "RSA4096",
    "ECDSAP256",
    "ECDSAP384",
    "ECDSAP521",
    "ED25519",
    "MLDSA44",
    "MLDSA65",
    "MLDSA87",
)
NS = "team-a"


# fakes -------------------------------------------------------------------------------------


class FakeClient:
    """Records requests; GETs answer from `objects` (404 otherwise); PATCH answers are
    scripted per path (an ApiError is raised, anything else returned)."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}
        self.patch_results: dict[str, list[Any]] = {}
        self.actions: list[tuple[str, str, Any]] = []

    def get(self, path: str, params: Any = None) -> JSON:
        self.actions.append(("GET", path, None))
        if path in self.objects:
            return self.objects[path]
        raise ApiError(404, "Not Found", {"reason": "NotFound"})

    def patch(self, path: str, body: Any, **_: Any) -> JSON:
        self.actions.append(("PATCH", path, body))
        scripted = self.patch_results.get(path)
        if scripted:
            result = scripted.pop(0)
            if isinstance(result, ApiError):
                raise result
            return dict(result)
        return dict(body)

    def writes(self) -> list[tuple[str, str, Any]]:
        return [a for a in self.actions if a[0] != "GET"]


class Harness:
    def __init__(self, version: str = "v1", **controller_options: Any) -> None:
        self.client = FakeClient()
        self.recorder = FakeRecorder()
        self.registry = CollectorRegistry()
        self.source = FakeMaterialSource(pki.ca())
        self.pcrs: FakeCache[PCRRecord] = FakeCache()
        self.pods: FakeCache[PodRecord] = FakeCache()
        self.services: FakeCache[ServiceRecord] = FakeCache()
        self.controller = SignerController(
            self.client,  # type: ignore[arg-type]
            Caches(self.pcrs, self.pods, self.services),
            self.source,
            signer_name=SIGNER,
            domain="cluster.local",
            pcr_version=version,
            workers=1,
            registry=self.registry,
            recorder=self.recorder,
            **controller_options,
        )
        self.version = version

    # seeding

    def pod(
        self,
        name: str = "web-0",
        *,
        labels: dict[str, str] | None = None,
        hostname: str | None = None,
        subdomain: str | None = None,
        cached: bool = True,
        live: bool = False,
        deleting: bool = False,
        node_name: str = "node-1",
    ) -> JSON:
        obj: JSON = {
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": str(uuid.uuid4()),
                "labels": labels if labels is not None else {"app": "web"},
            },
            "spec": {"nodeName": node_name, "serviceAccountName": "default"},
        }
        if hostname:
            obj["spec"]["hostname"] = hostname
        if subdomain:
            obj["spec"]["subdomain"] = subdomain
        if deleting:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        if cached:
            self.pods[f"{NS}/{name}"] = pod_record(obj)
        if live:
            self.client.objects[f"/api/v1/namespaces/{NS}/pods/{name}"] = obj
        return obj

    def service(
        self,
        name: str = "web",
        *,
        selector: dict[str, str] | None = None,
        cluster_ip: str = "10.0.0.10",
        type_: str = "ClusterIP",
        cached: bool = True,
        live: bool = False,
    ) -> ServiceRecord:
        record = ServiceRecord(
            NS,
            name,
            selector if selector is not None else {"app": "web"},
            type_,
            cluster_ip,
        )
        if cached:
            self.services[record.key] = record
        if live:
            self.client.objects[f"/api/v1/namespaces/{NS}/services/{name}"] = {
                "metadata": {"name": name, "namespace": NS},
                "spec": {
                    "selector": dict(record.selector),
                    "type": type_,
                    "clusterIP": cluster_ip,
                },
            }
        return record

    def pcr(
        self,
        pod: JSON,
        annotations: dict[str, str] | None = None,
        *,
        key_type: str = "ECDSAP256",
        name: str = "req-1",
        legacy_pkix: bool = False,
        stub: bytes | None = None,
        status: JSON | None = None,
        spec: JSON | None = None,
    ) -> PCRRecord:
        body = pcr_manifest(
            pod,
            pki.leaf_key(key_type),
            signer_name=SIGNER,
            annotations=annotations
            if annotations is not None
            else {"kubernetes.io/service-names": "web"},
            version=self.version,
            legacy_pkix=legacy_pkix,
            stub=stub,
        )
        body["metadata"].update(
            name=name,
            uid=str(uuid.uuid4()),
            resourceVersion="42",
            creationTimestamp=(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=3)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        )
        body["spec"].update(spec or {})
        if status:
            body["status"] = status
        record = pcr_record(body)
        self.pcrs[record.key] = record
        return record

    # reading results

    def status_path(self, name: str = "req-1") -> str:
        return (
            f"/apis/certificates.k8s.io/{self.version}/namespaces/{NS}"
            f"/podcertificaterequests/{name}/status"
        )

    def written_status(self) -> JSON:
        writes = self.client.writes()
        assert len(writes) == 1, writes
        method, path, body = writes[0]
        assert (method, path) == ("PATCH", self.status_path())
        assert body["metadata"] == {"resourceVersion": "42"}
        status: JSON = body["status"]
        return status

    def count(self, result: str) -> float:
        return self.controller.metrics.count(result)

    def errors(self) -> float:
        """Sync attempts that failed and will be retried: the KEP's
        `requests_total{result="error"}`, which always equals what the controller loop
        counts for every controller, `controller_sync_total{controller="signer",
        result="error"}`."""
        loop = self.registry.get_sample_value(
            "controller_sync_total", {"controller": "signer", "result": "error"}
        )
        assert self.count("error") == float(loop or 0.0)
        return self.count("error")

    def denied(self, reason: str) -> float:
        value = self.registry.get_sample_value(
            "service_serving_ca_controller_denied_total", {"reason": reason}
        )
        return float(value or 0.0)

    def gauge(self, name: str) -> float:
        value = self.registry.get_sample_value(f"service_serving_ca_controller_{name}")
        return float(value or 0.0)


@pytest.fixture
def h() -> Harness:
    return Harness()


def leaf_of(status: JSON) -> x509.Certificate:
    return x509.load_pem_x509_certificates(status["certificateChain"].encode())[0]


def dns_names(cert: x509.Certificate) -> list[str]:
    return cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)


# issuing ------------------------------------------------------------------------------------


def test_issues_when_the_named_service_selects_the_pod(h: Harness) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)

    assert h.controller.sync(pcr.key) is None

    status = h.written_status()
    [condition] = status["conditions"]
    assert condition["type"] == "Issued"
    assert condition["status"] == "True"
    assert condition["reason"] == "Issued"
    assert condition["lastTransitionTime"].endswith("Z")
    leaf = leaf_of(status)
    assert dns_names(leaf) == [f"web.{NS}.svc.cluster.local", f"web.{NS}.svc"]
    assert status["notBefore"] == leaf.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert status["notAfter"] == leaf.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "beginRefreshAt" in status
    ekus = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(ekus) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert h.count("issued") == 1
    assert h.count("failed") == 0
    assert h.errors() == 0
    assert (
        h.registry.get_sample_value("service_serving_ca_controller_issuance_duration_seconds_count")
        == 1.0
    )
    assert not h.controller.index.is_waiting(pcr.key)
    assert h.recorder.warnings == []


@pytest.mark.parametrize("key_type", ["MLDSA44", "MLDSA65", "MLDSA87"])
def test_an_mldsa_request_is_issued_for_its_key_and_counted_by_key_type(
    h: Harness, key_type: str
) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod, key_type=key_type)

    h.controller.sync(pcr.key)

    status = h.written_status()
    assert status["conditions"][0]["type"] == "Issued"
    leaf = leaf_of(status)
    assert leaf.public_key() == pki.leaf_key(key_type).public_key()
    assert leaf.signature_algorithm_oid == x509.SignatureAlgorithmOID.ECDSA_WITH_SHA256
    by_type = {
        kind: h.registry.get_sample_value(
            "service_serving_ca_controller_issued_total", {"key_type": kind}
        )
        for kind in KUBELET_KEY_TYPES
    }
    assert by_type == {kind: 1.0 if kind == key_type else 0.0 for kind in KUBELET_KEY_TYPES}


def test_the_kep_opt_ins_give_the_pod_subject_and_the_cluster_ip_sans() -> None:
    h = Harness(pod_identity_subject=True, cluster_ip_sans=True)
    pod = h.pod()
    h.service(cluster_ip="10.96.7.7")
    pcr = h.pcr(pod)

    h.controller.sync(pcr.key)

    status = h.written_status()
    leaf = leaf_of(status)
    subject = {a.oid: a.value for a in leaf.subject}
    assert subject == {
        x509.NameOID.COMMON_NAME: pod["metadata"]["name"],
        x509.NameOID.ORGANIZATION_NAME: NS,
        x509.NameOID.USER_ID: pod["metadata"]["uid"],
    }
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert not san.critical  # RFC 5280 §4.2.1.6: the subject is not empty
    assert [str(ip) for ip in san.value.get_values_for_type(x509.IPAddress)] == ["10.96.7.7"]
    assert status["conditions"][0]["message"].endswith(", 10.96.7.7")


def test_without_the_opt_ins_the_subject_is_empty_and_there_is_no_ip(h: Harness) -> None:
    pod = h.pod()
    h.service(cluster_ip="10.96.7.7")
    h.controller.sync(h.pcr(pod).key)

    leaf = leaf_of(h.written_status())
    assert len(leaf.subject) == 0
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.critical
    assert san.value.get_values_for_type(x509.IPAddress) == []


def test_reads_caches_only_when_everything_is_cached(h: Harness) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)
    h.controller.sync(pcr.key)
    assert [a[0] for a in h.client.actions] == ["PATCH"]


def test_service_absent_from_cache_is_looked_up_live_once(h: Harness) -> None:
    pod = h.pod()
    h.service(cached=False, live=True)
    pcr = h.pcr(pod)

    h.controller.sync(pcr.key)

    gets = [a[1] for a in h.client.actions if a[0] == "GET"]
    assert gets == [f"/api/v1/namespaces/{NS}/services/web"]
    assert h.written_status()["conditions"][0]["type"] == "Issued"


def test_pod_fqdn_and_services_in_spec_order_deduplicated(h: Harness) -> None:
    pod = h.pod(hostname="web-0", subdomain="peers")
    h.service("peers", cluster_ip="None")
    h.service("web")
    pcr = h.pcr(
        pod,
        {"kubernetes.io/service-names": "web,peers,web", "kubernetes.io/add-pod-fqdn": "true"},
    )

    h.controller.sync(pcr.key)

    assert dns_names(leaf_of(h.written_status())) == [
        f"web.{NS}.svc.cluster.local",
        f"web.{NS}.svc",
        f"peers.{NS}.svc.cluster.local",
        f"peers.{NS}.svc",
        f"web-0.peers.{NS}.svc.cluster.local",
        f"web-0.peers.{NS}.svc",
    ]


def test_legacy_pkix_public_key_on_v1beta1_is_issued() -> None:
    h = Harness("v1beta1")
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod, legacy_pkix=True)
    assert pcr.stub_pkcs10 is None and pcr.pkix_public_key is not None

    h.controller.sync(pcr.key)

    leaf = leaf_of(h.written_status())
    assert leaf.public_key() == pki.leaf_key("ECDSAP256").public_key()


V1BETA1_REQ_1 = f"/apis/certificates.k8s.io/v1beta1/namespaces/{NS}/podcertificaterequests/req-1"


def legacy_request_in_its_v1_view(h: Harness) -> PCRRecord:
    """A request made through v1beta1 with a pkixPublicKey, cached as v1 shows it: no key."""
    pod = h.pod()
    h.service()
    legacy = h.pcr(pod, legacy_pkix=True)
    h.pcrs[legacy.key] = dataclasses.replace(legacy, pkix_public_key=None)
    return legacy


def test_v1_request_hiding_a_legacy_pkix_key_is_read_through_v1beta1(h: Harness) -> None:
    legacy = legacy_request_in_its_v1_view(h)
    assert legacy.pkix_public_key is not None
    h.client.objects[V1BETA1_REQ_1] = {
        "spec": {"pkixPublicKey": base64.b64encode(legacy.pkix_public_key).decode()}
    }

    h.controller.sync(legacy.key)

    assert ("GET", V1BETA1_REQ_1, None) in h.client.actions
    leaf = leaf_of(h.written_status())
    assert leaf.public_key() == pki.leaf_key("ECDSAP256").public_key()


def test_legacy_key_is_read_even_when_another_replica_has_just_finished_the_request(
    h: Harness,
) -> None:
    # Our cache still holds it pending; the v1beta1 read already sees it Issued. The key
    # must come from that object all the same (a record of a finished request keeps no
    # key material): denying "no key" here would be a wrong decision, not a lost race.
    legacy = legacy_request_in_its_v1_view(h)
    assert legacy.pkix_public_key is not None
    h.client.objects[V1BETA1_REQ_1] = {
        "spec": {"pkixPublicKey": base64.b64encode(legacy.pkix_public_key).decode()},
        "status": {"conditions": [{"type": "Issued", "status": "True", "reason": "Issued"}]},
    }

    h.controller.sync(legacy.key)

    assert h.written_status()["conditions"][0]["type"] == "Issued"


# waiting -------------------------------------------------------------------------------------


def test_waits_with_an_event_when_the_service_is_missing(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)

    assert h.controller.sync(pcr.key) is None

    assert h.client.writes() == []
    [warning] = h.recorder.warnings
    assert warning.reason == "ServiceNotFound"
    assert warning.regarding.kind == "Pod" and warning.regarding.name == "web-0"
    assert "'web'" in warning.note and pcr.key in warning.note
    assert warning.related is not None and warning.related.name == pcr.name
    assert h.controller.index.waiting_on_service(f"{NS}/web") == {pcr.key}
    assert h.controller.index.waiting_on_pod(f"{NS}/web-0") == {pcr.key}
    assert h.gauge("pending_requests") == 1
    assert h.gauge("oldest_pending_seconds") >= 2
    assert (h.count("issued"), h.count("failed"), h.errors()) == (0, 0, 0)


def test_waits_on_each_failing_service_and_only_those(h: Harness) -> None:
    pod = h.pod()
    h.service("web")
    pcr = h.pcr(pod, {"kubernetes.io/service-names": "web,api,metrics"})

    h.controller.sync(pcr.key)

    assert h.controller.index.services_of(pcr.key) == {f"{NS}/api", f"{NS}/metrics"}
    assert h.recorder.reasons() == ["ServiceNotFound", "ServiceNotFound"]


def test_a_service_appearing_while_deciding_re_drives_the_request(h: Harness) -> None:
    """The Service event came after our cache read but before we entered the index."""
    pod = h.pod()
    pcr = h.pcr(pod)
    late = ServiceRecord(NS, "web", {"app": "web"})

    def service_added() -> None:  # after the decision's read; no handler: nobody waits yet
        h.services[late.key] = late

    h.services.after[late.key] = service_added
    h.controller.sync(pcr.key)

    assert h.controller.index.is_waiting(pcr.key)
    assert len(h.controller.queue) == 1


def test_service_event_enqueues_exactly_its_waiters(h: Harness) -> None:
    index = h.controller.index
    index.wait(f"{NS}/req-a", f"{NS}/pod-a", [f"{NS}/web"])
    index.wait(f"{NS}/req-b", f"{NS}/pod-b", [f"{NS}/api"])

    h.controller._on_service(ServiceRecord(NS, "web", {"app": "web"}))

    assert h.controller.queue.get() == (f"{NS}/req-a", False)
    assert len(h.controller.queue) == 0


def test_pod_label_change_enqueues_its_waiters_and_other_updates_do_not(h: Harness) -> None:
    h.controller.index.wait(f"{NS}/req-a", f"{NS}/web-0", [f"{NS}/web"])
    old = PodRecord(NS, "web-0", "u1", {"app": "x"})

    h.controller._on_pod_update(old, dataclasses.replace(old, node_name="n2"))
    assert len(h.controller.queue) == 0
    h.controller._on_pod_update(old, dataclasses.replace(old, labels={"app": "web"}))
    assert len(h.controller.queue) == 1


def test_deleted_or_terminal_request_leaves_the_index(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)
    h.controller.sync(pcr.key)
    assert h.controller.index.is_waiting(pcr.key)

    h.controller._on_pcr_delete(pcr)
    assert h.controller.index.sizes() == (0, 0, 0)

    h.controller.sync(pcr.key)
    h.controller._on_pcr_update(pcr, dataclasses.replace(pcr, terminal="Issued"))
    assert h.controller.index.sizes() == (0, 0, 0)


def test_waiting_request_issues_after_the_service_appears(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)
    h.controller.sync(pcr.key)
    h.service()

    h.controller.sync(pcr.key)

    assert h.written_status()["conditions"][0]["type"] == "Issued"
    assert h.controller.index.sizes() == (0, 0, 0)
    assert h.gauge("pending_requests") == 0


# final decisions ----------------------------------------------------------------------------


def test_a_denial_is_written_once_as_the_only_condition_and_counted(h: Harness) -> None:
    """The rules themselves are tables against `signer.decide` (test_decide.py); here,
    what the controller does with a final decision."""
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod, {"kubernetes.io/service-names": "Web"})

    assert h.controller.sync(pcr.key) is None

    status = h.written_status()
    assert set(status) == {"conditions"}
    [condition] = status["conditions"]
    reason = "InvalidUnverifiedUserAnnotations"
    assert (condition["type"], condition["reason"]) == ("Denied", reason)
    assert "uppercase" in condition["message"]
    assert h.count("failed") == 1
    assert h.denied(reason) == 1
    assert not h.controller.index.is_waiting(pcr.key)


def test_missing_pod_fails_after_one_live_lookup(h: Harness) -> None:
    pod = h.pod(cached=False)
    h.service()
    pcr = h.pcr(pod)

    h.controller.sync(pcr.key)

    gets = [a[1] for a in h.client.actions if a[0] == "GET"]
    assert gets == [f"/api/v1/namespaces/{NS}/pods/web-0"]
    condition = h.written_status()["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("Failed", "PodNotFound")
    assert h.denied("PodNotFound") == 1


def test_stale_pod_in_cache_is_confirmed_live_before_a_final_decision(h: Harness) -> None:
    pod = h.pod(live=True)
    stale = h.pods[f"{NS}/web-0"]
    h.pods[stale.key] = dataclasses.replace(stale, node_name="")
    h.service()
    pcr = h.pcr(pod)

    h.controller.sync(pcr.key)

    assert h.written_status()["conditions"][0]["type"] == "Issued"


@pytest.mark.parametrize("terminal", ["Issued", "Denied", "Failed"])
def test_terminal_requests_are_never_rewritten(h: Harness, terminal: str) -> None:
    pod = h.pod()
    h.service()
    status = {
        "conditions": [
            {
                "type": terminal,
                "status": "True",
                "reason": "X",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    pcr = h.pcr(pod, status=status)

    assert h.controller.sync(pcr.key) is None
    assert h.client.actions == []


def test_request_for_another_signer_is_ignored(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod, spec={"signerName": "example.com/other"})
    assert h.controller.sync(pcr.key) is None
    assert h.client.actions == []


# write failures ------------------------------------------------------------------------------


def test_lost_race_to_another_writer_counts_nothing(h: Harness) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)
    h.client.patch_results[h.status_path()] = [ApiError(409, "Conflict", {"reason": "Conflict"})]
    h.client.objects[h.status_path().removesuffix("/status")] = {
        "status": {"conditions": [{"type": "Issued", "status": "True"}]}
    }

    assert h.controller.sync(pcr.key) is None

    assert [a[0] for a in h.client.actions] == ["PATCH", "GET"]
    assert (h.count("issued"), h.count("failed"), h.errors()) == (0, 0, 0)


def test_conflict_on_a_still_pending_request_retries_without_counting_an_error(
    h: Harness,
) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)
    h.client.patch_results[h.status_path()] = [ApiError(409, "Conflict", {"reason": "Conflict"})]
    h.client.objects[h.status_path().removesuffix("/status")] = {"status": {}}

    assert h.controller.sync(pcr.key) == Requeue()
    assert h.errors() == 0


def test_transient_error_retries_after_the_servers_delay_and_counts_an_error(h: Harness) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)
    h.client.patch_results[h.status_path()] = [ApiError(429, "Too Many Requests", None, 7.0)]
    h.controller.queue.add(pcr.key)

    assert h.controller.loop.process_next_work_item()  # the loop's policy, not the sync's
    assert h.controller.queue.get(timeout=0.2) == (None, False)  # parked for the 7 s
    assert h.controller.queue.num_requeues(pcr.key) == 1  # a backoff step; 7 s is the floor
    assert h.errors() == 1
    assert h.count("issued") == 0
    h.controller.queue.shut_down()


def test_request_deleted_before_the_write_is_dropped(h: Harness) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)
    h.client.patch_results[h.status_path()] = [ApiError(404, "Not Found")]

    assert h.controller.sync(pcr.key) is None
    assert (h.count("issued"), h.errors()) == (0, 0)


# signing material ------------------------------------------------------------------------------


def signing_cert_expiring_in_30_minutes(h: Harness) -> tuple[CertificateAuthority, PCRRecord]:
    """Swap in a signing CA with 30 minutes left; a request that would otherwise issue."""
    expiring = generate_ca(
        "expiring",
        not_before=dt.datetime.now(dt.UTC) - dt.timedelta(days=1),
        validity=dt.timedelta(days=1, minutes=30),
    )
    h.source.swap(expiring)
    pod = h.pod()
    h.service()
    return expiring, h.pcr(pod)


def test_signing_cert_expiring_soon_issues_nothing_and_recovers_on_rotation(h: Harness) -> None:
    expiring, pcr = signing_cert_expiring_in_30_minutes(h)

    h.controller.queue.add(pcr.key)
    assert h.controller.loop.process_next_work_item()  # SyncFailed: the loop's error policy

    assert h.client.writes() == []
    assert h.errors() == 1
    assert h.controller.queue.num_requeues(pcr.key) == 1
    assert h.recorder.reasons() == ["SignerCertificateExpiring"]
    assert h.gauge("signer_ttl_seconds") == expiring.cert.not_valid_after_utc.timestamp()

    h.source.swap(pki.ca())
    assert h.controller.queue.get() == (pcr.key, False)
    h.controller.sync(pcr.key)
    assert h.written_status()["conditions"][0]["type"] == "Issued"


def test_a_request_while_no_ca_signs_waits_for_one_without_a_traceback(
    h: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """`ca rotate --emergency`: nothing signs until the new CA is published. A request
    meanwhile waits for material (one line, no traceback) and is issued as soon as a
    signing set arrives, not after a backoff grown to minutes."""
    h.source.material = None
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod)

    h.controller.queue.add(pcr.key)
    with caplog.at_level(logging.WARNING):
        assert h.controller.loop.process_next_work_item()

    assert h.client.writes() == []
    assert [r for r in caplog.records if r.exc_info] == [], "a traceback for a known wait"
    assert any("no confirmed managed CA" in r.getMessage() for r in caplog.records)
    h.source.swap(pki.ca())
    assert h.controller.queue.get() == (pcr.key, False)
    h.controller.sync(pcr.key)
    assert h.written_status()["conditions"][0]["type"] == "Issued"


# worker contract ----------------------------------------------------------------------------------


def test_worker_forgets_on_success_and_backs_off_on_errors(h: Harness) -> None:
    outcomes: list[Any] = [None, Requeue(), RuntimeError("bug")]

    def fake_sync(key: str) -> Requeue | None:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        result: Requeue | None = outcome
        return result

    h.controller.sync = fake_sync  # type: ignore[method-assign]
    queue = h.controller.queue
    queue.add("ns/a")
    assert h.controller.loop.process_next_work_item()
    assert queue.num_requeues("ns/a") == 0
    queue.add("ns/a")
    assert h.controller.loop.process_next_work_item()
    assert queue.num_requeues("ns/a") == 1
    assert queue.get(timeout=5) == ("ns/a", False)
    queue.done("ns/a")
    queue.add("ns/a")
    assert h.controller.loop.process_next_work_item()
    assert queue.num_requeues("ns/a") == 2
    assert h.errors() == 1
    queue.shut_down()


def test_counters_start_at_zero(h: Harness) -> None:
    for result in ("issued", "failed", "error"):
        assert (
            h.registry.get_sample_value(
                "service_serving_ca_controller_requests_total", {"result": result}
            )
            == 0.0
        )
    assert h.errors() == 0.0
    assert h.denied("PodNotFound") == 0.0


def test_expiring_signing_cert_event_note_is_identical_across_retries(h: Harness) -> None:
    """Retries seconds apart must produce the same note, so the recorder aggregates them
    into one Event series instead of one Event per retry."""
    _, pcr = signing_cert_expiring_in_30_minutes(h)
    start = time.time()

    for offset in (0.0, 7.0):
        h.controller._clock = lambda offset=offset: start + offset  # type: ignore[misc]
        with pytest.raises(SyncFailed):
            h.controller.sync(pcr.key)

    first, second = (w.note for w in h.recorder.warnings)
    assert first == second


def test_signer_takes_no_new_request_once_stop_is_set(h: Harness) -> None:
    """SIGTERM or a lost Lease: the queued requests are the next leader's. Before the shared
    loop the workers drained the queue (3,848 of 4,000 queued syncs ran after stop)."""
    import threading

    running = threading.Event()
    release = threading.Event()
    synced: list[str] = []

    def slow_sync(key: str) -> Requeue | None:
        running.set()
        release.wait(10)
        synced.append(key)
        return None

    h.controller.sync = slow_sync  # type: ignore[method-assign]
    h.controller.workers = 1
    h.controller.loop.workers = 1
    for i in range(500):
        h.controller.queue.add(f"{NS}/req-{i}")
    stop = threading.Event()
    thread = threading.Thread(target=h.controller.run, args=(stop,), daemon=True)
    thread.start()
    assert running.wait(5)
    stop.set()
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert synced == [f"{NS}/req-0"]


# events on final decisions ------------------------------------------------


@pytest.mark.parametrize(
    ("condition_type", "reason"),
    [("Denied", "InvalidUnverifiedUserAnnotations"), ("Failed", "PodNotFound")],
)
def test_denied_and_failed_requests_put_a_warning_with_the_reason_on_the_pod(
    h: Harness, condition_type: str, reason: str
) -> None:
    if reason == "PodNotFound":
        pod = h.pod(cached=False)
        pcr = h.pcr(pod)
    else:
        pod = h.pod()
        pcr = h.pcr(pod, {"kubernetes.io/service-names": "web", "example.com/x": "y"})
    h.service()

    h.controller.sync(pcr.key)

    condition = h.written_status()["conditions"][0]
    assert (condition["type"], condition["reason"]) == (condition_type, reason)
    [warning] = h.recorder.warnings
    assert warning.reason == reason
    assert warning.regarding == ObjectRef("Pod", NS, "web-0", pod["metadata"]["uid"])
    assert warning.related is not None and warning.related.name == pcr.name
    assert condition["message"] in warning.note and pcr.key in warning.note


def test_no_warning_when_another_replica_finished_the_request_first(h: Harness) -> None:
    pod = h.pod()
    h.service()
    pcr = h.pcr(pod, {"kubernetes.io/service-names": "Web"})
    h.client.patch_results[h.status_path()] = [ApiError(409, "Conflict")]
    h.client.objects[h.status_path().removesuffix("/status")] = {
        "status": {"conditions": [{"type": "Denied", "status": "True"}]}
    }

    h.controller.sync(pcr.key)

    assert h.recorder.warnings == []


# race windows, made deterministic ----------------------------------


def test_request_deleted_while_its_sync_decides_leaves_no_index_entry(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)

    def cleaner_deletes_it() -> None:  # as the informer does: cache first, then handlers
        del h.pcrs[pcr.key]
        h.controller._on_pcr_delete(pcr)

    h.services.before[f"{NS}/web"] = cleaner_deletes_it
    assert h.controller.sync(pcr.key) is None

    assert h.controller.index.sizes() == (0, 0, 0)
    assert h.gauge("pending_requests") == 0
    assert h.gauge("oldest_pending_seconds") == 0


def test_request_finished_by_another_replica_while_its_sync_decides_leaves_no_index_entry(
    h: Harness,
) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)
    issued = dataclasses.replace(pcr, terminal="Issued", resource_version="43")

    def other_replica_issues_it() -> None:
        h.pcrs[pcr.key] = issued
        h.controller._on_pcr_update(pcr, issued)

    h.services.before[f"{NS}/web"] = other_replica_issues_it
    h.controller.sync(pcr.key)

    assert h.controller.index.sizes() == (0, 0, 0)
    assert h.gauge("pending_requests") == 0


def test_request_still_cached_after_the_decision_stays_in_the_index(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)
    updated = dataclasses.replace(pcr, resource_version="43")

    def label_update() -> None:  # not terminal: the request still waits
        h.pcrs[pcr.key] = updated
        h.controller._on_pcr_update(pcr, updated)

    h.services.before[f"{NS}/web"] = label_update
    h.controller.sync(pcr.key)

    assert h.controller.index.is_waiting(pcr.key)


def test_service_added_between_the_two_reads_of_one_decision_re_drives_the_request(
    h: Harness,
) -> None:
    """`service-names: db` and `add-pod-fqdn` with subdomain `db` (the StatefulSet case)
    read Service `db` twice; it is ADDED right after the first read, while nobody waits."""
    pod = h.pod("db-0", labels={"app": "db"}, hostname="db-0", subdomain="db")
    pcr = h.pcr(pod, {"kubernetes.io/service-names": "db", "kubernetes.io/add-pod-fqdn": "true"})
    added = ServiceRecord(NS, "db", {"app": "db"}, "ClusterIP", "None")

    def service_added() -> None:
        h.services[added.key] = added
        h.controller._on_service(added)  # the index is still empty: wakes nobody

    h.services.after[added.key] = service_added
    assert h.controller.sync(pcr.key) is None

    assert h.recorder.reasons() == ["ServiceNotFound"]
    assert h.controller.index.is_waiting(pcr.key)
    assert h.controller.queue.get() == (pcr.key, False)
    h.controller.queue.done(pcr.key)

    h.controller.sync(pcr.key)
    assert h.written_status()["conditions"][0]["type"] == "Issued"
    assert h.controller.index.sizes() == (0, 0, 0)


def test_a_service_named_twice_is_read_once_per_decision(h: Harness) -> None:
    pod = h.pod("db-0", labels={"app": "db"}, hostname="db-0", subdomain="db")
    h.service("db", selector={"app": "db"}, cluster_ip="None", cached=False, live=True)
    pcr = h.pcr(pod, {"kubernetes.io/service-names": "db", "kubernetes.io/add-pod-fqdn": "true"})

    h.controller.sync(pcr.key)

    gets = [a[1] for a in h.client.actions if a[0] == "GET"]
    assert gets == [f"/api/v1/namespaces/{NS}/services/db"]
    assert h.written_status()["conditions"][0]["type"] == "Issued"


# re-drive only on what a decision reads -----------------------------------


def test_service_update_that_changes_nothing_a_decision_reads_enqueues_nobody(
    h: Harness,
) -> None:
    h.controller.index.wait(f"{NS}/req-a", f"{NS}/web-0", [f"{NS}/web"])
    old = ServiceRecord(NS, "web", {"app": "other"}, "ClusterIP", "10.0.0.1")

    # An annotation-only PATCH produces a new, equal record.
    h.controller._on_service_update(
        old, ServiceRecord(NS, "web", {"app": "other"}, "ClusterIP", "10.0.0.1")
    )
    assert len(h.controller.queue) == 0

    for changed in (
        dataclasses.replace(old, selector={"app": "web"}),
        dataclasses.replace(old, type="NodePort"),
        dataclasses.replace(old, cluster_ip="None"),
    ):
        h.controller._on_service_update(old, changed)
        assert h.controller.queue.get() == (f"{NS}/req-a", False)
        h.controller.queue.done(f"{NS}/req-a")


# the periodic resync of waiting requests ----------------------------------


def test_periodic_resync_re_drives_only_the_waiting_requests_and_counts_them() -> None:
    import threading

    h = Harness(waiting_resync_period=0.05)
    waiting = h.pcr(h.pod(), name="req-1")
    h.controller.sync(waiting.key)
    assert h.controller.index.is_waiting(waiting.key)
    synced: list[str] = []
    sync = h.controller.sync

    def recording_sync(key: str) -> Requeue | None:
        synced.append(key)
        return sync(key)

    h.controller.loop._sync = recording_sync
    stop = threading.Event()
    thread = threading.Thread(target=h.controller.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(synced) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert synced[:2] == [waiting.key, waiting.key]
        assert h.gauge("waiting_resyncs_total") >= 2

        h.service()  # a Service whose event we "missed": the next resync issues
        deadline = time.monotonic() + 10
        while h.controller.index.is_waiting(waiting.key) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not h.controller.index.is_waiting(waiting.key)
        assert h.count("issued") == 1
    finally:
        stop.set()
        thread.join(10)


def pod_wait(h: Harness, namespace: str = NS) -> float | None:
    return h.registry.get_sample_value(
        "service_serving_ca_controller_pod_waiting_seconds", {"namespace": namespace}
    )


def test_a_pods_wait_is_counted_across_the_cleaners_replacement_of_its_request(
    h: Harness,
) -> None:
    """The cleaner deletes the waiting request and kubelet makes another; the
    Pod's wait (the pending alert's metric) goes on from the first request's creation,
    where the oldest request's age starts again."""
    pod = h.pod()
    first = h.pcr(pod, name="req-1")
    h.controller.sync(first.key)
    waited = pod_wait(h)
    assert waited is not None and waited >= 2

    del h.pcrs[first.key]
    h.controller._on_pcr_delete(first)  # the cleaner
    assert (pod_wait(h) or 0) >= waited, "still waiting between the two requests"
    second = h.pcr(pod, name="req-2")
    h.controller.sync(second.key)
    assert (pod_wait(h) or 0) >= waited
    assert h.gauge("oldest_pending_seconds") < waited + 1

    h.service()
    h.controller.sync(second.key)
    [(_, path, body)] = h.client.writes()
    assert path == h.status_path("req-2")
    assert body["status"]["conditions"][0]["type"] == "Issued"
    assert pod_wait(h) is None, "an answered Pod no longer waits"
    assert h.controller.metrics.pod_waits.size() == 0


def test_a_deleted_pods_wait_ends_at_once_not_after_the_release_grace(h: Harness) -> None:
    """A Pod deleted while it waits (scaled down, rolled) waits no more: the gauge must not
    go on reporting it, growing, for the grace kept for kubelet's next request."""
    pod = h.pod()
    pcr = h.pcr(pod)
    h.controller.sync(pcr.key)
    assert pod_wait(h) is not None

    h.controller._on_pod_delete(pod_record(pod))
    del h.pcrs[pcr.key]
    h.controller._on_pcr_delete(pcr)  # the garbage collector, after the Pod

    assert pod_wait(h) is None
    assert h.controller.metrics.pod_waits.size() == 0


def test_a_denied_request_ends_its_pods_wait(h: Harness) -> None:
    pod = h.pod()
    pcr = h.pcr(pod)
    h.controller.sync(pcr.key)
    assert pod_wait(h) is not None
    h.controller._on_pcr_update(pcr, dataclasses.replace(pcr, terminal="Denied"))
    assert pod_wait(h) is None


def test_a_second_namespaces_request_is_issued_while_a_storm_in_another_is_still_queued(
    h: Harness,
) -> None:
    """Requests are served round-robin across namespaces: one namespace's 1,000-request
    storm, queued first, delays another namespace's single request by one sync, not by
    the whole storm (the client-side twin of API Priority and Fairness's ByNamespace)."""
    pod = h.pod()
    service = h.service()
    probe = h.pcr(pod, name="probe")
    storm_pod = pod_record({**pod, "metadata": {**pod["metadata"], "namespace": "storm"}})
    h.pods[storm_pod.key] = storm_pod
    storm_service = dataclasses.replace(service, namespace="storm")
    h.services[storm_service.key] = storm_service
    for i in range(1000):
        request = dataclasses.replace(probe, namespace="storm", name=f"req-{i}")
        h.pcrs[request.key] = request
        h.controller._on_pcr_add(request)
    h.controller._on_pcr_add(probe)

    assert h.controller.loop.process_next_work_item()
    assert h.controller.loop.process_next_work_item()

    issued = [path for _, path, _ in h.client.writes()]
    assert issued == [
        "/apis/certificates.k8s.io/v1/namespaces/storm/podcertificaterequests/req-0/status",
        h.status_path("probe"),
    ]
    assert h.count("issued") == 2
    assert len(h.controller.queue) == 999
