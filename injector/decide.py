"""What one sync of one annotated object decides, from its record and the cached
ClusterTrustBundles (pure: no client, no clock).

Outcomes, in the order they are checked:

1. `Ignore` — no annotation and no field of ours: the object is not ours to touch.
   `Release` — no annotation, but our field manager still owns fields (we injected
   before the owner removed the annotation): give them up by removing our managedFields
   entries, values kept, so the owner can change or remove them (`targets.release_ops`).
2. `Invalid` — the annotation is not a valid `ClusterTrustBundleSelector`, or the object
   cannot carry a caBundle (`targets.Target.not_applicable`). Nothing is written; a
   Warning Event says why. Re-decided when the object changes.
3. `Empty` — the selector is valid but picks no ClusterTrustBundle. The current caBundle
   is kept: an empty caBundle makes kube-apiserver fall back to the system roots, and
   dropping a working one because a bundle is being re-created would break every call.
   A Warning Event says so. Re-decided when a matching bundle appears.
4. `UpToDate` — every caBundle slot already holds the resolved bundle.
   `Conflict` — it does not, and another server-side apply manager owns a field we would
   write (its configuration sets caBundle or `ca.crt` too). Nothing is written (writing
   would take the field from it, and its next apply would take it back, for ever); a
   Warning Event names the manager. Re-decided when the object changes.
5. `Inject` — write `ca_bundle` to every slot: base64 of the normalised PEM for a
   caBundle field, the PEM itself for a ConfigMap's `ca.crt` (`injector.configmaps`).

A resolved bundle is the exact text `trust.selector.resolve_selector` returns
(header-less PEM, sorted, de-duplicated), so the comparison in 4 is a compare of
SHA-256 digests (the records keep digests, never content) and an object someone edited
by hand is rewritten. A ConfigMap's truststore is current by the digest annotation we
write beside it (`injector.configmaps`): tenant bytes are never parsed here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from injector.kinds import KINDS_BY_NAME
from injector.targets import (
    ANNOTATION,
    INVALID,
    NOTHING_HELD,
    Seen,
    Target,
    injected_note,
    shared,
    value_digest,
)
from trust.bundle import BundleError, earliest_expiry, fingerprints, hash_named_stable_name
from trust.convergence import ObjectConvergence
from trust.selector import (
    ClusterTrustBundleSelector,
    SelectorError,
    parse_selector_json,
    resolve_selector,
)

REASON_INVALID_SELECTOR = "InvalidCABundleSelector"
REASON_NOT_APPLICABLE = "CABundleNotApplicable"
REASON_EMPTY = "NoClusterTrustBundles"
REASON_HASH_NAMED = "HashNamedClusterTrustBundle"
REASON_CONFLICT = "CABundleOwnedByAnotherManager"
REASON_REFUSED = "CABundleWriteRefused"
REASON_CONTESTED = "CABundleContested"
REASON_FAILED = "CABundleWriteFailed"
REASON_SYNC_FAILED = "CABundleSyncFailed"

REFUSAL_FIRST = 60.0
"""Seconds a refused write waits before it is sent again unchanged (then doubling)."""
REFUSAL_MAX = 900.0
"""The longest wait between two sends of a write refused in a row."""
CONTEST_FIRST = 5.0
"""Seconds the injector waits after the first retake of a field it wrote; each further
retake doubles it, up to `CONTEST_MAX`."""
CONTEST_MAX = 300.0
CONTEST_WINDOW = 900.0
"""Retakes count in a row while each comes within this many seconds of the one before:
a fight (a second injector, a drift-correcting apply) keeps doubling the back-off, and a
hand edit a day or a month after the last is repaired after `CONTEST_FIRST` again."""
CONTEST_WARN = 2
"""The retake at which a Warning Event names the other manager (one hand edit is not a
fight)."""
FAILURE_FIRST = 2.0
"""Seconds before a write that failed for any reason but a refusal (an API error of any
status, a timeout, a failed guard, an exception) is tried again; doubling with each
failure in a row, up to `REFUSAL_MAX`."""
FAILURE_BOUND = 4
"""The failure in a row at which the object is `blocked` (its owner's to mend, named with
the last error, counted; excused when namespaced): ~14 s of retries (2 + 4 + 8 s) after
the first. Until then it is `stale` (a write is due) and holds what it selects."""


# What `decide` returns: one small frozen record per outcome; the caller matches on the
# type, and mypy sees every field.
@dataclass(frozen=True)
class Ignore:
    pass


@dataclass(frozen=True)
class Release:
    """Our field manager owns fields of an object we no longer manage."""


@dataclass(frozen=True)
class Invalid:
    reason: str
    message: str
    bundle: str = ""
    """What a valid selector resolves to on an object that cannot carry it (an immutable
    ConfigMap): a blocked holder of those anchors, not a silent one."""


@dataclass(frozen=True)
class Empty:
    selector: ClusterTrustBundleSelector
    message: str


@dataclass(frozen=True)
class UpToDate:
    bundle: str
    """The resolved bundle (PEM), for the expiry gauge."""


@dataclass(frozen=True)
class Conflict:
    bundle: str
    managers: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Inject:
    bundle: str
    ca_bundle: str
    """The value of every slot: `bundle` as the base64 text of a JSON `[]byte` field,
    or `bundle` itself for a ConfigMap."""
    sources: int
    """How many ClusterTrustBundles were unified."""
    hashed: str | None = None
    """Why its `name` selector on a hash-named bundle will stop working, or None: that
    name changes with the bundle's content, so a rotation deletes it (reference.md §4)."""


