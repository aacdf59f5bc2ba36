"""The convergence report: the one contract between the caBundle injector, which writes
it, and the managed CA, which holds a swap on it (docs/reference.md §11, §12).

Why here: no controller imports another (tests/unit/project/test_layering.py), so a
contract between two of them lives below both; it speaks of trust anchors (certificate
fingerprints), which `kube/` does not know, so it is `trust/`. Only this module says what
the report means; the injector (`injector.convergence`, `injector.controller`) fills it,
the managed CA (`managedca.report`) reads it. Pure: values and JSON, no client.

Public API:

* **Where** (the name rule, docs/inject.md "The convergence report"): `report_lease(
  namespace, name=REPORT_NAME) -> kube.leases.LeaseRef`. Both sides call it with the
  process's `--leader-elect-resource-namespace` (default: the Pod's own namespace) and
  `--managed-ca-injector-report` (default `REPORT_NAME`,
  `service-serving-signer-injector-convergence`). The name depends on no Lease name, no
  `--controllers` set and no Helm release name, so the writer and the reader agree in
  every documented install (one process; config/injector beside config/default or
  config/managed; the chart under any release name) with no flag passed.
* **When**: the writer renews every `RENEW_SECONDS` and gives `leaseDurationSeconds:
  DURATION_SECONDS`; the reader counts the report live for the Lease's
  `leaseDurationSeconds` (`lease_duration`: `DURATION_SECONDS` when it gives none) after
  it last saw its renewTime change (its own clock, never the writer's). A duration
  outside `MIN_DURATION_SECONDS..MAX_DURATION_SECONDS` is a `ReportError`: the report is
  ignored (it converges nothing; the managed CA says so in a Warning Event).
* **What**: `REPORT_ANNOTATION` on that Lease holds `encode(ConvergenceReport)`;
  `parse(text)` gives it back or raises `ReportError` (never anything else: every count,
  name, list and the text itself is bounded, see the `MAX_*` constants). Anchors are named by
  `trust.bundle.fingerprint` (sha256 of the DER, lowercase hex), the project's one.
* **The writer's side**: one `ObjectConvergence` per managed object (state, what it
  selects and holds, why it is blocked), summed by `summarise(...)`.
* **The reader's side**: `converged(report, fingerprint)` — THE rule the swap gate
  applies; `ConvergenceReport.lagging()` names the objects that hold it.

The report (JSON, keys sorted, compact; unknown keys are ignored, so it may grow):

    {"complete": true,
     "anchors": {"<fp>": {"selecting": 3, "holding": 2, "blocked": 1}},
     "kinds": {"ConfigMap": {"managed": 4, "current": 2, "stale": 1, "blocked": 1,
                             "lagging": [{"name": "ns/web-ca", "state": "blocked",
                                          "reason": "the API refused the write: ..."}]}},
     "observedAnchors": ["<fp>", ...],
     "pending": ["ConfigMap/ns/web-ca", ...]}

* `complete`: every object the injector manages has been synced at least once since
  this leader started leading (after a restart or a leader change the statuses it has
  are a partial view, and nothing converges until this is true).
* `anchors[fp]`: of the objects selecting that anchor, how many hold it, and how many
  neither hold it nor can: `blocked` by their owner (an immutable ConfigMap, the API
  refusing the write, another field manager) **and namespaced** — a tenant's object
  never holds the cluster's rotation. A blocked cluster-scoped object (webhook
  configuration, APIService, CRD) is not counted as blocked: it holds the gate, and is
  named in `lagging` for an admin to fix.
* `kinds[kind]`: `managed` objects, of which `current` (hold what they select), `stale`
  (a write is due), `blocked` (see above, any scope); `lagging` names the first
  `MAX_LAGGING` stale or blocked ones (blocked first, then by name), a blocked one with
  its reason.
* `observedAnchors`: the anchors every ClusterTrustBundle holding them (any signer) has
  been observed for: the injector has seen the bundle's version and every object that may
  select it has been synced since. An anchor is observed only when every cached bundle
  containing it is (per anchor, as convergence is). An anchor seen here but in no
  `anchors` row is selected by nothing: converged.
* `pending` (only while `complete` is false; absent otherwise, and from older writers):
  the keys (`<Kind>/<name>` or `<Kind>/<namespace>/<name>`) of the first `MAX_LAGGING`
  objects, by key, not synced since this leader started leading — what keeps the report
  incomplete ("(not leading)" before it leads). Each key is at most `MAX_KEY` characters.
  Every sync of a key ends classified (the injector's sync raises nothing), so a key
  leaves this list at its first sync.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kube.leases import LeaseRef
from trust.bundle import is_fingerprint

REPORT_ANNOTATION = "service-serving-signer/convergence"
"""The report Lease's annotation: `encode(ConvergenceReport)`."""

