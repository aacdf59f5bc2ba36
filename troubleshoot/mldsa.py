"""Why a Pod whose certificate asks for an ML-DSA key is not scheduled (Kubernetes 1.38).

A `podCertificate` projection with `keyType: MLDSA44|MLDSA65|MLDSA87` needs two things
before kubelet ever makes a request (docs/post-quantum.md, "Turning it on"):

1. kube-apiserver's `PodCertificateMLDSA` feature gate: on with `--feature-gates`, or by
   default once the control plane runs with `--min-compatibility-version=1.38`. With it
   off the Pod is refused at creation; a Pod that exists was created while it was on.
2. A node that declares the node feature `PodCertificateMLDSA` (`status.declaredFeatures`,
   Node Declared Features): the scheduler places the Pod only there, and a 1.38 kubelet
   declares it only with its own `PodCertificateMLDSA` gate on.

So for an unbound Pod asking for ML-DSA, `explain` reads the API server's gate (its
`kubernetes_feature_enabled` metric, when `/metrics` may be read) and the Nodes' declared
features (when Nodes may be listed) and says which one is missing, in those words. A read
that is refused is named, never a failure: explain runs with namespace `view`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kube.client import ApiError, Client
from kube.types import JSON
from troubleshoot.access import Forbidden
from trust import keys

# One name for the kube-apiserver gate, the kubelet gate and the declared node feature.
FEATURE = keys.MLDSA_GATE
DOC = "docs/post-quantum.md"

_GATE_SAMPLE = re.compile(
    r'^kubernetes_feature_enabled\{[^}]*name="' + FEATURE + r'"[^}]*\}\s+(\S+)$', re.M
)


def requested_mldsa(pod: JSON, signer_name: str) -> str | None:
    """The ML-DSA key type the Pod's podCertificate projection for `signer_name` asks
    for, or None (no such projection, or a classical key type)."""
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        for source in (volume.get("projected") or {}).get("sources") or ():
            projection: Mapping[str, Any] = source.get("podCertificate") or {}
            if projection.get("signerName") != signer_name:
                continue
            key_type = str(projection.get("keyType") or "")
            if key_type in keys.gated_key_types(FEATURE):
                return key_type
    return None


@dataclass(frozen=True)
class Placement:
    """What is known of the two requirements for one Pod."""

    key_type: str
    # kube-apiserver's gate: True/False, None when its /metrics could not be read.
    apiserver_gate: bool | None
    # Nodes that declare the feature, of how many; None when Nodes could not be listed.
    declaring: tuple[str, ...] | None
    nodes: int | None
    scheduler_says: str | None
    nodes_refused: Forbidden | None = None

    def note(self) -> str:
        asks = f"the Pod asks for an {self.key_type} key"
        if self.apiserver_gate is False:
            text = (
                f"{asks} but kube-apiserver's {FEATURE} feature gate is off: turn it on "
                f"(--feature-gates={FEATURE}=true), or run the control plane with "
                "--min-compatibility-version=1.38, which turns it on by default"
            )
        elif self.declaring is None:
            refused = f" (cannot tell which: {self.nodes_refused})" if self.nodes_refused else ""
            text = (
                f"{asks} and is not scheduled: only a node that declares {FEATURE} "
                f"can run it{refused}"
            )
        elif not self.declaring:
            text = (
                f"{asks} and is not scheduled: no node declares {FEATURE} "
                f"(of {self.nodes} nodes); each node's kubelet (1.38+) declares it only "
                f"with --feature-gates={FEATURE}=true"
            )
        else:
            text = (
                f"{asks} and is not scheduled: only the {len(self.declaring)} of "
                f"{self.nodes} nodes that declare {FEATURE} can run it "
                f"({', '.join(self.declaring)})"
            )
        if self.scheduler_says:
            text += f"; the scheduler says: {self.scheduler_says}"
        return f"{text} (see {DOC})"


def placement(client: Client, pod: JSON, signer_name: str) -> Placement | None:
    """The requirements of an unbound Pod asking for ML-DSA; None for any other Pod."""
    key_type = requested_mldsa(pod, signer_name)
    if key_type is None or (pod.get("spec") or {}).get("nodeName"):
        return None
    declaring, nodes, refused = _declaring_nodes(client)
    return Placement(
        key_type,
        _apiserver_gate(client),
        declaring,
        nodes,
        _scheduler_says(pod),
        refused,
    )


def _apiserver_gate(client: Client) -> bool | None:
    try:
        text = client.get_bytes("/metrics").decode(errors="replace")
    except ApiError:
        return None
    found = _GATE_SAMPLE.search(text)
    return None if found is None else float(found.group(1)) == 1.0


def _declaring_nodes(client: Client) -> tuple[tuple[str, ...] | None, int | None, Forbidden | None]:
    try:
        listed = client.get("/api/v1/nodes")
    except ApiError as err:
        if err.status in (401, 403):
            return None, None, Forbidden("list", "nodes", "", "", namespaced=False)
        raise
    items = listed.get("items") or []
    declaring = tuple(
        str((node.get("metadata") or {}).get("name"))
        for node in items
        if FEATURE in ((node.get("status") or {}).get("declaredFeatures") or ())
    )
    return declaring, len(items), None


def _scheduler_says(pod: JSON) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = str(condition.get("message") or "").strip()
            return message or None
    return None
