"""Every kind the injector writes, each a type (`injector.targets.Kind`): one module per
family — `webhooks` (validating and mutating configurations), `apiservices`, `crds`
(conversion webhooks), and `injector.configmaps` (labelled ConfigMaps). The rest of the
injector loops over `ALL_KINDS` and asks the kind; a new kind is one module here, a row
in `ALL_KINDS`, its RBAC and its admission policy (docs/design.md, "Where a new kind
goes"; `tests/unit/deploy/test_injector_kinds.py` fails until all exist)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from injector.configmaps import CONFIG_MAP
from injector.kinds.apiservices import API_SERVICE
from injector.kinds.cabundle import CaBundleKind
from injector.kinds.cabundle import patch_ops as kind_patch_ops
from injector.kinds.crds import CRD
from injector.kinds.webhooks import MUTATING_WEBHOOK, VALIDATING_WEBHOOK
from injector.targets import Kind, Target

__all__ = [
    "ALL_KINDS",
    "API_SERVICE",
    "CONFIG_MAP",
    "CRD",
    "KINDS",
    "KINDS_BY_NAME",
    "MUTATING_WEBHOOK",
    "VALIDATING_WEBHOOK",
    "patch_ops",
    "path_of",
    "to_target",
]

KINDS: tuple[CaBundleKind, ...] = (VALIDATING_WEBHOOK, MUTATING_WEBHOOK, API_SERVICE, CRD)
"""The kinds with caBundle fields, each watched whole (there are few of them)."""
ALL_KINDS: tuple[Kind, ...] = (*KINDS, CONFIG_MAP)
"""Every kind the injector writes: the list, once (informers, metrics, the report)."""
KINDS_BY_NAME: Mapping[str, Kind] = {k.kind: k for k in ALL_KINDS}


def to_target(kind: Kind, raw: Mapping[str, Any]) -> Target:
    """`kind`'s record of `raw` (the informer transform)."""
    return kind.to_target(raw)


def path_of(target: Target) -> str:
    """The API path of the object `target` records."""
    return KINDS_BY_NAME[target.kind].object_path(target.name, target.namespace)


def patch_ops(target: Target, ca_bundle: str, note: str) -> list[dict[str, Any]]:
    """The JSON patch that sets every caBundle slot of `target` to `ca_bundle` (base64)."""
    kind = KINDS_BY_NAME[target.kind]
    assert isinstance(kind, CaBundleKind)
    return kind_patch_ops(kind, target, ca_bundle, note)
