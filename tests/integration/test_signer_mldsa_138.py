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
from tests.integration.explain_harness import run_explain
from tests.integration.signer_harness import RunningSigner, condition, eventually, wait_terminal

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
    # RFC 9881: an ML-DSA leaf signs, and does nothing else.
    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value == x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


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


def test_min_compatibility_version_1_38_alone_turns_ml_dsa_on() -> None:
    """The other route a cluster operator takes: no `--feature-gates` at all, and
    `--min-compatibility-version=1.38`; kube-apiserver then turns `PodCertificateMLDSA` on
    by default, accepts a Pod asking for an ML-DSA key, and the request kubelet would make
    for it is Issued."""
    plane = ControlPlane.start(version=VERSION, extra_args=("--min-compatibility-version=1.38",))
    try:
        args = plane.apiserver_args()
        assert not [a for a in args if "PodCertificateMLDSA" in a], args
        client = plane.client()
        gate = client.get_bytes("/metrics").decode()
        ns = client.create("/api/v1/namespaces", {"metadata": {"generateName": "compat-"}})
        name = ns["metadata"]["name"]
        pod = cert_pod(
            "web-0",
            name,
            node="node-1",
            labels={"app": "web"},
            key_type="MLDSA65",
            annotations={"kubernetes.io/service-names": "web"},
        )
        stored_pod = client.create(f"/api/v1/namespaces/{name}/pods", pod)
        with RunningSigner(client) as signer:
            signer.kubelet.create_service("web", name, selector={"app": "web"})
            created, key = signer.kubelet.create_pcr(
                stored_pod,
                key_type="MLDSA65",
                annotations={"kubernetes.io/service-names": "web"},
            )
            stored = wait_terminal(client, created)
    finally:
        plane.stop()

    assert 'kubernetes_feature_enabled{name="PodCertificateMLDSA",stage="BETA"} 1' in gate
    sources = stored_pod["spec"]["volumes"][0]["projected"]["sources"]
    assert sources[0]["podCertificate"]["keyType"] == "MLDSA65"
    assert condition(stored)["type"] == "Issued", stored["status"]
    leaf = x509.load_pem_x509_certificates(stored["status"]["certificateChain"].encode())[0]
    assert leaf.public_key() == key.public_key()


def test_explain_says_no_node_declares_the_ml_dsa_feature_for_a_pending_pod(
    client_138: Client, ns_138: str, other_planes: dict[str, tuple[ControlPlane, Client]]
) -> None:
    """A Pod asking for an ML-DSA key is scheduled only onto a node that declares
    `PodCertificateMLDSA`; while none does, it stays Pending with no request, and
    `explain` says so in those words — then names the node once one declares it."""
    plane = other_planes[VERSION][0]
    node_name = f"no-mldsa-{ns_138}"
    client_138.create("/api/v1/nodes", {"metadata": {"name": node_name}})
    try:
        pod = cert_pod(
            "web-0",
            ns_138,
            node=None,
            labels={"app": "web"},
            key_type="MLDSA65",
            annotations={"kubernetes.io/service-names": "web"},
        )
        client_138.create(f"/api/v1/namespaces/{ns_138}/pods", pod)
        undeclared = run_explain(plane.kubeconfig, ns_138, "pod", f"{ns_138}/web-0")
        client_138.patch(
            f"/api/v1/nodes/{node_name}/status",
            {"status": {"declaredFeatures": ["PodCertificateMLDSA"]}},
        )
        declared = run_explain(plane.kubeconfig, ns_138, "pod", f"{ns_138}/web-0")
    finally:
        client_138.delete(f"/api/v1/nodes/{node_name}")

    code, out, _ = undeclared
    print(f"\n$ service-serving-signer explain pod {ns_138}/web-0\n{out}(exit {code})")
    assert code == 4, out  # no request yet
    assert "the Pod asks for an MLDSA65 key and is not scheduled" in out
    assert "no node declares PodCertificateMLDSA" in out
    assert "--feature-gates=PodCertificateMLDSA=true" in out
    code, out, _ = declared
    assert code == 4, out
    assert "nodes that declare PodCertificateMLDSA can run it" in out and node_name in out
