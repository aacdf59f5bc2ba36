"""Whether a signing set can issue a certificate that clients will accept: a throw-away
leaf is issued with the set and verified for server auth against the set's own anchors.

Checking signatures and validity (trust.material) is not enough: a root with `pathLen=0`
above the signing intermediate, an intermediate whose extended key usage lacks
`serverAuth`, or name constraints that exclude `.svc` all give chains that every TLS
client rejects. Rather than re-implementing those rules, a second implementation of RFC
5280 path validation judges a real leaf.

Decisions:

- The leaf is issued by an injected callable: the signer's own certificate profile
  (`signer.authority.issue_probe` as `trust.material.LeafIssuer`, wired by the manager),
  so the probe tests exactly what kubelet will be handed. `trust/` does not import
  `signer/`, and this module knows nothing of signing material, only of a chain.
- Its names are the two forms the signer writes for a Service (`<svc>.<ns>.svc.<domain>`
  and `<svc>.<ns>.svc`), for a Service `service-serving-signer-probe` in `default`; the
  public key is a P-256 key made once per process and never used for anything else.
- The verifier is `cryptography.x509.verification`'s server verifier (pathLen, CA EKU,
  name constraints, validity, signatures), at the validation's `now`, trusting only the
  set's anchors, with the cert file's other certificates as intermediates.
- Ed25519: that verifier's Web PKI policy forbids the algorithm outright, so a chain with
  an Ed25519 key is judged by OpenSSL instead, through an in-memory TLS handshake (Python
  `ssl`, `VERIFY_X509_STRICT`, hostname checked) — the same checks, another library. The
  throw-away key and chain reach OpenSSL through anonymous memory files (`memfd`), not disk.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from trust.memfile import memory_file

PROBE_SERVICE = "service-serving-signer-probe"
PROBE_NAMESPACE = "default"


class Issue(Protocol):
    """Issue a serving certificate with the set under test for `public_key` and
    `dns_names` at `now`; return the PEM chain (leaf first) as it would go into a
    request's status. Raises when the set cannot issue."""

    def __call__(
        self, public_key: ec.EllipticCurvePublicKey, dns_names: Sequence[str], now: datetime
    ) -> str: ...


def probe_names(domain: str) -> list[str]:
    """The SANs of the throw-away leaf."""
    service = f"{PROBE_SERVICE}.{PROBE_NAMESPACE}.svc"
    return [f"{service}.{domain}", service]


@functools.cache
def _probe_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def chain_problem(
    issue: Issue,
    anchors: Sequence[x509.Certificate],
    anchors_pem: str,
    domain: str,
    now: datetime,
) -> str | None:
    """Why a leaf from `issue` does not verify for server auth against `anchors` (the
    same certificates as `anchors_pem`), or None when it does. One line."""
    names = probe_names(domain)
    key = _probe_key()
    try:
        chain_pem = issue(key.public_key(), names, now)
    except Exception as err:
        return f"cannot issue a certificate: {_one_line(err)}"
    certs = x509.load_pem_x509_certificates(chain_pem.encode("ascii"))
    if any(_is_ed25519(c) for c in (*certs, *anchors)):
        return _openssl_problem(chain_pem, key, anchors_pem, names[1])
    verifier = (
        PolicyBuilder()
        .store(Store(list(anchors)))
        .time(now)
        .build_server_verifier(x509.DNSName(names[1]))
    )
    try:
        verifier.verify(certs[0], certs[1:])
    except VerificationError as err:
        return _one_line(str(err)).removeprefix("validation failed: ")
    return None


def _is_ed25519(cert: x509.Certificate) -> bool:
    return isinstance(cert.public_key(), ed25519.Ed25519PublicKey)


def _one_line(err: object) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _openssl_problem(
    chain_pem: str, key: ec.EllipticCurvePrivateKey, anchors_pem: str, hostname: str
) -> str | None:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    name = "service-serving-signer-probe"
    with (
        memory_file(chain_pem.encode("ascii"), name) as cert_path,
        memory_file(key_pem, name) as key_path,
    ):
        server.load_cert_chain(cert_path, key_path)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    client.load_verify_locations(cadata=anchors_pem)
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_client = client.wrap_bio(to_client, to_server, server_hostname=hostname)
    tls_server = server.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(8):
        done = True
        for end in (tls_client, tls_server):
            try:
                end.do_handshake()
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLCertVerificationError as err:
                return _one_line(err.verify_message or err)
            except ssl.SSLError as err:
                if end is tls_client:
                    return _one_line(err)
        server_in.write(to_server.read())
        to_client.write(server_out.read())
        if done:
            return None
    return "TLS handshake with the test certificate did not complete"
