"""APIServices: `spec.caBundle`, for an aggregated API server named by `spec.service`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from injector.kinds.cabundle import CaBundleKind
from injector.targets import Slot, Target, add_op, single_slot


@dataclass(frozen=True)
class APIServices(CaBundleKind):
    LEAF = ("f:spec", "f:caBundle")
    OWNER = ("f:spec", "f:service")
    """Who names the server the caBundle verifies: its owner takes the caBundle at the
    release."""
    LEAF_NAME = "spec.caBundle"

    def slots(self, raw: Mapping[str, Any]) -> tuple[Slot, ...]:
        return single_slot(str((raw.get("spec") or {}).get("caBundle") or ""))

    def not_applicable(self, raw: Mapping[str, Any]) -> str | None:
        spec = raw.get("spec") or {}
        if not spec.get("service"):
            return (
                "a local APIService (no spec.service) is served by kube-apiserver itself "
                "and may not have a caBundle"
            )
        if spec.get("insecureSkipTLSVerify"):
            return (
                "spec.insecureSkipTLSVerify is true; kube-apiserver forbids a caBundle with "
                "it (set it to false to verify the server against the injected bundle)"
            )
        return None

    def slot_ops(self, target: Target, ca_bundle: str) -> list[dict[str, Any]]:
        return [add_op("/spec/caBundle", ca_bundle)]


API_SERVICE = APIServices("APIService", "apiregistration.k8s.io", "v1", "apiservices")
