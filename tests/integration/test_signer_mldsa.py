"""ML-DSA Pod certificates against the real kube-apiserver (docs/post-quantum.md).

Kubernetes 1.37 refuses every ML-DSA request on create — in a stub CSR ("unknown public
key type") and in `pkixPublicKey` ("must be a valid PKIX-serialized public key") — so
the signer never sees one and nothing changes on a cluster without ML-DSA support."""

from __future__ import annotations

import pytest

from controlplane import binaries
from controlplane.kubelet import MLDSA_KEY_TYPES
from kube.client import ApiError, Client
from tests.integration.signer_harness import RunningSigner

pytestmark = pytest.mark.integration


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
    expected = (
        "must be a valid PKIX-serialized public key" if legacy_pkix else "unknown public key type"
    )
    assert expected in str(refused.value.body)
    assert listed["items"] == []
    assert counts == (0.0, 0.0, 0.0)  # issued, failed, error: nothing reached the signer
