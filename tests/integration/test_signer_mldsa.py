"""ML-DSA Pod certificates against the real kube-apiserver (docs/post-quantum.md).

Kubernetes 1.37 refuses every ML-DSA request on create — in a stub CSR ("unknown public
key type") and in `pkixPublicKey` — so the signer never sees one and nothing changes on a
cluster without ML-DSA support.

The `pkixPublicKey` refusal's wording depends on the Go that built kube-apiserver, not on
Kubernetes: Go ≤ 1.26's crypto/x509 cannot parse an ML-DSA key ("must be a valid
PKIX-serialized public key"); Go 1.27's parses it and Kubernetes' own key-type check
refuses it ("unknown public key type"). The tests build 1.37 with go1.27.3 (docs/
development.md); v1.37.2 is released built with Go 1.26.10 (its `.go-version`). Both
wordings are the same refusal."""

from __future__ import annotations

import pytest

from controlplane import binaries
from controlplane.kubelet import MLDSA_KEY_TYPES
from kube.client import ApiError, Client
from tests.integration.signer_harness import RunningSigner


@pytest.mark.parametrize("key_type", MLDSA_KEY_TYPES)
@pytest.mark.parametrize("legacy_pkix", [False, True], ids=["stub-csr", "pkix-public-key"])
def test_kubernetes_137_rejects_mldsa_requests_so_the_signer_never_sees_them(
    client: Client, namespace: str, key_type: str, legacy_pkix: bool
) -> None:
    assert client.get("/version")["gitVersion"] == binaries.KUBERNETES_VERSION
    with RunningSigner(client) as signer:
        pod = signer.kubelet.create_pod("web-0", namespace, labels={"app": "web"})
        signer.kubelet.create_service("web", namespace, selector={"app": "web"})
        version = "v1beta1" if legacy_pkix else "v1"
        with pytest.raises(ApiError) as refused:
            signer.kubelet.create_pcr(
                pod,
                key_type=key_type,
                annotations={"kubernetes.io/service-names": "web"},
                version=version,
                legacy_pkix=legacy_pkix,
            )
        listed = client.get(
            f"/apis/certificates.k8s.io/v1/namespaces/{namespace}/podcertificaterequests"
        )
        counts = signer.counts(settle=1.0)

    assert refused.value.status == 422
    causes = refused.value.body["details"]["causes"]
    field = "spec.pkixPublicKey" if legacy_pkix else "spec.stubPKCS10Request"
    assert [cause["field"] for cause in causes] == [field]
    refusals = (
        ("must be a valid PKIX-serialized public key", "unknown public key type")
        if legacy_pkix
        else ("unknown public key type",)
    )
    assert any(refusal in causes[0]["message"] for refusal in refusals), causes
    assert listed["items"] == []
    assert counts == (0.0, 0.0, 0.0)  # issued, failed, error: nothing reached the signer