REPORT_NAME = "service-serving-signer-injector-convergence"
"""The report Lease's name unless `--managed-ca-injector-report` says otherwise."""

RENEW_SECONDS = 10.0
"""The writer renews at least this often (and at once, at most once a second, on change)."""
DURATION_SECONDS = 45
"""The writer's `leaseDurationSeconds`: the reader counts a report live this long after
its renewTime last changed (and this long for a Lease that gives no duration)."""
MIN_DURATION_SECONDS = 15
MAX_DURATION_SECONDS = 300
"""The `leaseDurationSeconds` a reader honours. Shorter than `MIN_DURATION_SECONDS` (a
renewal every `RENEW_SECONDS`, with room for one late) a live report would flap stale;
longer than `MAX_DURATION_SECONDS` a dead (or forged) report would stay live for that
long: the managed CA's replica reports are bounded alike (`managedca.report`)."""

MAX_TEXT = 256 * 1024  # the API's limit on all of an object's annotations together
MAX_ANCHORS = 1024
MAX_KINDS = 16
MAX_LAGGING = 10
MAX_COUNT = 10_000_000
MAX_NAME = 317  # <namespace (63)>/<name (253)>
MAX_REASON = 512
MAX_KEY = 64 + 1 + MAX_NAME  # <Kind>/<namespace>/<name>

_KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
STATES = ("current", "stale", "blocked")


class ReportError(ValueError):
    """The report cannot be read; `str()` says why (one line)."""


def report_lease(namespace: str, name: str = REPORT_NAME) -> LeaseRef:
    """Where the convergence report lives: THE rule, applied by the writer and the reader
    alike (module docstring, "Where")."""
    return LeaseRef(namespace, name or REPORT_NAME)


def lease_duration(value: object) -> int:
    """How long (seconds) the reader counts the report live after its renewTime last
    changed: the Lease's `leaseDurationSeconds` (`value`; None: `DURATION_SECONDS`).
    Raises `ReportError` for anything but a whole number within the bounds."""
    if value is None:
        return DURATION_SECONDS
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReportError(f"leaseDurationSeconds {str(value)[:40]!r} is not a whole number")
    if not MIN_DURATION_SECONDS <= value <= MAX_DURATION_SECONDS:
        raise ReportError(
            f"leaseDurationSeconds {value} is outside "
            f"{MIN_DURATION_SECONDS}..{MAX_DURATION_SECONDS}"
        )
    return value


# --- the report ------------------------------------------------------------------------


@dataclass(frozen=True)
class AnchorCounts:
    """Of the objects selecting one anchor: how many hold it, and how many are excused
    (blocked by their owner, namespaced, not holding it)."""

    selecting: int = 0
    holding: int = 0
    blocked: int = 0

    @property
    def lagging(self) -> int:
        """Objects that select the anchor, do not hold it, and hold the gate."""
        return self.selecting - self.holding - self.blocked


@dataclass(frozen=True)
class Lagging:
    """One object that does not hold what it selects: `reason` is why it cannot (blocked)
    or None (stale: a write is due)."""

    name: str  # `<namespace>/<name>` or `<name>`
    reason: str | None = None

    @property
    def state(self) -> str:
        return "stale" if self.reason is None else "blocked"

    @property
    def excused(self) -> bool:
        """A tenant's object (namespaced) blocked by its owner: it never holds the swap,
        and a wait must not blame it (the same rule as `summarise`'s anchor counts)."""
        return self.reason is not None and "/" in self.name


@dataclass(frozen=True)
class KindCounts:
    managed: int = 0
    current: int = 0
    stale: int = 0
    blocked: int = 0
    lagging: tuple[Lagging, ...] = ()


@dataclass(frozen=True)
class ConvergenceReport:
    complete: bool = False
    anchors: Mapping[str, AnchorCounts] = field(default_factory=dict)
    kinds: Mapping[str, KindCounts] = field(default_factory=dict)
    observed: frozenset[str] = frozenset()
    pending: tuple[str, ...] = ()
    """While incomplete: the keys of the first objects not yet synced (module docstring)."""

    def lagging(self) -> list[tuple[str, Lagging]]:
        """(kind, object) of every named lagging object, kinds in name order."""
        return [(kind, lag) for kind in sorted(self.kinds) for lag in self.kinds[kind].lagging]

    def holding(self) -> list[tuple[str, Lagging]]:
        """(kind, object) of every named lagging object that holds the swap (not
        `excused`), kinds in name order."""
        return [(kind, lag) for kind, lag in self.lagging() if not lag.excused]


