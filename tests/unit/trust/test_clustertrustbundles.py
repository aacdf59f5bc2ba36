"""trust.clustertrustbundles: one signer's bundles are asked of the server by its field
selector, and a bundle that cannot be read publishes no anchor."""

from __future__ import annotations

from typing import Any, cast

from cryptography.hazmat.primitives.serialization import Encoding

from kube.client import Client
from tests.unit import pki
from trust.bundle import fingerprint
from trust.clustertrustbundles import anchors_of, bundles_path, signer_anchors, signer_bundles


class Bundles:
    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.asked: list[tuple[str, Any]] = []

    def get(self, path: str, params: Any = None) -> Any:
        self.asked.append((path, params))
        return {"items": self.items}


def test_one_signers_bundles_are_filtered_by_the_server() -> None:
    root = pki.ca("a").cert
    good = {"spec": {"trustBundle": root.public_bytes(Encoding.PEM).decode()}}
    client = Bundles([good, {"spec": {"trustBundle": "-----BEGIN CERTIFICATE-----\nnope"}}, {}])
    assert signer_bundles(cast(Client, client), "v1", "example.com/s") == client.items
    assert client.asked == [
        (
            "/apis/certificates.k8s.io/v1/clustertrustbundles",
            {"fieldSelector": "spec.signerName=example.com/s"},
        )
    ]
    assert signer_anchors(cast(Client, client), "v1", "example.com/s") == {fingerprint(root)}
    assert anchors_of("not a bundle") == frozenset()
    assert bundles_path("v1beta1") == "/apis/certificates.k8s.io/v1beta1/clustertrustbundles"