Decision = Ignore | Release | Invalid | Empty | UpToDate | Conflict | Inject


def selector_of(target: Target) -> ClusterTrustBundleSelector | None:
    """The target's valid selector, or None (no annotation or a bad one)."""
    parsed = _parse(target)
    return parsed if isinstance(parsed, ClusterTrustBundleSelector) else None


def selection_keys(selector: ClusterTrustBundleSelector) -> list[str]:
    """Index values: which ClusterTrustBundle events can change what `selector` picks."""
    if selector.name is not None:
        return [shared(f"name:{selector.name}")]
    return [shared(f"signer:{selector.signer_name}")]


def bundle_keys(bundle: Mapping[str, Any]) -> list[str]:
    """The index values a ClusterTrustBundle event re-drives (see `selection_keys`)."""
    meta = bundle.get("metadata") or {}
    keys = [f"name:{meta.get('name', '')}"]
    signer = (bundle.get("spec") or {}).get("signerName")
    if signer:
        keys.append(f"signer:{signer}")
    return keys


def decide(target: Target, bundles: Sequence[Mapping[str, Any]]) -> Decision:
    """The outcome for `target` given every cached ClusterTrustBundle; the selector is
    parsed once."""
    parsed = _parse(target)
    if parsed is None:
        return Release() if target.managed else Ignore()
    if isinstance(parsed, Invalid):
        return parsed
    selector = parsed
    shape = KINDS_BY_NAME[target.kind]
    chosen = [b for b in bundles if selector.matches(b)]
    try:
        bundle = resolve_selector(chosen, selector, allow_missing=True)
    except BundleError as err:
        return Invalid(REASON_INVALID_SELECTOR, f"the selected ClusterTrustBundles: {err}")
    stable = hash_named_stable_name(selector.name) if selector.name is not None else None
    # The stable name is advised only where that bundle exists (this project's publisher
    # keeps one for its signer; kube-controller-manager's signers have none).
    twin = stable is not None and any(
        (b.get("metadata") or {}).get("name") == stable for b in bundles
    )
    hashed = (
        f"{selector.name} is a hash-named ClusterTrustBundle, deleted when its content "
        "changes (a CA rotation); select "
        + (f"{json.dumps({'name': stable})} (updated in place) or " if twin else "")
        + "by signerName instead"
        if stable is not None
        else None
    )
    if target.not_applicable is not None:
        # Only an object that still reads the field (an immutable ConfigMap's ca.crt)
        # is a blocked holder of what it selects; one that verifies no server with it
        # (insecureSkipTLSVerify, a local APIService, no webhooks) selects nothing.
        held = bundle if KINDS_BY_NAME[target.kind].reads_when_not_applicable else ""
        return Invalid(REASON_NOT_APPLICABLE, f"{target.not_applicable}; nothing injected", held)
    if not bundle:
        return Empty(
            selector,
            f"selector {json.dumps(selector.to_json(), separators=(',', ':'), sort_keys=True)} "
            "matches no ClusterTrustBundle; "
            f"the current {shape.field.split()[0]} is kept" + (f"; {hashed}" if hashed else ""),
        )
    value = shape.value_of(bundle)
    if shape.holds(target, bundle, value):
        return UpToDate(bundle)
    if target.others:
        return Conflict(
            bundle,
            target.others,
            f"field manager(s) {', '.join(target.others)} apply {shape.field} too; the "
            "injector does not force over another manager's configuration: remove the field "
            f"from that configuration, or remove the annotation {ANNOTATION}",
        )
    return Inject(bundle, value, len(chosen), hashed)


