"""Throw-away certificate authorities for `service-serving-signer ca init`, tests and the demo.

Not a production CA: keys are generated in process memory and written unencrypted. What
it decides is the *shape* of a CA certificate the signer accepts at start-up
(docs/reference.md §2): basicConstraints CA:TRUE (critical), keyUsage keyCertSign +
cRLSign (+ digitalSignature), a subject key identifier, and for an intermediate an
authority key identifier naming its issuer. Key types: `trust.keys`. The one CA maker of
the project: the signer's tests, `ca init`, the demo and the local control plane's PKI
(`controlplane.pki`) all make CAs here.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from trust.keys import (
    DEFAULT_KEY_TYPE,
    KeyType,
    LeafPrivateKey,
    PrivateKey,
    generate_key,
    signature_hash,
)

DEFAULT_VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class CertificateAuthority:
    """A key and its certificate; `parent` is the issuing CA for an intermediate."""

    key: PrivateKey
    cert: x509.Certificate
    parent: CertificateAuthority | None = None

    @property
    def root(self) -> CertificateAuthority:
        return self if self.parent is None else self.parent.root

    @property
    def cert_chain(self) -> list[x509.Certificate]:
        """This cert, then its issuers up to (not including) the root."""
        chain = [self.cert]
        ca = self.parent
        while ca is not None and ca.parent is not None:
            chain.append(ca.cert)
            ca = ca.parent
        return chain


def generate_ca(
    common_name: str = "service-serving-signer throw-away CA",
    *,
    key_type: KeyType = DEFAULT_KEY_TYPE,
    parent: CertificateAuthority | None = None,
    not_before: dt.datetime | None = None,
    validity: dt.timedelta = DEFAULT_VALIDITY,
    key: PrivateKey | None = None,
    organization: str | None = None,
    path_length: int | None = None,
) -> CertificateAuthority:
    """A self-signed root CA, or (with `parent`) an intermediate CA issued by `parent`.
    The subject is `CN=common_name`, with `O=organization` when given; `path_length`
    is basicConstraints' pathLenConstraint (0: it signs leaves only)."""
    key = key if key is not None else generate_key(key_type)
    start = (not_before or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).replace(microsecond=0)
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    issuer_key: PrivateKey = parent.key if parent is not None else key
    issuer_name = parent.cert.subject if parent is not None else subject
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(secrets.randbits(127) | 1)
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if parent is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key()),
            critical=False,
        )
    cert = builder.sign(issuer_key, signature_hash(issuer_key))
    return CertificateAuthority(key=key, cert=cert, parent=parent)


def key_pem(key: LeafPrivateKey) -> bytes:
    """Unencrypted PKCS#8 PEM (a CA's key or a leaf's, ML-DSA included)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def cert_pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


@dataclass(frozen=True)
class CaFiles:
    """Where `write_ca` put the three files the signer is started with."""

    key: Path
    cert: Path
    trust_bundle: Path


def unique_common_name(role: str) -> str:
    """`service-serving-signer root CA@1733119200-9f3a2c`: the creation time and a random
    suffix, like OpenShift's `openshift-service-serving-signer@<unix time>`, so that two
    roots published side by side mid-rotation (or a root and its intermediate) never share
    a subject — clients, `openssl` and the chain probe tell them apart by name."""
    return f"service-serving-signer {role} CA@{int(time.time())}-{secrets.token_hex(3)}"


def write_ca(
    out_dir: str | os.PathLike[str],
    *,
    key_type: KeyType = DEFAULT_KEY_TYPE,
    intermediate: bool = False,
    validity: dt.timedelta = DEFAULT_VALIDITY,
    overwrite: bool = False,
    ca: CertificateAuthority | None = None,
) -> CaFiles:
    """Write `ca.key` (PKCS#8, mode 0600), `ca.crt` (signing cert, then intermediates) and
    `trust-bundle.pem` (the root) into `out_dir`, creating it. With `intermediate`, a root
    signs an intermediate and the intermediate is the signing CA; each new CA gets its own
    subject (`unique_common_name`). Refuses to replace existing files unless `overwrite`
    (other files in `out_dir` are left alone)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = CaFiles(out / "ca.key", out / "ca.crt", out / "trust-bundle.pem")
    existing = [str(p) for p in (files.key, files.cert, files.trust_bundle) if p.exists()]
    if existing and not overwrite:
        raise FileExistsError(
            f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}; "
            "refusing to overwrite a CA (pass --force to replace it: the old key is lost)"
        )
    if ca is None:
        root = generate_ca(unique_common_name("root"), key_type=key_type, validity=validity)
        ca = (
            generate_ca(
                unique_common_name("intermediate"),
                key_type=key_type,
                parent=root,
                validity=validity,
            )
            if intermediate
            else root
        )
    _write_private(files.key, key_pem(ca.key))
    _write_atomically(files.cert, cert_pem(*ca.cert_chain))
    _write_atomically(files.trust_bundle, cert_pem(ca.root.cert))
    return files


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
