"""trust.memfile: a path OpenSSL can read key and certificate bytes from, gone after."""

from __future__ import annotations

import os
import ssl

from tests.unit import pki
from trust.ca import cert_pem, key_pem
from trust.memfile import memory_file


def test_the_path_holds_the_bytes_for_the_block_and_nothing_after() -> None:
    with memory_file(b"secret bytes") as path, open(path, "rb") as f:
        assert f.read() == b"secret bytes"
    assert not os.path.exists(path)


def test_openssl_loads_a_key_and_certificate_through_it() -> None:
    ca = pki.ca("memfile")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with memory_file(cert_pem(ca.cert) + key_pem(ca.key)) as path:
        context.load_cert_chain(path)
