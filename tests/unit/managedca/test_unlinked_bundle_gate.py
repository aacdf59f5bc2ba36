"""With the publisher's unlinked ClusterTrustBundle published (no signerName, so not in
the signer's LIST), the managed CA counts a root as published only once that bundle holds
it too: Pods may project it by name, and the shorter least propagation delay it allows
starts from there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from kube.client import ApiError, Client
from managedca.observe import Observer
from tests.unit import pki
from trust.bundle import fingerprints, normalize_bundle, unlinked_bundle_name
from trust.ca import cert_pem

SIGNER = "kubernetes.io/service-serving"
UNLINKED = unlinked_bundle_name(SIGNER)
OLD = normalize_bundle(cert_pem(pki.ca("gate-old").cert))
BOTH = normalize_bundle(cert_pem(pki.ca("gate-old").cert, pki.ca("gate-new").cert))


class _Api:
    def __init__(self, unlinked: str | None) -> None:
        self.unlinked = unlinked
        self.paths: list[str] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        self.paths.append(path)
        if self.unlinked is None:
            raise ApiError(404, "NotFound")
        return {"metadata": {"name": UNLINKED}, "spec": {"trustBundle": self.unlinked}}


def _observer(api: _Api, unlinked: str | None) -> Observer:
    return Observer(
        cast(Client, api),
        namespace="ns",
        secret_name="ca",
        signer_name=SIGNER,
        ctb_version="v1",
        unlinked_bundle=unlinked,
    )


def test_a_root_the_unlinked_bundle_lacks_is_not_published_yet() -> None:
    published = fingerprints(BOTH)
    api = _Api(OLD)
    assert _observer(api, UNLINKED)._unlinked(published) == fingerprints(OLD)
    assert api.paths == [f"/apis/certificates.k8s.io/v1/clustertrustbundles/{UNLINKED}"]
    assert _observer(_Api(BOTH), UNLINKED)._unlinked(published) == published


def test_a_missing_unlinked_bundle_publishes_nothing() -> None:
    assert _observer(_Api(None), UNLINKED)._unlinked(fingerprints(BOTH)) == frozenset()


def test_without_the_unlinked_bundle_the_signers_bundles_alone_decide_and_nothing_is_read() -> None:
    api = _Api(OLD)
    published = fingerprints(BOTH)
    assert _observer(api, None)._unlinked(published) == published
    assert api.paths == []
