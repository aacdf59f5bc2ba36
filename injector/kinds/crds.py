"""CustomResourceDefinitions: `spec.conversion.webhook.clientConfig.caBundle`, only for a
conversion webhook."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from injector.kinds.cabundle import CaBundleKind, ca_bundle_digest
from injector.targets import Slot, Target, add_op, test_op


@dataclass(frozen=True)
class ConversionCRDs(CaBundleKind):
    LEAF = ("f:spec", "f:conversion", "f:webhook", "f:clientConfig", "f:caBundle")
    OWNER = LEAF[:-1]
    LEAF_NAME = "spec.conversion.webhook.clientConfig.caBundle"

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

    def slot_ops(self, target: Target, ca_bundle: str) -> list[dict[str, Any]]:
        return [
            test_op("/spec/conversion/strategy", "Webhook"),
            add_op("/spec/conversion/webhook/clientConfig/caBundle", ca_bundle),
        ]


CRD = ConversionCRDs(
    "CustomResourceDefinition", "apiextensions.k8s.io", "v1", "customresourcedefinitions"
)
