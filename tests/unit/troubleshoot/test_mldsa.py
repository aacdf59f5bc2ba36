"""`explain` on an unbound Pod whose certificate asks for an ML-DSA key says which of the
two requirements is missing: kube-apiserver's PodCertificateMLDSA gate, or a node that
declares the PodCertificateMLDSA feature; a refused read is named, never a failure."""

from __future__ import annotations

from typing import Any

import pytest

from kube.client import ApiError
from kube.types import JSON
from troubleshoot import mldsa
from trust import keys

SIGNER = "kubernetes.io/service-serving"
GATE_ON = b'kubernetes_feature_enabled{name="PodCertificateMLDSA",stage="BETA"} 1\n'
GATE_OFF = b'kubernetes_feature_enabled{name="PodCertificateMLDSA",stage="BETA"} 0\n'
FORBIDDEN = ApiError(403, "Forbidden", {"reason": "Forbidden"})


class Reads:
    """A client that answers `/metrics` and `/api/v1/nodes` as told (an ApiError raises)."""

    def __init__(self, metrics: bytes | ApiError, nodes: list[JSON] | ApiError) -> None:
        self.metrics = metrics
        self.nodes = nodes

    def get_bytes(self, path: str, *args: Any, **kwargs: Any) -> bytes:
        assert path == "/metrics"
        if isinstance(self.metrics, ApiError):
            raise self.metrics
        return self.metrics

    def get(self, path: str, *args: Any, **kwargs: Any) -> JSON:
        assert path == "/api/v1/nodes"
        if isinstance(self.nodes, ApiError):
            raise self.nodes
        return {"items": self.nodes}


def node(name: str, *features: str) -> JSON:
    return {"metadata": {"name": name}, "status": {"declaredFeatures": list(features)}}


def pod(key_type: str = "MLDSA65", node_name: str | None = None, signer: str = SIGNER) -> JSON:
    spec: JSON = {
        "volumes": [
            {
                "name": "tls",
                "projected": {
                    "sources": [{"podCertificate": {"signerName": signer, "keyType": key_type}}]
                },
            }
        ]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "spec": spec,
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: 2 node(s) didn't match Pod's node "
                    "affinity/selector.",
                }
            ],
        },
    }


def note(client: Reads, subject: JSON) -> str:
    found = mldsa.placement(client, subject, SIGNER)  # type: ignore[arg-type]
    assert found is not None
    return found.note()


@pytest.mark.parametrize("key_type", keys.gated_key_types(mldsa.FEATURE))
def test_no_declaring_node_is_said_in_those_words(key_type: str) -> None:
    client = Reads(GATE_ON, [node("a"), node("b", "SomethingElse")])

    text = note(client, pod(key_type))

    assert f"asks for an {key_type} key" in text
    assert "no node declares PodCertificateMLDSA (of 2 nodes)" in text
    assert "--feature-gates=PodCertificateMLDSA=true" in text
    assert "the scheduler says: 0/2 nodes are available" in text
    assert "docs/post-quantum.md" in text


def test_the_api_servers_gate_off_is_said_first() -> None:
    text = note(Reads(GATE_OFF, [node("a", "PodCertificateMLDSA")]), pod())

    assert "kube-apiserver's PodCertificateMLDSA feature gate is off" in text
    assert "--min-compatibility-version=1.38" in text


def test_declaring_nodes_are_named() -> None:
    client = Reads(GATE_ON, [node("a", "PodCertificateMLDSA"), node("b")])

    text = note(client, pod())

    assert "only the 1 of 2 nodes that declare PodCertificateMLDSA can run it (a)" in text


def test_refused_reads_are_named_not_failures() -> None:
    text = note(Reads(FORBIDDEN, FORBIDDEN), pod())

    assert "only a node that declares PodCertificateMLDSA can run it" in text
    assert "cannot list nodes" in text


def test_other_pods_get_no_ml_dsa_note() -> None:
    client = Reads(GATE_ON, [])
    assert mldsa.placement(client, pod("ECDSAP256"), SIGNER) is None  # type: ignore[arg-type]
    assert mldsa.placement(client, pod(node_name="a"), SIGNER) is None  # type: ignore[arg-type]
    assert mldsa.placement(client, pod(signer="other/x"), SIGNER) is None  # type: ignore[arg-type]
