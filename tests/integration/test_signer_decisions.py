"""Final decisions against the real API server: every bad input becomes a Denied or
Failed condition with the right reason and a message naming the problem, written once and
never retried."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography import x509

from controlplane.kubelet import generate_key, pcr_manifest, pcr_path, stub_csr
from kube.client import Client
from kube.types import JSON
from tests.integration.signer_harness import (
    RunningSigner,
    condition,
    events_for,
    eventually,
    wait_terminal,
)


@pytest.fixture(scope="module")
def module_client(control_plane: Any) -> Client:
    result: Client = control_plane.client()
    return result


@pytest.fixture(scope="module")
def signer(module_client: Client) -> Iterator[RunningSigner]:
    """One signer for the whole table (each case has its own namespace)."""
    with RunningSigner(module_client) as running:
        yield running


SIXTY_FOUR = "a" * 64
THIRTY_THREE = ",".join(f"s{i}" for i in range(33))

BAD_ANNOTATIONS = [
    ("unknown-key", {"example.com/x": "1", "kubernetes.io/service-names": "web"}, "example.com/x"),
    ("no-recognised-key", {"example.com/x": "1"}, "example.com/x"),
    ("fqdn-not-true", {"kubernetes.io/add-pod-fqdn": "True"}, "'True'"),
    ("empty-entry", {"kubernetes.io/service-names": "web,,api"}, "empty"),
    ("dotted-entry", {"kubernetes.io/service-names": "web.other"}, "dot"),
    ("namespaced-entry", {"kubernetes.io/service-names": "other/web"}, "namespace"),
    ("uppercase", {"kubernetes.io/service-names": "Web"}, "uppercase"),
    ("too-long", {"kubernetes.io/service-names": SIXTY_FOUR}, "63"),
    ("too-many", {"kubernetes.io/service-names": THIRTY_THREE}, "32"),
]


@pytest.mark.parametrize(
    ("annotations", "in_message"),
    [case[1:] for case in BAD_ANNOTATIONS],
    ids=[case[0] for case in BAD_ANNOTATIONS],
)
def test_bad_annotations_are_denied_with_a_message_naming_the_problem(
    signer: RunningSigner,
    client: Client,
    namespace: str,
    annotations: dict[str, str],
    in_message: str,
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    signer.kubelet.create_service("web", namespace, selector={"app": "web"})
    created, _ = signer.kubelet.create_pcr(pod, annotations=annotations)

    stored = wait_terminal(client, created)

    got = condition(stored)
    assert (got["type"], got["reason"]) == ("Denied", "InvalidUnverifiedUserAnnotations")
    assert in_message in got["message"]
    assert set(stored["status"]) == {"conditions"}


def test_non_empty_stub_csr_is_denied(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    key = generate_key("ECDSAP256")
    created, _ = signer.kubelet.create_pcr(
        pod,
        key=key,
        annotations={"kubernetes.io/service-names": "web"},
        stub=stub_csr(key, subject_cn="web"),
    )

    got = condition(wait_terminal(client, created))
    assert (got["type"], got["reason"]) == ("Denied", "InvalidStubPKCS10Request")
    assert "subject" in got["message"]


def test_request_for_a_pod_that_does_not_exist_fails(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    client.delete(f"/api/v1/namespaces/{namespace}/pods/web-0", params={"gracePeriodSeconds": 0})
    created, _ = signer.kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "web"})

    got = condition(wait_terminal(client, created))
    assert (got["type"], got["reason"]) == ("Failed", "PodNotFound")


def create_raw_pcr(client: Client, pod: JSON, signer_name: str, **spec: str) -> JSON:
    body = pcr_manifest(
        pod,
        generate_key("ECDSAP256"),
        signer_name=signer_name,
        annotations={"kubernetes.io/service-names": "web"},
    )
    body["spec"].update(spec)
    result: JSON = client.create(pcr_path(pod["metadata"]["namespace"]), body)
    return result


def test_request_with_another_pod_uid_fails(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created = create_raw_pcr(client, pod, signer.signer_name, podUID=str(uuid.uuid4()))

    got = condition(wait_terminal(client, created))
    assert (got["type"], got["reason"]) == ("Failed", "PodNotFound")


@pytest.mark.parametrize(
    ("field", "value"),
    [("nodeName", "node-2"), ("serviceAccountName", "intruder")],
)
def test_node_or_service_account_mismatch_is_denied(
    signer: RunningSigner, client: Client, namespace: str, field: str, value: str
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created = create_raw_pcr(client, pod, signer.signer_name, **{field: value})

    got = condition(wait_terminal(client, created))
    assert (got["type"], got["reason"]) == ("Denied", "PodMismatch")
    assert value in got["message"]


def test_denied_requests_are_never_retried_or_rewritten(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = signer.kubelet.create_pcr(pod, annotations={"example.com/x": "1"})
    stored = wait_terminal(client, created)
    version = stored["metadata"]["resourceVersion"]
    errors = signer.errors()

    # Touch the request: the update event reaches the signer, which must leave it alone.
    client.patch(
        pcr_path(namespace, "v1", created["metadata"]["name"]),
        {"metadata": {"labels": {"touched": "yes"}}},
    )
    time.sleep(1.5)

    after = client.get(pcr_path(namespace, "v1", created["metadata"]["name"]))
    assert after["status"] == stored["status"]
    assert int(after["metadata"]["resourceVersion"]) > int(version)
    assert after["metadata"]["labels"] == {"touched": "yes"}
    assert signer.errors() == errors


def test_denied_request_puts_a_warning_event_with_the_reason_on_the_pod(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    # Kubelet 1.37's own Denied Event garbles its message; ours says what to fix.
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    created, _ = signer.kubelet.create_pcr(
        pod, annotations={"kubernetes.io/service-names": "web.other"}
    )
    got = condition(wait_terminal(client, created))
    assert (got["type"], got["reason"]) == ("Denied", "InvalidUnverifiedUserAnnotations")

    [event] = eventually(
        lambda: events_for(client, namespace, reason="InvalidUnverifiedUserAnnotations"),
        what="Denied event",
    )
    assert event["type"] == "Warning"
    assert event["reportingController"] == "service-serving-signer"
    assert event["regarding"]["kind"] == "Pod" and event["regarding"]["name"] == "web-0"
    assert event["regarding"]["uid"] == pod["metadata"]["uid"]
    assert event["related"]["name"] == created["metadata"]["name"]
    assert got["message"] in event["note"]
    assert "%!" not in event["note"]


def test_failed_request_puts_a_warning_event_with_the_reason_on_the_pod(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    signer.kubelet.create_service("web", namespace, selector={"app": "web"})
    created = create_raw_pcr(client, pod, signer.signer_name, podUID=str(uuid.uuid4()))
    got = condition(wait_terminal(client, created))
    assert (got["type"], got["reason"]) == ("Failed", "PodNotFound")

    [event] = eventually(
        lambda: events_for(client, namespace, reason="PodNotFound"), what="Failed event"
    )
    assert event["type"] == "Warning"
    assert event["regarding"]["name"] == "web-0"
    assert got["message"] in event["note"]


def test_service_name_starting_with_a_digit_is_issued(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    # RelaxedServiceNameValidation (GA, locked on in 1.37): a Service may be named `1api`.
    pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
    signer.kubelet.create_service("1api", namespace, selector={"app": "web"})
    created, _ = signer.kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "1api"})

    stored = wait_terminal(client, created)

    assert condition(stored)["type"] == "Issued", condition(stored)
    leaf = x509.load_pem_x509_certificates(stored["status"]["certificateChain"].encode())[0]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        f"1api.{namespace}.svc.cluster.local",
        f"1api.{namespace}.svc",
    ]