def _parse(target: Target) -> ClusterTrustBundleSelector | Invalid | None:
    """The selector (parsed once per sync), why it is invalid, or None (no annotation)."""
    if target.annotation is None:
        return None
    if target.annotation.startswith(INVALID):  # the record says why (`selector_record`)
        return Invalid(
            REASON_INVALID_SELECTOR,
            f"annotation {ANNOTATION}: {target.annotation[1:]}; the object is left unchanged",
        )
    try:
        return parse_selector_json(target.annotation)
    except SelectorError as err:  # parse_selector_json raises nothing else
        return Invalid(
            REASON_INVALID_SELECTOR,
            f"annotation {ANNOTATION}: {err}; the object is left unchanged",
        )


@dataclass(frozen=True)
class Refusal:
    """A write the API refused (422 with causes): of `value` (its digest) to the object
    at `resource_version`, and why. Not sent again until either changes or `until` (the
    controller's clock) passes: what refused it may be mended outside the object (an
    admission policy removed), so it is tried again after REFUSAL_FIRST, doubling with
    each refusal in a row (`times`) to at most REFUSAL_MAX."""

    resource_version: str
    value: str
    reason: str
    until: float = float("inf")
    times: int = 1
    blocking: bool = True
    """The object is `blocked` meanwhile (a refusal; a failure from `FAILURE_BOUND` on);
    False: `stale`, a write still due (an early failure)."""

    def again(self, resource_version: str, value: str, reason: str, now: float) -> Refusal:
        """The refusal of the next write: one more in a row when it is the same write."""
        same = (resource_version, value) == (self.resource_version, self.value)
        return refused(resource_version, value, reason, now, self.times + 1 if same else 1)


def refused(resource_version: str, value: str, reason: str, now: float, times: int = 1) -> Refusal:
    """A refusal held until its back-off (REFUSAL_FIRST doubling, at most REFUSAL_MAX) ends."""
    delay = min(REFUSAL_FIRST * 2 ** (times - 1), REFUSAL_MAX)
    return Refusal(resource_version, value, reason, now + delay, times)


@dataclass(frozen=True)
class Contest:
    """Another manager's Update retaking a field we wrote, per object: how many retakes
    in a row, each within `CONTEST_WINDOW` of the one before (an isolated edit starts
    again at one), until when the injector leaves it alone, whether our last write since
    then landed (`wrote`: the next retake counts), and when the last retake was seen."""

    manager: str = ""
    retakes: int = 0
    quiet_until: float = 0.0
    wrote: bool = False
    last: float = 0.0

    def landed(self) -> Contest:
        """The contest once a write of ours landed: the next retake counts."""
        return Contest(self.manager, self.retakes, self.quiet_until, True, self.last)


@dataclass(frozen=True)
class Memory:
    """What the injector keeps of one object from one sync to the next: the last refused
    or failed write to it, its contest with another writer, and how many of its syncs in
    a row failed to send what they planned (`failures`, reset when a patch lands)."""

    refusal: Refusal | None = None
    contest: Contest | None = None
    failures: int = 0


def blocked_by(memory: Memory) -> bool:
    """The object's failed writes in a row (not refusals) reached `FAILURE_BOUND`."""
    return memory.failures >= FAILURE_BOUND and memory.refusal is not None


@dataclass(frozen=True)
class Write:
    """A write of `value` (the bundle `bundle`, whose anchors and earliest notAfter are
    `anchors` and `not_after`) and our `note` beside it: the act builds its JSON patch with
    `Kind.write_ops` once it has any truststore's password; and what follows from it
    for the record."""

    value: str
    bundle: str
    anchors: frozenset[str]
    not_after: float
    sources: int
    pending: ObjectConvergence
    """The object's status while the write is in flight, and if it did not land."""
    landed: Memory
    """What to remember of the object once the write landed."""
    refusal: Refusal
    """What to remember, with the API's reason, if the API refuses the write."""
    written: tuple[str, str] = ("", "")
    """(resourceVersion, value digest) of the write: what a failure is held against."""

    @property
    def note(self) -> str:
        """`targets.INJECTED_ANNOTATION` for this write."""
        return injected_note(self.value, self.anchors, self.not_after)


