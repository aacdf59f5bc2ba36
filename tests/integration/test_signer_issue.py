"""Issued certificates, as the real kube-apiserver stores them: every key type, a real TLS
handshake against the CA bundle, key usages, lifetimes, the Pod FQDN and the v1beta1 path
(including pre-1.36 kubelets' `pkixPublicKey`)."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import tempfile
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID

from controlplane.kubelet import KEY_TYPES, PrivateKey, pod_manifest
from kube.client import Client
from kube.types import JSON
from tests.integration.signer_harness import (
    PRODUCT_SIGNER,
    RunningSigner,
    condition,
    delete_pcrs,
    pod_fqdn_request,
    running_signer_fixture,
    wait_terminal,
)

signer = running_signer_fixture(intermediate=True)


def chain_of(pcr: JSON) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pcr["status"]["certificateChain"].encode())


def dns_names(cert: x509.Certificate) -> list[str]:
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return san.value.get_values_for_type(x509.DNSName)


def rfc3339(value: dt.datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def handshake(chain_pem: str, key: PrivateKey, bundle: Path, server_hostname: str) -> None:
    """A TLS server on 127.0.0.1 serving `chain_pem` + `key`; a client trusting only
    `bundle` connects with `server_hostname`. Raises ssl.SSLError if verification fails."""
    with tempfile.TemporaryDirectory() as tmp:
        cert_file = Path(tmp, "tls.crt")
        key_file = Path(tmp, "tls.key")
        cert_file.write_text(chain_pem)
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(cert_file, key_file)
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            client_ctx = ssl.create_default_context(cafile=str(bundle))
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                assert tls.recv(2) == b"ok"
        finally:
            thread.join(timeout=10)
            listener.close()


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_each_key_type_is_issued_and_serves_tls_for_the_service_names(
    client: Client, namespace: str, key_type: str
) -> None:
    with RunningSigner(client, signer_name=PRODUCT_SIGNER, intermediate=True) as signer:
        try:
            kubelet = signer.kubelet
            created, key = kubelet.serving_request(namespace, key_type=key_type)
            stored = wait_terminal(client, created)
        finally:
            delete_pcrs(client, namespace)
        anchors = signer.anchors()
        bundle = signer.bundle_path()

        assert condition(stored)["type"] == "Issued"
        chain = chain_of(stored)
        leaf = chain[0]
        assert leaf.public_key() == key.public_key()
        assert dns_names(leaf) == [f"web.{namespace}.svc.cluster.local", f"web.{namespace}.svc"]
        assert stored["status"]["notBefore"] == rfc3339(leaf.not_valid_before_utc)
        assert stored["status"]["notAfter"] == rfc3339(leaf.not_valid_after_utc)

        # The chain (leaf + intermediate, no root) verifies to the published anchor.
        assert len(chain) == 2
        assert all(c.subject != c.issuer for c in chain)
        verifier = (
            verification.PolicyBuilder()
            .store(verification.Store(anchors))
            .build_server_verifier(x509.DNSName(f"web.{namespace}.svc"))
        )
        verifier.verify(leaf, chain[1:])

        # A real TLS handshake, the client trusting only the trust bundle file.
        chain_pem = stored["status"]["certificateChain"]
        handshake(chain_pem, key, bundle, f"web.{namespace}.svc")
        handshake(chain_pem, key, bundle, f"web.{namespace}.svc.cluster.local")
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(chain_pem, key, bundle, f"other.{namespace}.svc")


@pytest.mark.parametrize("key_type", ["RSA3072", "ECDSAP256", "ED25519"])
def test_key_usages_follow_the_key_type_and_there_are_no_ip_sans(
    signer: RunningSigner, client: Client, namespace: str, key_type: str
) -> None:
    kubelet = signer.kubelet
    created, key = kubelet.serving_request(namespace, key_type=key_type)

    leaf = chain_of(wait_terminal(client, created))[0]

    usage = leaf.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value.digital_signature
    assert usage.value.key_encipherment == isinstance(key, rsa.RSAPrivateKey)
    assert not usage.value.key_cert_sign
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert list(eku.value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca is False
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.critical
    assert san.value.get_values_for_type(x509.IPAddress) == []
    assert len(leaf.subject) == 0


def test_pod_fqdn_is_added_with_a_headless_service_named_after_the_subdomain(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    created = pod_fqdn_request(signer, namespace, headless=True)

    stored = wait_terminal(client, created)

    assert dns_names(chain_of(stored)[0]) == [
        f"db-0.db.{namespace}.svc.cluster.local",
        f"db-0.db.{namespace}.svc",
    ]


def test_pod_fqdn_comes_from_hostname_and_subdomain_whatever_the_hostname_override(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    """`spec.hostnameOverride` (GA since 1.37) changes the Pod's own hostname only, not its
    DNS records: the name clients resolve is still `<hostname>.<subdomain>`, so that is the
    SAN."""
    kubelet = signer.kubelet
    manifest = pod_manifest(
        "db-0", namespace, labels={"app": "db"}, hostname="db-0", subdomain="db"
    )
    manifest["spec"]["hostnameOverride"] = "renamed.example"
    pod = client.create(f"/api/v1/namespaces/{namespace}/pods", manifest)
    # The API server kept the field (it would drop an unknown one): the test proves something.
    assert pod["spec"]["hostnameOverride"] == "renamed.example"
    kubelet.create_service("db", namespace, selector={"app": "db"}, headless=True)
    created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/add-pod-fqdn": "true"})

    stored = wait_terminal(client, created)

    assert dns_names(chain_of(stored)[0]) == [
        f"db-0.db.{namespace}.svc.cluster.local",
        f"db-0.db.{namespace}.svc",
    ]


def test_pod_fqdn_without_hostname_is_denied_saying_what_to_set(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    kubelet = signer.kubelet
    pod = kubelet.create_pod("db-0", namespace, labels={"app": "db"})
    kubelet.create_service("db", namespace, selector={"app": "db"}, headless=True)
    created, _ = kubelet.create_pcr(pod, annotations={"kubernetes.io/add-pod-fqdn": "true"})

    got = condition(wait_terminal(client, created))

    assert (got["type"], got["reason"]) == ("Denied", "PodHostnameRequired")
    assert "spec.hostname" in got["message"] and "spec.subdomain" in got["message"]


@pytest.mark.parametrize("max_seconds", [3600, 86400])
def test_requested_lifetimes_are_accepted_by_the_api_server(
    signer: RunningSigner, client: Client, namespace: str, max_seconds: int
) -> None:
    kubelet = signer.kubelet
    created, _ = kubelet.serving_request(namespace, max_expiration_seconds=max_seconds)

    stored = wait_terminal(client, created)

    leaf = chain_of(stored)[0]
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert lifetime == dt.timedelta(seconds=max_seconds)
    status = stored["status"]
    assert status["notBefore"] == rfc3339(leaf.not_valid_before_utc)
    assert status["notAfter"] == rfc3339(leaf.not_valid_after_utc)
    refresh = dt.datetime.fromisoformat(status["beginRefreshAt"].replace("Z", "+00:00"))
    assert leaf.not_valid_before_utc + dt.timedelta(minutes=10) <= refresh
    assert refresh <= leaf.not_valid_after_utc - dt.timedelta(minutes=10)


def test_lifetime_is_capped_by_max_certificate_lifetime(client: Client, namespace: str) -> None:
    with RunningSigner(client, max_lifetime_seconds=7200) as signer:
        kubelet = signer.kubelet
        created, _ = kubelet.serving_request(namespace)
        leaf = chain_of(wait_terminal(client, created))[0]

    assert leaf.not_valid_after_utc - leaf.not_valid_before_utc == dt.timedelta(hours=2)


@pytest.mark.parametrize("legacy_pkix", [False, True], ids=["stub-csr", "pkix-public-key"])
@pytest.mark.parametrize("key_type", ["ECDSAP384", "RSA3072", "ED25519"])
def test_v1beta1_path_issues_the_same_certificates(
    plane_client: Client, plane_namespace: str, key_type: str, legacy_pkix: bool
) -> None:
    """On every tested kube-apiserver (1.36 serves only v1beta1, behind its gates)."""
    client, namespace = plane_client, plane_namespace
    with RunningSigner(client, pcr_version="v1beta1") as signer:
        kubelet = signer.kubelet
        created, key = kubelet.serving_request(
            namespace, key_type=key_type, version="v1beta1", legacy_pkix=legacy_pkix
        )
        if legacy_pkix:
            assert "pkixPublicKey" in created["spec"]
            assert not created["spec"].get("stubPKCS10Request")

        stored = wait_terminal(client, created, version="v1beta1")

        assert condition(stored)["type"] == "Issued"
        leaf = chain_of(stored)[0]
        assert leaf.public_key() == key.public_key()
        assert dns_names(leaf) == [f"web.{namespace}.svc.cluster.local", f"web.{namespace}.svc"]
        assert signer.counts() == (1, 0, 0)


def test_v1_signer_also_issues_for_a_legacy_pkix_public_key_request(
    signer: RunningSigner, client: Client, namespace: str
) -> None:
    """A pre-1.36 kubelet's request (v1beta1, pkixPublicKey + proofOfPossession) shows
    no key in the v1 view; the v1 signer reads it through v1beta1 and issues."""
    kubelet = signer.kubelet
    created, key = kubelet.serving_request(namespace, version="v1beta1", legacy_pkix=True)

    stored = wait_terminal(client, created, version="v1beta1")

    assert condition(stored)["type"] == "Issued"
    assert chain_of(stored)[0].public_key() == key.public_key()
