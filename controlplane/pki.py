"""Certificates for the local control plane (envtest's tinyca): a serving CA and a serving
cert, a client CA and an admin client cert in `system:masters`, and the service-account
signing key. Test-only material; the CAs come from the project's one CA maker
(`trust.ca`).

The serving cert names what a real API server's does (kube-apiserver's own self-signed
cert, kubeadm's `apiserver.crt`): 127.0.0.1/localhost where it listens, and the
`kubernetes` Service — its DNS names and its ClusterIP, the address in-cluster clients
dial (KUBERNETES_SERVICE_HOST) and check the certificate against."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from trust.ca import cert_pem, generate_ca, key_pem
from trust.keys import PrivateKey, signature_hash

VALIDITY = dt.timedelta(days=7)
# The names of the `kubernetes` Service in `default` (kube-apiserver's alternate names).
KUBERNETES_SERVICE_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


@dataclass(frozen=True)
class KeyPair:
    key: PrivateKey
    cert: x509.Certificate

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)


def _ca(cn: str) -> KeyPair:
    ca = generate_ca(cn, organization="envtest", validity=VALIDITY)
    return KeyPair(ca.key, ca.cert)


def _leaf(ca: KeyPair, name: x509.Name, *, server: bool, service_ip: str | None = None) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName("localhost")]
        sans += [x509.DNSName(n) for n in KUBERNETES_SERVICE_NAMES]
        sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
        if service_ip is not None:
            sans.append(x509.IPAddress(ipaddress.ip_address(service_ip)))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return KeyPair(key, builder.sign(ca.key, signature_hash(ca.key)))


@dataclass(frozen=True)
class ControlPlanePKI:
    serving_ca: KeyPair
    serving: KeyPair
    client_ca: KeyPair
    admin: KeyPair
    service_account: ec.EllipticCurvePrivateKey

    @classmethod
    def generate(cls, service_ip: str | None = None) -> ControlPlanePKI:
        """`service_ip`: the `kubernetes` Service's ClusterIP, named in the serving cert."""
        serving_ca = _ca("envtest-serving-ca")
        client_ca = _ca("envtest-client-ca")
        return cls(
            serving_ca=serving_ca,
            serving=_leaf(serving_ca, _name("kube-apiserver"), server=True, service_ip=service_ip),
            client_ca=client_ca,
            admin=_leaf(client_ca, _name("admin", "system:masters"), server=False),
            service_account=ec.generate_private_key(ec.SECP256R1()),
        )

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate for another user (e.g. `system:node:n1` in `system:nodes`)."""
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return _leaf(self.client_ca, x509.Name(attrs), server=False)

    def write(self, directory: Path) -> dict[str, Path]:
        files = {
            "serving-ca.crt": self.serving_ca.cert_pem,
            "apiserver.crt": self.serving.cert_pem,
            "apiserver.key": self.serving.key_pem,
            "client-ca.crt": self.client_ca.cert_pem,
            "admin.crt": self.admin.cert_pem,
            "admin.key": self.admin.key_pem,
            "sa.key": key_pem(self.service_account),
            "sa.pub": self.service_account.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        }
        paths = {}
        for name, data in files.items():
            path = directory / name
            path.write_bytes(data)
            path.chmod(0o600)
            paths[name] = path
        return paths
