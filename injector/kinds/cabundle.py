"""What the three caBundle families share (webhook configurations, APIServices,
conversion CRDs): the record an informer keeps, base64 of the bundle in every slot, and
a write that is one guarded JSON patch of caBundle leaves (`injector.targets` says why).

A family says only what differs: its slots (`slots`), when an object cannot carry a
caBundle (`not_applicable`), the leaf it writes and where its owner is named (`LEAF`,
`OWNER`; a family with a leaf per list entry implements `leaves` and `our_leaves`), and
the operations that set each slot (`slot_ops`)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from injector.targets import (
    INJECTED_ANNOTATION,
    Kind,
    Slot,
    Target,
    add_op,
    annotation_of,
    is_current,
    owned_by_us,
    owns,
    pointer,
    releasing,
    shared,
    test_op,
    value_digest,
    writers,
)


@dataclass(frozen=True)
class CaBundleKind(Kind):
    """A kind with caBundle fields, watched whole (there are few such objects)."""

    LEAF: ClassVar[tuple[str, ...]] = ()
    """The fieldsV1 path of the one caBundle leaf we write (`k:*`: any list entry)."""
    OWNER: ClassVar[tuple[str, ...]] = ()
    """Where the owner of `LEAF` is named (who takes it at the release)."""
    LEAF_NAME: ClassVar[str] = ""
    """`LEAF` as a log line names it."""

    def slots(self, raw: Mapping[str, Any]) -> tuple[Slot, ...]:
        raise NotImplementedError

    def not_applicable(self, raw: Mapping[str, Any]) -> str | None:
        """Why no caBundle can be set on the object (None: it can)."""
        raise NotImplementedError

    def leaves(self) -> tuple[tuple[str, ...], ...]:
        """The fieldsV1 paths of the leaves we write (`k:*`: any list entry)."""
        return (self.LEAF,)

    def our_leaves(
        self, ours: list[Mapping[str, Any]], meta: Mapping[str, Any]
    ) -> list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]]:
        owned = any(owns(fields, self.LEAF) for fields in ours)
        return [(self.LEAF, (self.OWNER,), self.LEAF_NAME)] if owned else []

    def slot_ops(self, target: Target, ca_bundle: str) -> list[dict[str, Any]]:
        """The guarded operations that set every slot to `ca_bundle`."""
        raise NotImplementedError

    def to_target(self, raw: Mapping[str, Any]) -> Target:
        meta = raw.get("metadata") or {}
        return Target(
            kind=self.kind,
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
            annotation=annotation_of(meta),
            slots=self.slots(raw),
            not_applicable=self.not_applicable(raw),
            owned=owned_by_us(meta),
            **writers(meta, self.leaves()),
            resource_version=str(meta.get("resourceVersion", "")),
            **releasing(self, meta),
        ).with_holding(meta)

    def value_of(self, bundle: str) -> str:
        return base64.b64encode(bundle.encode("ascii")).decode("ascii")

    def holds(self, target: Target, bundle: str, value: str) -> bool:
        return is_current(target, value)

    def write_ops(
        self, target: Target, value: str, bundle: str, note: str, password: str
    ) -> list[dict[str, Any]]:
        return patch_ops(self, target, value, note)


def patch_ops(
    kind: CaBundleKind, target: Target, ca_bundle: str, note: str
) -> list[dict[str, Any]]:
    """The JSON patch that sets every slot to `ca_bundle` (base64) and
    `INJECTED_ANNOTATION` to `note`, guarded by the uid (and the family's own guards)."""
    return [
        test_op("/metadata/uid", target.uid),
        add_op(f"/metadata/annotations/{pointer(INJECTED_ANNOTATION)}", note),
        *kind.slot_ops(target, ca_bundle),
    ]


def ca_bundle_digest(client_config: Any) -> str:
    """`value_digest` of a clientConfig's caBundle ("" when there is none)."""
    if not isinstance(client_config, Mapping):
        return shared(value_digest(""))
    return shared(value_digest(str(client_config.get("caBundle") or "")))
