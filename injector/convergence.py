"""Whether the injector's consumers hold the anchors they select: per-object states, the
per-kind counts exported as metrics, and the convergence report the managed-CA swap gates
on (docs/reference.md §11, "Convergence report"). Pure: records and JSON; no client.

What it decides:

* **One state per annotated object** (`Status.state`), from the last sync's decision:
  `current` (its output is the resolved bundle), `stale` (it is not, and a write is due
  or failed), `empty` (the selection matches no bundle; the old value is kept),
  `invalid` (bad annotation, or the object cannot carry a bundle), `conflicting`
  (another server-side apply manager owns the field; nothing is written).
* **Which anchors it selects and holds** (`selecting`, `holding`: SHA-256 of each
  anchor's DER, lowercase hex). `holding` is known without parsing the object's content:
  a current object holds its selection; any other holds what the annotation
  `targets.INJECTED_ANNOTATION`, written beside our last write, lists — when the
  content's digest still equals the one that annotation records (else nothing known).
* **Blocked**: the object cannot be written for a reason its owner owns (immutable
  ConfigMap or another not-applicable shape with a valid selection, another Apply
  manager, the API refusing the write). It has a Warning Event, and is reported apart so
  that a tenant cannot stop the cluster's CA rotation.
* **The report** (`report`): `{"anchors": {fp: {"selecting", "holding", "blocked"}},
  "kinds": {kind: {"managed", "stale", "empty", "invalid", "conflicting"}},
  "observedBundles": ["<name>@<resourceVersion>", ...]}`, compact, keys sorted, so an
  unchanged state is an unchanged annotation.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trust.bundle import anchor_ders

STATES = ("current", "stale", "empty", "invalid", "conflicting")
COUNTED = ("managed", "stale", "empty", "invalid", "conflicting")

ANNOTATION = "service-serving-signer/convergence"
"""The report Lease's annotation (JSON, see the module docstring)."""


@dataclass(frozen=True)
class Status:
    kind: str
    state: str
    selecting: frozenset[str] = frozenset()
    holding: frozenset[str] = frozenset()
    blocked: bool = False


@functools.lru_cache(maxsize=256)
def fingerprints(bundle: str) -> frozenset[str]:
    """SHA-256 (lowercase hex) of the DER of every anchor of a normalised bundle."""
    return frozenset(hashlib.sha256(der).hexdigest() for der in anchor_ders(bundle))


def counts(statuses: Iterable[Status], kinds: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per kind: managed (every annotated object) and how many are in each state that is
    not `current`."""
    out = {kind: dict.fromkeys(COUNTED, 0) for kind in kinds}
    for status in statuses:
        row = out.setdefault(status.kind, dict.fromkeys(COUNTED, 0))
        row["managed"] += 1
        if status.state in row:
            row[status.state] += 1
    return out


def report(
    statuses: Iterable[Status], kinds: Iterable[str], observed: Iterable[Mapping[str, Any]]
) -> str:
    """The report annotation's value (see the module docstring)."""
    listed = list(statuses)
    anchors: dict[str, dict[str, int]] = {}
    for status in listed:
        for fp in status.selecting:
            row = anchors.setdefault(fp, {"selecting": 0, "holding": 0, "blocked": 0})
            row["selecting"] += 1
            if fp in status.holding:
                row["holding"] += 1
            elif status.blocked:
                row["blocked"] += 1
    bundles = sorted(
        f"{(b.get('metadata') or {}).get('name', '')}@"
        f"{(b.get('metadata') or {}).get('resourceVersion', '')}"
        for b in observed
    )
    return json.dumps(
        {"anchors": anchors, "kinds": counts(listed, kinds), "observedBundles": bundles},
        sort_keys=True,
        separators=(",", ":"),
    )