def converged(report: ConvergenceReport, fingerprint: str) -> bool:
    """Whether every object the injector manages that selects the anchor `fingerprint`
    holds it (or is a tenant's and blocked): only on a `complete` report, and only once
    the injector has observed a bundle holding that anchor (an anchor no object selects
    then counts as converged)."""
    if not report.complete or fingerprint not in report.observed:
        return False
    row = report.anchors.get(fingerprint)
    return row is None or row.lagging <= 0


# --- the writer's side -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObjectConvergence:
    """One managed object as its last sync left it. `state` is the injector's own
    (`current`, `stale`, `empty`, `invalid`, `conflicting`: its metrics count them);
    `blocked` says why its owner must act (None: not blocked)."""

    kind: str
    name: str  # `<namespace>/<name>` or `<name>`
    state: str
    selecting: frozenset[str] = frozenset()
    holding: frozenset[str] = frozenset()
    blocked: str | None = None

    @property
    def namespaced(self) -> bool:
        return "/" in self.name

    @property
    def standing(self) -> str | None:
        """The report's word for it: `current`, `blocked`, `stale`, or None (it holds no
        anchor back: it selects nothing — an empty selection, a bad selector, an object
        that verifies nothing with a caBundle — or holds all it selects)."""
        if self.state == "current":
            return "current"
        if not self.selecting - self.holding:
            return None
        return "stale" if self.blocked is None else "blocked"


def summarise(
    objects: Iterable[ObjectConvergence],
    *,
    kinds: Iterable[str] = (),
    observed: Iterable[str] = (),
    complete: bool,
    pending: Iterable[str] = (),
) -> ConvergenceReport:
    """The report of `objects` (every kind in `kinds` gets a row, even empty)."""
    anchors: dict[str, list[int]] = {}
    rows: dict[str, list[int]] = {kind: [0, 0, 0, 0] for kind in kinds}
    lagging: dict[str, list[Lagging]] = {}
    for obj in objects:
        excused = obj.blocked is not None and obj.namespaced
        for fp in obj.selecting:
            row = anchors.setdefault(fp, [0, 0, 0])
            row[0] += 1
            if fp in obj.holding:
                row[1] += 1
            elif excused:
                row[2] += 1
        counts = rows.setdefault(obj.kind, [0, 0, 0, 0])
        counts[0] += 1
        standing = obj.standing
        if standing is not None:
            counts[1 + STATES.index(standing)] += 1
        if standing in ("stale", "blocked"):
            lagging.setdefault(obj.kind, []).append(Lagging(obj.name, obj.blocked))
    return ConvergenceReport(
        complete,
        {fp: AnchorCounts(*row) for fp, row in anchors.items()},
        {
            kind: KindCounts(
                counts[0], counts[1], counts[2], counts[3], _first_lagging(lagging.get(kind, []))
            )
            for kind, counts in rows.items()
        },
        frozenset(observed),
        () if complete else tuple(pending)[:MAX_LAGGING],
    )


def _first_lagging(lagging: list[Lagging]) -> tuple[Lagging, ...]:
    return tuple(sorted(lagging, key=lambda lag: (lag.reason is None, lag.name))[:MAX_LAGGING])


# --- the wire --------------------------------------------------------------------------


def encode(report: ConvergenceReport) -> str:
    """The annotation's value. What does not fit the bounds is cut (names and reasons
    shortened, lagging lists cut to `MAX_LAGGING`); a report with more anchors than
    `MAX_ANCHORS` is written incomplete, so that nothing converges on a cut view."""
    anchors = sorted(report.anchors.items())
    observed = sorted(report.observed)
    fits = len(anchors) <= MAX_ANCHORS and len(observed) <= MAX_ANCHORS
    kinds = sorted(report.kinds.items())[:MAX_KINDS]
    value = {
        "complete": report.complete and fits,
        "anchors": {
            fp: {
                "selecting": _count(c.selecting),
                "holding": _count(c.holding),
                "blocked": _count(c.blocked),
            }
            for fp, c in anchors[:MAX_ANCHORS]
        },
        "kinds": {kind: _encode_kind(row) for kind, row in kinds},
        "observedAnchors": observed[:MAX_ANCHORS],
    }
    if not value["complete"] and report.pending:
        value["pending"] = [key[:MAX_KEY] for key in report.pending[:MAX_LAGGING]]
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _count(n: int) -> int:
    return max(0, min(n, MAX_COUNT))