@dataclass(frozen=True)
class Plan:
    """Everything one sync does for one key: the patches to send (an old apply entry of
    ours to drop first, a write, or a release), and what to record — the object's
    convergence status once the act is done and what to remember of it (`status`,
    `memory`; a write that does not land says its own), the expiry gauge's value, the
    result to count, the Warning Events. `target` is the record written to (None: nothing
    to write)."""

    kind: str
    key: str
    target: Target | None = None
    status: ObjectConvergence | None = None
    expiry: float | None = None
    result: str | None = None
    warnings: tuple[tuple[str, str], ...] = ()
    cleanup: list[dict[str, Any]] | None = None
    write: Write | None = None
    release: list[dict[str, Any]] | None = None
    memory: Memory = Memory()
    """What to remember of the object after this sync, unless its write landed or was
    refused."""
    requeue_after: float | None = None
    """Seconds until the injector looks again (a contested field's back-off)."""
    now: float = 0.0
    """The clock the plan was made at (what `injector.convergence.settle` times back-offs
    from)."""
    counted: bool = True
    """The sync counts for the report's `complete` (False: a cluster-scoped object whose
    planning failed, which holds the report and is named in its `pending`)."""


def plan(seen: Seen, bundles: list[Any], memory: Memory | None = None, now: float = 0.0) -> Plan:
    """The whole of one sync's decision (pure, `_plan`); total: an exception planning one
    key (a defect) is that key's, never the loop's."""
    memory = memory or Memory()
    try:
        return _plan(seen, bundles, memory, now)
    except Exception as err:
        # A defect planning one key is that key's, never the loop's: nothing to send, a
        # Warning Event and the `failed` count, looked at again after the failure
        # back-off. A namespaced object is `invalid`, selecting nothing (a tenant's object
        # never holds the report); a cluster-scoped one does not count as synced, so the
        # report stays incomplete and names it (`pending`).
        reason = f"the injector failed to plan this object: {type(err).__name__}: {err}"
        failures = min(memory.failures + 1, 64)
        kind, name = seen.kind.kind, seen.key.partition("/")[2]
        status = ObjectConvergence(kind, name, "invalid", holding=seen.held, blocked=reason[:400])
        return Plan(
            kind,
            seen.key,
            status=status,
            result="failed",
            warnings=((REASON_SYNC_FAILED, reason[:400]),),
            memory=dataclasses.replace(memory, failures=failures),
            requeue_after=min(FAILURE_FIRST * 2 ** (failures - 1), REFUSAL_MAX),
            now=now,
            counted=seen.kind.namespaced,
        )


