"""ML-DSA Pod certificates against kube-apiserver 1.38 (docs/post-quantum.md).

With `PodCertificateMLDSA` on, requests of all three sizes are Issued and their chains
verify with `cryptography`'s X.509 verifier. A forged proof of possession never yields a
certificate: kube-apiserver refuses it on create (the stub CSR's signature, and any
ML-DSA key in `pkixPublicKey`), so nothing is stored for the signer to sign. With the
gate off (1.38's default), a Pod asking for `keyType: MLDSA65` is refused by the API
server, so kubelet never makes such a request."""

from __future__ import annotations

import datetime as dt

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from controlplane import ControlPlane, binaries
from controlplane.kubelet import MLDSA_KEY_TYPES, generate_key, pcr_path, stub_csr
from controlplane.workload import cert_pod
from kube.client import ApiError, Client
from tests.conftest import create_test_namespace
from tests.integration.signer_harness import RunningSigner, condition, eventually, wait_terminal

pytestmark = pytest.mark.integration

VERSION = binaries.NEXT_VERSION
# The plane turns the gate on for 1.38 (`controlplane.server.version_args`); this turns
# it off again, as 1.38 ships it.
NO_GATE = "--feature-gates=PodCertificateMLDSA=false"


@pytest.fixture
def client_138(other_planes: dict[str, tuple[ControlPlane, Client]]) -> Client:
    """1.38's kube-apiserver with the gate on, shared with the version-sensitive tests."""
    if VERSION not in other_planes:
        started = ControlPlane.start(version=VERSION)
        other_planes[VERSION] = (started, started.client())
    client = other_planes[VERSION][1]
    assert client.get("/version")["gitVersion"] == VERSION
    return client


@pytest.fixture
def ns_138(client_138: Client, request: pytest.FixtureRequest) -> str:
    return create_test_namespace(client_138, request)


def verify_chain(chain_pem: str, anchors: list[x509.Certificate], name: str) -> x509.Certificate:
    certs = x509.load_pem_x509_certificates(chain_pem.encode())
    verifier = (
        PolicyBuilder()
        .store(Store(anchors))
        .time(dt.datetime.now(dt.UTC))
        .build_server_verifier(x509.DNSName(name))
    )
    verifier.verify(certs[0], certs[1:])
    return certs[0]


@pytest.mark.parametrize("key_type", MLDSA_KEY_TYPES)
def test_mldsa_requests_of_every_size_are_issued_and_verify(
    client_138: Client, ns_138: str, key_type: str
) -> None:
    with RunningSigner(client_138) as signer:
        created, key = signer.kubelet.serving_request(ns_138, key_type=key_type)
        stored = wait_terminal(client_138, created)
        anchors = signer.anchors()
        # The worker counts the issue after its status write returns: let it finish.
        eventually(signer.controller.queue.idle, what="idle workers")
        counted = signer.registry.get_sample_value(
            "service_serving_ca_controller_issued_total", {"key_type": key_type}
        )

    assert condition(stored)["type"] == "Issued", stored["status"]
    leaf = verify_chain(stored["status"]["certificateChain"], anchors, f"web.{ns_138}.svc")
    assert leaf.public_key() == key.public_key()
    assert counted == 1.0


def forged_stub(key_type: str) -> bytes:
    """A kubelet-shaped stub CSR whose signature no longer verifies (one byte flipped)."""
    der = bytearray(stub_csr(generate_key(key_type)))
    der[-5] ^= 0x01
    assert not x509.load_der_x509_csr(bytes(der)).is_signature_valid
    return bytes(der)


@pytest.mark.parametrize("key_type", MLDSA_KEY_TYPES)
def test_a_forged_proof_of_possession_is_refused_by_kube_apiserver(
    client_138: Client, ns_138: str, key_type: str
) -> None:
    with RunningSigner(client_138) as signer:
        pod = signer.kubelet.create_pod("web-0", ns_138, labels={"app": "web"})
        signer.kubelet.create_service("web", ns_138, selector={"app": "web"})
        annotations = {"kubernetes.io/service-names": "web"}
        key = generate_key(key_type)
        with pytest.raises(ApiError) as stub_refused:
            signer.kubelet.create_pcr(
                pod, key=key, annotations=annotations, stub=forged_stub(key_type)
            )
        # The deprecated path, with a proof that does verify: refused all the same.
        with pytest.raises(ApiError) as pkix_refused:
            signer.kubelet.create_pcr(
                pod, key=key, annotations=annotations, version="v1beta1", legacy_pkix=True
            )
        listed = client_138.get(pcr_path(ns_138, "v1"))
        counts = signer.counts(settle=1.0)

    assert stub_refused.value.status == 422
    assert 'spec.stubPKCS10Request: Invalid value: "": invalid signature' in str(
        stub_refused.value
    ) or "invalid signature" in str(stub_refused.value.body)
    assert pkix_refused.value.status == 422
    assert "unknown public key type" in str(pkix_refused.value.body)
    assert listed["items"] == []
    assert counts == (0.0, 0.0, 0.0)  # issued, failed, error: the signer saw nothing


def test_without_the_gate_a_pod_cannot_ask_for_an_mldsa_key(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    plane = ControlPlane.start(version=VERSION, extra_args=(NO_GATE,))
    try:
        client = plane.client()
        ns = client.create("/api/v1/namespaces", {"metadata": {"generateName": "no-gate-"}})
        name = ns["metadata"]["name"]
        pod = cert_pod(
            "web-0",
            name,
            node="node-1",
            key_type="MLDSA65",
            annotations={"kubernetes.io/service-names": "web"},
        )
        with pytest.raises(ApiError) as refused:
            client.create(f"/api/v1/namespaces/{name}/pods", pod)
        allowed = cert_pod(
            "web-1",
            name,
            node="node-1",
            key_type="ECDSAP256",
            annotations={"kubernetes.io/service-names": "web"},
        )
        client.create(f"/api/v1/namespaces/{name}/pods", allowed)
    finally:
        plane.stop()

    assert refused.value.status == 422
    assert "keyType" in str(refused.value.body)
