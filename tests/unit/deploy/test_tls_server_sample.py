"""The sample workload's HTTPS server (config/samples/tls_server.py, docs/reload.md) picks
up a refreshed key and chain without a restart, when the files are replaced the way the
kubelet replaces them; a pair that does not load keeps the previous one in service.
(Through the real kubelet: tests/integration/test_kubelet_reload.py.)"""

from __future__ import annotations

import datetime as dt
import importlib.util
import socket
import ssl
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.atomic_volume import atomic_write
from tests.unit import pki
from trust.ca import CertificateAuthority, cert_pem, key_pem
from trust.keys import signature_hash

SAMPLE = Path(__file__).resolve().parents[3] / "config" / "samples" / "tls_server.py"
NAME = "web.demo.svc"


def load_sample(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.setenv("HOST", "127.0.0.1")
    monkeypatch.setenv("PORT", "0")
    spec = importlib.util.spec_from_file_location("tls_server_sample", SAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def serving_pair(issuer: CertificateAuthority, serial: int) -> dict[str, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"leaf {serial}")]))
        .issuer_name(issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(NAME)]), critical=False)
        .sign(issuer.key, signature_hash(issuer.key))
    )
    return {"tls.key": key_pem(key), "tls.crt": cert_pem(leaf)}


def served_serial(port: int, anchors: bytes) -> int:
    context = ssl.create_default_context(cadata=anchors.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=NAME) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        tls.sendall(b"GET / HTTP/1.0\r\nHost: " + NAME.encode() + b"\r\n\r\n")
        assert tls.recv(64).startswith(b"HTTP/1.0 200")
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


@pytest.fixture
def volume(tmp_path: Path) -> Path:
    atomic_write(tmp_path / "tls", serving_pair(pki.ca(), 1))
    return tmp_path / "tls"


@pytest.fixture
def port(monkeypatch: pytest.MonkeyPatch, volume: Path) -> Iterator[int]:
    sample = load_sample(monkeypatch)
    server = sample.Server(
        sample.ReloadingContext(str(volume / "tls.crt"), str(volume / "tls.key"))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_serves_the_refreshed_certificate_on_the_next_connection(volume: Path, port: int) -> None:
    anchors = cert_pem(pki.ca().cert)
    assert served_serial(port, anchors) == 1
    atomic_write(volume, serving_pair(pki.ca(), 2))
    assert served_serial(port, anchors) == 2
    atomic_write(volume, serving_pair(pki.ca(), 3))
    assert served_serial(port, anchors) == 3


def test_a_pair_that_does_not_load_keeps_the_previous_one_until_a_good_one_arrives(
    volume: Path, port: int
) -> None:
    anchors = cert_pem(pki.ca().cert)
    good, other = serving_pair(pki.ca(), 2), serving_pair(pki.ca(), 3)
    atomic_write(volume, {"tls.key": other["tls.key"], "tls.crt": good["tls.crt"]})
    assert served_serial(port, anchors) == 1
    atomic_write(volume, good)
    assert served_serial(port, anchors) == 2


def test_refuses_to_start_without_a_usable_pair(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sample = load_sample(monkeypatch)
    pair = serving_pair(pki.ca(), 1)
    atomic_write(tmp_path, {"tls.key": b"not a key", "tls.crt": pair["tls.crt"]})
    with pytest.raises(ssl.SSLError):
        sample.ReloadingContext(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))


def test_every_sample_workload_with_a_certificate_runs_the_reloading_server() -> None:
    from tests.unit.deploy.kustomize import CONFIG, find, render

    samples = render(CONFIG / "samples")
    assert find(samples, "ConfigMap", "tls-server")["data"]["tls_server.py"] == SAMPLE.read_text()
    workloads = [o for o in samples if o["kind"] in ("Deployment", "StatefulSet")]
    assert len(workloads) == 2
    for workload in workloads:
        spec = workload["spec"]["template"]["spec"]
        projected = {
            v["name"]
            for v in spec["volumes"]
            if any("podCertificate" in s for s in v.get("projected", {}).get("sources", []))
        }
        assert projected == {"tls"}
        (container,) = spec["containers"]
        assert container["command"][-1] == "/opt/tls-server/tls_server.py"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"tls": "/var/run/tls", "tls-server": "/opt/tls-server"}
        assert {"name": "tls-server", "configMap": {"name": "tls-server"}} in spec["volumes"]