def _plan(seen: Seen, bundles: list[Any], memory: Memory, now: float) -> Plan:
    """The whole of one sync's decision (pure): for an object gone from its cache (forget
    it; release a departed ConfigMap), or for `seen.target` given every cached bundle, what
    the injector remembers of it (a write refused already stays blocked, unsent; a field
    another manager keeps retaking is left alone until the back-off ends) and `now`
    (monotonic seconds)."""
    kind, key = seen.kind.kind, seen.key
    target = seen.target
    refusal, contest = memory.refusal, memory.contest
    if target is None:
        departed = seen.departed
        if departed is None:
            return Plan(kind, key, now=now)
        return Plan(
            kind,
            key,
            departed,
            release=seen.release,
            result="released",
            memory=Memory(refusal, failures=memory.failures),
            now=now,
        )
    held, held_until = seen.held, seen.held_until
    # An apply entry of ours from before JSON patches owns webhooks[].name keys: drop it
    # (values stay) so the owner may rename and remove webhooks.
    cleanup = (
        seen.cleanup
        if target.annotation is not None and any(op == "Apply" for _, op in target.owned)
        else None
    )
    base = Plan(kind, key, target, cleanup=cleanup, memory=memory, now=now)
    name = key.partition("/")[2]  # the report's name: `<namespace>/<name>` or `<name>`
    match decide(target, bundles):
        case Inject(bundle=bundle, ca_bundle=value, sources=sources, hashed=hashed):
            fps = fingerprints(bundle)
            written = (target.resource_version, value_digest(value))
            # A refused or failed write is not sent again unchanged before its back-off
            # ends, nor, once the failures block the object, changed (a tenant rewriting
            # its object cannot make the injector write at its pace).
            if (
                refusal is not None
                and now < refusal.until
                and ((refusal.resource_version, refusal.value) == written or blocked_by(memory))
            ):
                blocked = refusal.reason if refusal.blocking else None
                status = ObjectConvergence(kind, name, "stale", fps, held, blocked=blocked)
                return dataclasses.replace(
                    base, status=status, expiry=held_until, requeue_after=refusal.until - now
                )
            # A retake: another manager's Update owns the field since our last write
            # landed. The back-off doubles from CONTEST_FIRST, at most CONTEST_MAX.
            fight = contest
            if contest is not None and contest.wrote and target.taker:
                recent = contest.retakes and now - contest.last <= CONTEST_WINDOW
                retakes = contest.retakes + 1 if recent else 1
                delay = min(CONTEST_FIRST * 2 ** (retakes - 1), CONTEST_MAX)
                fight = Contest(target.taker, retakes, now + delay, last=now)
            if fight is not None and now < fight.quiet_until:
                warn = fight != contest and fight.retakes == CONTEST_WARN
                note = (
                    f"field manager {fight.manager} keeps writing the {seen.kind.field} "
                    f"the injector keeps ({fight.retakes} times since its write); the "
                    f"injector waits (up to {int(CONTEST_MAX)} s between writes) instead of "
                    "fighting: stop the other writer, or remove the annotation "
                    f"{ANNOTATION}"
                )
                return dataclasses.replace(
                    base,
                    status=ObjectConvergence(
                        kind,
                        name,
                        "conflicting",
                        fps,
                        held,
                        blocked=f"contested by {fight.manager}",
                    ),
                    expiry=held_until,
                    result="contested" if fight != contest else None,
                    warnings=((REASON_CONTESTED, note),) if warn else (),
                    memory=Memory(refusal, fight),
                    requeue_after=fight.quiet_until - now,
                )
            expiry = earliest_expiry(bundle).timestamp()
            # The refusal this write becomes if the API refuses it (the record adds the
            # API's reason): one more in a row when it is the same write.
            again = (
                refusal.again(*written, "", now)
                if refusal is not None
                else refused(*written, "", now)
            )
            return dataclasses.replace(
                base,
                status=ObjectConvergence(kind, name, "current", fps, fps),
                expiry=expiry,
                result="injected",
                warnings=((REASON_HASH_NAMED, hashed),) if hashed else (),
                write=Write(
                    value,
                    bundle,
                    fps,
                    expiry,
                    sources,
                    pending=ObjectConvergence(kind, name, "stale", fps, held),
                    landed=Memory(contest=(contest or Contest()).landed()),
                    refusal=again,
                    written=written,
                ),
            )
        case Invalid(reason=reason, message=message, bundle=bundle):
            selecting = fingerprints(bundle) if bundle else frozenset()
            status = ObjectConvergence(kind, name, "invalid", selecting, held, blocked=message)
            return dataclasses.replace(
                base,
                status=status,
                expiry=held_until,
                result="invalid",
                warnings=((reason, message),),
            )
        case Empty(message=message):
            # It keeps what it holds: it still selects every anchor of the bundles those
            # anchors are in now (a rotation adds the new root to them), blocked — an
            # admin's object so left holds the swap, named; a tenant's is excused.
            found = [
                fingerprints(str((b.get("spec") or {}).get("trustBundle") or ""))
                for b in (bundles if held else ())
            ]
            kept = frozenset().union(*(f for f in found if f & held)) or NOTHING_HELD
            status = ObjectConvergence(
                kind, name, "empty", kept, held, blocked=message if kept - held else None
            )
            return dataclasses.replace(
                base,
                status=status,
                expiry=held_until,
                result="empty",
                warnings=((REASON_EMPTY, message),),
            )
        case UpToDate(bundle=bundle):
            fps = fingerprints(bundle)
            return dataclasses.replace(
                base,
                status=ObjectConvergence(kind, name, "current", fps, fps),
                expiry=earliest_expiry(bundle).timestamp(),
                result="unchanged",
            )
        case Conflict(bundle=bundle, message=message):
            status = ObjectConvergence(
                kind, name, "conflicting", fingerprints(bundle), held, blocked=message
            )
            return dataclasses.replace(
                base,
                status=status,
                expiry=held_until,
                result="conflict",
                warnings=((REASON_CONFLICT, message),),
            )
        case Release():
            return dataclasses.replace(base, release=seen.release, result="released")
    return base  # Ignore: not ours
