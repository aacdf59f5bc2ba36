"""`--signer-name` is validated exactly as kube-apiserver validates a signerName: every
name of the unit tables (tests/unit/manager/test_options.py) is accepted or rejected by
the real API server the same way (a server-side dry-run CertificateSigningRequest, whose
`spec.signerName` goes through `ValidateSignerName`)."""

from __future__ import annotations

import base64

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kube.client import ApiError, Client
from manager.options import signer_name_problem
from tests.unit.manager.test_options import ACCEPTED_SIGNER_NAMES, REJECTED_SIGNER_NAMES

CSR = "/apis/certificates.k8s.io/v1/certificatesigningrequests"


def csr_pem() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(x509.Name([]))
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode()


def api_accepts(client: Client, signer_name: str, request: str) -> bool:
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "signer-name-"},
        "spec": {"request": request, "signerName": signer_name, "usages": ["server auth"]},
    }
    try:
        client.create(CSR, body, {"dryRun": "All"})
    except ApiError as err:
        if err.status == 422 and "spec.signerName" in str(err.body):
            return False
        raise
    return True


def test_signer_name_validation_agrees_with_kube_apiserver(client: Client) -> None:
    request = csr_pem()
    names = ACCEPTED_SIGNER_NAMES + [name for name, _ in REJECTED_SIGNER_NAMES]
    disagreements = [
        (name[:60], signer_name_problem(name))
        for name in names
        if api_accepts(client, name, request) != (signer_name_problem(name) is None)
    ]
    assert disagreements == []
