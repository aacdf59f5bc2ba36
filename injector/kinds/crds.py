"""CustomResourceDefinitions: `spec.conversion.webhook.clientConfig.caBundle`, only for a
conversion webhook."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from injector.kinds.cabundle import CaBundleKind, ca_bundle_digest
from injector.targets import Slot, Target, add_op, owns, test_op

LEAF = ("f:spec", "f:conversion", "f:webhook", "f:clientConfig", "f:caBundle")


@dataclass(frozen=True)
class ConversionCRDs(CaBundleKind):
    def slots(self, raw: Mapping[str, Any]) -> tuple[Slot, ...]:
        conversion = (raw.get("spec") or {}).get("conversion") or {}
        webhook = conversion.get("webhook") or {}
        return (Slot(None, ca_bundle_digest(webhook.get("clientConfig"))),)

    def not_applicable(self, raw: Mapping[str, Any]) -> str | None:
        conversion = (raw.get("spec") or {}).get("conversion") or {}
        webhook = conversion.get("webhook") or {}
        if conversion.get("strategy") != "Webhook" or not webhook.get("clientConfig"):
            return (
                "spec.conversion.strategy is not Webhook with a webhook.clientConfig; "
                "a CRD has a caBundle only for its conversion webhook"
            )
        return None

    def leaves(self) -> tuple[tuple[str, ...], ...]:
        return (LEAF,)

    def our_leaves(
        self, ours: list[Mapping[str, Any]], meta: Mapping[str, Any]
    ) -> list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]]:
        name = "spec.conversion.webhook.clientConfig.caBundle"
        return [(LEAF, (LEAF[:-1],), name)] if any(owns(f, LEAF) for f in ours) else []

    def slot_ops(self, target: Target, ca_bundle: str) -> list[dict[str, Any]]:
        return [
            test_op("/spec/conversion/strategy", "Webhook"),
            add_op("/spec/conversion/webhook/clientConfig/caBundle", ca_bundle),
        ]


CRD = ConversionCRDs(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions"
)
