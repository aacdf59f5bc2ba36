"""What the signer's tests share: signing material from a test CA (`material` validates it
as `run` would, `material_of` wraps it as is), and a source of it that can swap (as the
file or managed source does)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from trust.ca import CertificateAuthority, cert_pem, key_pem
from trust.material import MaterialFiles, SigningMaterial, validate_material


def material_of(ca: CertificateAuthority) -> SigningMaterial:
    return SigningMaterial(
        key=ca.key,
        chain=(ca.cert,),
        trust_bundle="",
        anchors=(ca.cert,),
        fingerprint=ca.cert.fingerprint(hashes.SHA256()).hex(),
    )


class FakeMaterialSource:
    def __init__(self, ca: CertificateAuthority) -> None:
        self.material: SigningMaterial | None = material_of(ca)
        self.listeners: list[Callable[[SigningMaterial], object]] = []

    def current(self) -> SigningMaterial:
        if self.material is None:  # a managed CA's emergency window, or its bootstrap
            raise RuntimeError("secret ns/ca: no confirmed managed CA yet")
        return self.material

    def add_listener(self, listener: Callable[[SigningMaterial], object]) -> None:
        self.listeners.append(listener)

    def swap(self, ca: CertificateAuthority) -> None:
        self.material = material_of(ca)
        for listener in self.listeners:
            listener(self.material)


def material(
    authority: CertificateAuthority, *, extra_chain: tuple[x509.Certificate, ...] = ()
) -> SigningMaterial:
    files = MaterialFiles(
        key_pem(authority.key),
        cert_pem(*authority.cert_chain, *extra_chain),
        cert_pem(authority.root.cert),
    )
    now = authority.cert.not_valid_before_utc + timedelta(minutes=1)
    return validate_material(files, "ca.key", "ca.crt", "bundle.pem", now)
