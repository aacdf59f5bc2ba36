"""trust.clustertrustbundles: one signer's bundles are asked of the server by its field
selector, and a bundle that cannot be read publishes no anchor."""

from __future__ import annotations

from typing import Any, cast

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from kube.client import ApiError, Client
from tests.unit import pki
from trust.bundle import fingerprint
from trust.clustertrustbundles import (
    anchors_of,
    bundles_path,
    signer_anchors,
    signer_bundles,
    unlinked_bundle,
)


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


class _Answers:
    """A client whose GET answers with `answer` (a body) or raises it (an ApiError)."""

    def __init__(self, answer: object) -> None:
        self.answer = answer
        self.paths: list[str] = []

    def get(self, path: str) -> object:
        self.paths.append(path)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "found"),
    [
        ({"metadata": {"name": "example.com.signer.trust-anchors"}}, True),
        ({"metadata": {"name": "someone-else"}}, False),  # a body for another name
        (ApiError(404, "NotFound"), False),  # not published
        (ApiError(403, "Forbidden"), False),  # may not read it: nothing said of it
    ],
)
def test_the_unlinked_bundle_is_read_by_its_name_or_is_none(answer: object, found: bool) -> None:
    client = _Answers(answer)
    bundle = unlinked_bundle(cast(Any, client), "v1beta1", "example.com/signer")
    assert (bundle is not None) is found
    assert client.paths == [
        "/apis/certificates.k8s.io/v1beta1/clustertrustbundles/example.com.signer.trust-anchors"
    ]


@pytest.mark.parametrize("status", [0, 401, 429, 500, 503])
def test_any_other_refusal_of_the_unlinked_bundle_is_raised(status: int) -> None:
    with pytest.raises(ApiError):
        unlinked_bundle(cast(Any, _Answers(ApiError(status, "x"))), "v1beta1", "example.com/signer")
