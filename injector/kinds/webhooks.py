"""Validating and mutating webhook configurations: `webhooks[*].clientConfig.caBundle`,
every webhook of the configuration; two instances of one family."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from injector.kinds.cabundle import CaBundleKind, ca_bundle_digest
from injector.targets import Slot, Target, add_op, element_name, owns, test_op


@dataclass(frozen=True)
class WebhookConfigurations(CaBundleKind):
    LEAF = ("f:webhooks", "k:*", "f:clientConfig", "f:caBundle")
    """One leaf per webhook (`k:*`); each goes to its own owner (`our_leaves`)."""

    def slots(self, raw: Mapping[str, Any]) -> tuple[Slot, ...]:
        return tuple(
            Slot(str(w.get("name", "")), ca_bundle_digest(w.get("clientConfig")))
            for w in raw.get("webhooks") or []
            if isinstance(w, Mapping)
        )

    def not_applicable(self, raw: Mapping[str, Any]) -> str | None:
        return None if self.slots(raw) else "the configuration has no webhooks"

    def our_leaves(
        self, ours: list[Mapping[str, Any]], meta: Mapping[str, Any]
    ) -> list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]]:
        """Each webhook's caBundle goes to the owner of its `clientConfig` (its url or
        service)."""
        keys = sorted(
            {
                key
                for fields in ours
                for key, item in (fields.get("f:webhooks") or {}).items()
                if isinstance(item, Mapping) and owns(item, self.LEAF[2:])
            }
        )
        hooks = [(self.LEAF[0], key, *self.LEAF[2:]) for key in keys]
        return [
            (hook, (hook[:-1],), f"webhooks[{element_name(hook[1])}].clientConfig.caBundle")
            for hook in hooks
        ]

    def slot_ops(self, target: Target, ca_bundle: str) -> list[dict[str, Any]]:
        """Each webhook's name is tested at its index: a renamed or reordered list fails
        the patch, and the next event re-plans it."""
        ops: list[dict[str, Any]] = []
        for i, slot in enumerate(target.slots):
            ops.append(test_op(f"/webhooks/{i}/name", slot.webhook))
            ops.append(add_op(f"/webhooks/{i}/clientConfig/caBundle", ca_bundle))
        return ops


VALIDATING_WEBHOOK = WebhookConfigurations(
    "ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
)
MUTATING_WEBHOOK = WebhookConfigurations(
    "MutatingWebhookConfiguration",
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
)
