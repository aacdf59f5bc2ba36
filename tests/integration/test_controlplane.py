"""The local control plane is a real kube-apiserver that serves the APIs the signer needs,
in both versions, and accepts PodCertificateRequests exactly as kubelet writes them."""

from __future__ import annotations

import base64
import uuid

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from controlplane import ControlPlane
from controlplane.kubelet import KEY_TYPES, Kubelet, pcr_path
from kube.client import ApiError, Client
from kube.pager import peek_continue


def test_apiserver_is_the_pinned_release(control_plane: ControlPlane) -> None:
    assert control_plane.version.startswith("v1.37.")


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_discovery_lists_pcr_and_ctb(client: Client, version: str) -> None:
    resources = client.get(f"/apis/certificates.k8s.io/{version}")["resources"]
    names = {r["name"] for r in resources}
    assert {
        "podcertificaterequests",
        "podcertificaterequests/status",
        "clustertrustbundles",
    } <= names


def test_rbac_is_enforced(control_plane: ControlPlane, client: Client) -> None:
    review = client.create(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": "system:serviceaccount:default:nobody",
                "resourceAttributes": {"verb": "list", "resource": "secrets"},
            },
        },
    )
    assert review["status"]["allowed"] is False


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_kubelet_style_pcr_is_accepted_and_read_back(
    client: Client, kubelet: Kubelet, namespace: str, key_type: str, version: str
) -> None:
    pod = kubelet.create_pod("app", namespace, labels={"app": "web"})
    annotations = {"kubernetes.io/service-names": "web"}
    created, key = kubelet.create_pcr(
        pod, key_type=key_type, annotations=annotations, version=version
    )
    assert created["metadata"]["name"].startswith("req-")
    stored = client.get(pcr_path(namespace, version, created["metadata"]["name"]))
    spec = stored["spec"]
    assert spec["podUID"] == pod["metadata"]["uid"]
    assert spec["unverifiedUserAnnotations"] == annotations
    assert stored["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    csr = x509.load_der_x509_csr(base64.b64decode(spec["stubPKCS10Request"]))
    assert csr.is_signature_valid
    assert len(csr.subject) == 0
    want = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    got = csr.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert got == want
    assert "status" not in stored or not stored["status"].get("conditions")


@pytest.mark.parametrize("key_type", ["ECDSAP256", "ED25519", "RSA3072"])
def test_legacy_pkix_pcr_is_accepted_on_v1beta1(
    client: Client, kubelet: Kubelet, namespace: str, key_type: str
) -> None:
    pod = kubelet.create_pod("legacy", namespace)
    created, _ = kubelet.create_pcr(
        pod,
        key_type=key_type,
        annotations={"kubernetes.io/service-names": "web"},
        version="v1beta1",
        legacy_pkix=True,
    )
    stored = client.get(pcr_path(namespace, "v1beta1", created["metadata"]["name"]))
    assert stored["spec"]["pkixPublicKey"]
    assert not stored["spec"].get("stubPKCS10Request")  # served as null on v1beta1


def test_v1_rejects_a_pcr_without_a_stub_csr(
    client: Client, kubelet: Kubelet, namespace: str
) -> None:
    pod = kubelet.create_pod("nostub", namespace)
    with pytest.raises(ApiError) as err:
        kubelet.create_pcr(pod, annotations={"kubernetes.io/service-names": "x"}, stub=b"junk")
    assert err.value.status == 422


@pytest.mark.parametrize("kind", ["namespaces", "services", "configmaps"])
def test_a_paged_list_names_its_continue_token_at_the_head_of_the_body(
    client: Client, namespace: str, kind: str
) -> None:
    """The informers' paged fallback reads the next page ahead from this head
    (kube/pager.py): if a release reorders a typed list's fields, this fails rather than
    the read-ahead silently turning itself off. Two objects of each kind are made, so a
    list of one has a continue token to find."""
    for n in range(2):
        name = f"pager-head-{n}-{uuid.uuid4().hex[:6]}"
        if kind == "namespaces":
            client.create("/api/v1/namespaces", {"metadata": {"name": name}})
        elif kind == "services":
            client.create(
                f"/api/v1/namespaces/{namespace}/services",
                {"metadata": {"name": name}, "spec": {"ports": [{"port": 443}]}},
            )
        else:
            client.create(
                f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": name}}
            )
    body = client.get_bytes(f"/api/v1/{kind}", {"limit": 1})
    decoded = orjson.loads(body)["metadata"].get("continue")
    assert decoded, "more than one object: a continue token is expected"
    assert peek_continue(body) == decoded
