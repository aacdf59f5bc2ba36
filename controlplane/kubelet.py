"""A kubelet stand-in: creates Pods, Services and PodCertificateRequests exactly as
kubelet does for a `podCertificate` projected volume, so tests, the demo and benchmarks
exercise the signer with what a real node sends.

Kubelet 1.37 writes `certificates.k8s.io/v1` with `stubPKCS10Request`: an *empty* PKCS#10
CSR (no subject, no extensions) signed by a fresh key of the projection's `keyType`
(1.38 adds `MLDSA44`/`MLDSA65`/`MLDSA87` behind the `PodCertificateMLDSA` gate),
`generateName: req-`, an ownerReference to the Pod, and the projection's `userAnnotations`
verbatim as `unverifiedUserAnnotations`. Kubelets older than 1.36 wrote v1beta1 with the
now-deprecated `pkixPublicKey` plus `proofOfPossession` (a signature over the Pod UID);
`legacy_pkix=True` reproduces that.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from trust import keys

KEY_TYPES = keys.ungated_leaf_key_types()
MLDSA_KEY_TYPES = keys.gated_key_types(keys.MLDSA_GATE)

PrivateKey = keys.LeafPrivateKey

NODE_NAME = "node-1"
NODE_UID = "6b1f7a52-0000-4000-8000-000000000001"


def generate_key(key_type: str) -> PrivateKey:
    """A fresh private key of a projection `keyType`."""
    if key_type not in keys.leaf_key_types():
        supported = ", ".join(keys.leaf_key_types())
        raise ValueError(f"unknown key type {key_type!r}; kubelet supports {supported}")
    return keys.generate_leaf_key(key_type)


def stub_csr(key: PrivateKey, *, subject_cn: str | None = None) -> bytes:
    """DER of the empty CSR kubelet sends (Go's `x509.CreateCertificateRequest` with an
    empty template). `subject_cn` makes a non-empty one, which our signer must deny."""
    attrs = [x509.NameAttribute(x509.NameOID.COMMON_NAME, subject_cn)] if subject_cn else []
    name = x509.Name(attrs)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(name)
        .sign(key, keys.signature_hash(key))
    )
    return csr.public_bytes(serialization.Encoding.DER)


def proof_of_possession(key: PrivateKey, pod_uid: str) -> bytes:
    """The pre-1.36 kubelet's signature over the Pod UID (validated by kube-apiserver).
    No kubelet sends an ML-DSA key this way (kube-apiserver 1.38 refuses one in
    `pkixPublicKey`); it is signed like Ed25519, over the UID itself, so tests can show
    the refusal."""
    data = pod_uid.encode()
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        return key.sign(data)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    return key.sign(
        data,
        padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH),
        hashes.SHA256(),
    )


def pod_manifest(
    name: str,
    namespace: str,
    *,
    labels: dict[str, str] | None = None,
    hostname: str | None = None,
    subdomain: str | None = None,
    service_account: str = "default",
    node_name: str | None = NODE_NAME,
) -> dict[str, Any]:
    """A Pod with one pause container and no ServiceAccount token; bound to `node_name`
    (None: left for a scheduler)."""
    spec: dict[str, Any] = {
        "serviceAccountName": service_account,
        "automountServiceAccountToken": False,
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
    }


def deployment_manifest(
    name: str, template: dict[str, Any], *, replicas: int = 1
) -> dict[str, Any]:
    """A Deployment of `replicas` Pods from `template`, selecting them by its labels."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": template["metadata"]["labels"]},
            "template": template,
        },
    }