def _encode_kind(row: KindCounts) -> dict[str, Any]:
    lagging = []
    for lag in row.lagging[:MAX_LAGGING]:
        entry = {"name": lag.name[:MAX_NAME], "state": lag.state}
        if lag.reason is not None:
            entry["reason"] = lag.reason[:MAX_REASON]
        lagging.append(entry)
    return {
        "managed": _count(row.managed),
        "current": _count(row.current),
        "stale": _count(row.stale),
        "blocked": _count(row.blocked),
        "lagging": lagging,
    }


def parse(text: object) -> ConvergenceReport:
    """The report an annotation holds. Raises `ReportError` for anything that is not a
    report within the bounds (and for nothing else); unknown keys are ignored, a missing
    `complete` is False."""
    if not isinstance(text, str):
        raise ReportError("the report is not a string")
    if len(text) > MAX_TEXT:
        raise ReportError(f"the report is over {MAX_TEXT} bytes")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise ReportError(f"the report is not JSON: {str(err)[:80]}") from None
    doc = _mapping(value, "the report")
    complete = doc.get("complete", False)
    if not isinstance(complete, bool):
        raise ReportError("complete: not a boolean")
    anchors = {
        _fingerprint(fp, "anchors"): _anchor(row, fp)
        for fp, row in _items(doc.get("anchors", {}), "anchors", MAX_ANCHORS)
    }
    kinds = {
        _kind(kind): _kind_row(row, kind)
        for kind, row in _items(doc.get("kinds", {}), "kinds", MAX_KINDS)
    }
    observed = frozenset(
        _fingerprint(fp, "observedAnchors")
        for fp in _list(doc.get("observedAnchors", []), "observedAnchors", MAX_ANCHORS)
    )
    pending = tuple(_key(key) for key in _list(doc.get("pending", []), "pending", MAX_LAGGING))
    return ConvergenceReport(complete, anchors, kinds, observed, pending)


def _key(value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY:
        raise ReportError(f"pending: a key is not a string of 1..{MAX_KEY}")
    return value


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ReportError(f"{where}: not an object")
    return value


def _items(value: object, where: str, limit: int) -> list[tuple[str, Any]]:
    items = list(_mapping(value, where).items())
    if len(items) > limit:
        raise ReportError(f"{where}: more than {limit} entries")
    return items


def _list(value: object, where: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise ReportError(f"{where}: not a list")
    if len(value) > limit:
        raise ReportError(f"{where}: more than {limit} entries")
    return value


def _fingerprint(value: object, where: str) -> str:
    if not isinstance(value, str) or not is_fingerprint(value):
        raise ReportError(f"{where}: {str(value)[:80]!r} is not a sha256 fingerprint")
    return value


def _kind(value: str) -> str:
    if not _KIND.fullmatch(value):
        raise ReportError(f"kinds: {value[:80]!r} is not a kind")
    return value


def _int(row: Mapping[str, Any], key: str, where: str) -> int:
    value = row.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ReportError(f"{where}.{key}: not a count (0..{MAX_COUNT})")
    return value


def _anchor(value: object, fp: str) -> AnchorCounts:
    where = f"anchors[{fp[:16]}]"
    row = _mapping(value, where)
    counts = AnchorCounts(*(_int(row, k, where) for k in ("selecting", "holding", "blocked")))
    if counts.holding + counts.blocked > counts.selecting:
        raise ReportError(f"{where}: holding + blocked exceeds selecting")
    return counts


def _kind_row(value: object, kind: str) -> KindCounts:
    where = f"kinds[{kind}]"
    row = _mapping(value, where)
    managed, current, stale, blocked = (
        _int(row, k, where) for k in ("managed", "current", "stale", "blocked")
    )
    if current + stale + blocked > managed:
        raise ReportError(f"{where}: current + stale + blocked exceeds managed")
    lagging = tuple(
        _lagging(entry, where) for entry in _list(row.get("lagging", []), where, MAX_LAGGING)
    )
    return KindCounts(managed, current, stale, blocked, lagging)


def _lagging(value: object, where: str) -> Lagging:
    entry = _mapping(value, f"{where}.lagging")
    name, state, reason = entry.get("name"), entry.get("state"), entry.get("reason")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise ReportError(f"{where}.lagging: a name is not a string of 1..{MAX_NAME}")
    if state == "stale":
        return Lagging(name)
    if state != "blocked" or not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ReportError(f"{where}.lagging[{name[:80]}]: not stale, nor blocked with a reason")
    return Lagging(name, reason)