def service_manifest(
    name: str,
    namespace: str,
    *,
    selector: dict[str, str] | None,
    headless: bool = False,
    service_type: str = "ClusterIP",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": service_type}
    if service_type == "ExternalName":
        spec["externalName"] = "example.com"
    else:
        spec["ports"] = [{"name": "https", "port": 443, "targetPort": 8443}]
        if selector is not None:
            spec["selector"] = selector
        if headless:
            spec["clusterIP"] = "None"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pcr_manifest(
    pod: dict[str, Any],
    key: PrivateKey,
    *,
    signer_name: str,
    annotations: dict[str, str] | None,
    max_expiration_seconds: int | None = 86400,
    version: str = "v1",
    legacy_pkix: bool = False,
    service_account_uid: str | None = None,
    stub: bytes | None = None,
) -> dict[str, Any]:
    """The PodCertificateRequest body kubelet POSTs for `pod` (an object read back from
    the API server, so it has a uid)."""
    meta = pod["metadata"]
    spec: dict[str, Any] = {
        "signerName": signer_name,
        "podName": meta["name"],
        "podUID": meta["uid"],
        "serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "serviceAccountUID": service_account_uid
        or str(uuid.uuid5(uuid.NAMESPACE_URL, meta["uid"])),
        "nodeName": pod["spec"]["nodeName"],
        "nodeUID": NODE_UID,
    }
    if max_expiration_seconds is not None:
        spec["maxExpirationSeconds"] = max_expiration_seconds
    if annotations:
        spec["unverifiedUserAnnotations"] = annotations
    if legacy_pkix:
        der = key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        spec["pkixPublicKey"] = base64.b64encode(der).decode()
        spec["proofOfPossession"] = base64.b64encode(proof_of_possession(key, meta["uid"])).decode()
    else:
        spec["stubPKCS10Request"] = base64.b64encode(stub or stub_csr(key)).decode()
    return {
        "apiVersion": f"certificates.k8s.io/{version}",
        "kind": "PodCertificateRequest",
        "metadata": {
            "generateName": "req-",
            "namespace": meta["namespace"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "spec": spec,
    }


def pcr_path(namespace: str, version: str = "v1", name: str | None = None) -> str:
    base = f"/apis/certificates.k8s.io/{version}/namespaces/{namespace}/podcertificaterequests"
    return f"{base}/{name}" if name else base


class Kubelet:
    """Creates objects through a `kube.client.Client` the way a node would."""

    def __init__(self, client: Any, signer_name: str = "kubernetes.io/service-serving") -> None:
        self.client = client
        self.signer_name = signer_name

    def create_pod(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.client.create(
            f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, namespace, **kwargs)
        )
        return result

    def create_service(self, name: str, namespace: str, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.client.create(
            f"/api/v1/namespaces/{namespace}/services", service_manifest(name, namespace, **kwargs)
        )
        return result

    def serving_request(
        self, namespace: str, app: str = "web", **pcr: Any
    ) -> tuple[dict[str, Any], PrivateKey]:
        """The common case in one call: Pod `<app>-0` labelled `app=<app>`, the Service
        `<app>` selecting it, and the Pod's request naming that Service (`create_pcr`'s
        keyword arguments pass through)."""
        pod = self.create_pod(f"{app}-0", namespace, labels={"app": app})
        self.create_service(app, namespace, selector={"app": app})
        return self.create_pcr(pod, annotations={"kubernetes.io/service-names": app}, **pcr)

    def create_pcr(
        self,
        pod: dict[str, Any],
        *,
        key_type: str = keys.DEFAULT_KEY_TYPE,
        key: PrivateKey | None = None,
        annotations: dict[str, str] | None = None,
        max_expiration_seconds: int | None = 86400,
        version: str = "v1",
        legacy_pkix: bool = False,
        stub: bytes | None = None,
        signer_name: str | None = None,
    ) -> tuple[dict[str, Any], PrivateKey]:
        """POST a PodCertificateRequest for `pod`; returns (stored object, private key)."""
        private_key = key or generate_key(key_type)
        body = pcr_manifest(
            pod,
            private_key,
            signer_name=signer_name or self.signer_name,
            annotations=annotations,
            max_expiration_seconds=max_expiration_seconds,
            version=version,
            legacy_pkix=legacy_pkix,
            stub=stub,
        )
        created: dict[str, Any] = self.client.create(
            pcr_path(pod["metadata"]["namespace"], version), body
        )
        return created, private_key
