"""The objects whose fields the injector keeps, as compact records, and what every kind
shares: the `Kind` protocol each family implements (`injector.kinds`: webhook
configurations, APIServices, conversion CRDs; `injector.configmaps`), and the
managedFields logic (who else writes our leaves, what we own, the release's handover).

What it decides (pure; no client):

* **What a kind is** (`Kind`): where it lives in the API and how it is watched; each
  family says where its fields are, when an object cannot carry one, and how a write is
  made. Nothing here branches on which kind it is.
* **The record an informer keeps** (`Target`): kind, name, uid, our annotation's value
  (at most `MAX_ANNOTATION` characters of it), the SHA-256 of each slot's current
  caBundle, and the few fields that say whether a caBundle may be set at all. Digests,
  never content: a CRD's schema can be hundreds of KiB, and a ConfigMap 1 MiB.
* **What a sync reads for one key** (`read`, over the informers' caches): the record
  (or a departed ConfigMap's), what our note says it holds, and the patches that would
  give up our fields — everything the plan (`injector.decide.plan`) reads of the object.
* **When a caBundle cannot be set**, so the object is left alone with a reason instead
  of a write kube-apiserver would reject: a local APIService (no `spec.service`), an
  APIService with `insecureSkipTLSVerify: true` (validation forbids both together), a
  CRD whose conversion strategy is not `Webhook`.
* **The write** (`Kind.write_ops`; `injector.kinds.cabundle.patch_ops` for caBundles):
  a JSON patch (RFC 6902) under the field manager `FIELD_MANAGER`, guarded by `test`
  operations (the object's uid, each webhook's name at its index, a CRD's conversion
  strategy) and setting only caBundle leaves. Such an
  Update entry in managedFields owns exactly those leaves: no list key, no `.` of a
  webhook entry, so a GitOps owner's server-side apply may rename or remove webhooks
  while the annotation is on (server-side apply's list keys, owned by an apply of ours,
  made that a 422). No `force`: a patch takes nothing another manager applies, because
  the decision does not write when one does (`others`).
* **The release** (`release_ops`): the values stay (an admission webhook with
  `failurePolicy: Fail`, an APIService or a Gateway's ConfigMap keeps working) and each
  caBundle leaf our entry owns is handed to the object's owner (`handover_of`): added to
  the fieldsV1 of the owner's existing managedFields entry, in the same patch that removes
  ours, so the owner's next server-side apply keeps the value if its configuration sets
  one and removes it if not, like any field it applies. A ConfigMap's `ca.crt` and
  truststore key go the same way, to the owner of its data (`injector.configmaps`). A
  leaf nobody else can take stays unowned, as before (logged). The same patch removes
  our note (`INJECTED_ANNOTATION`, tested against its value: `Target.note`) unless
  another manager owns it — a ConfigMap's note and truststore digest untested
  (`Target.dropped`: its records keep no text) —, and the mark label goes.
* **Who else applies our leaves** (`others`): the names of other `Apply` managers whose
  managedFields own a caBundle (or `ca.crt`, or the truststore key) we would write. Such
  an object is never written: its owner's configuration and ours would fight for ever.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote

from trust.consumers import ANNOTATION as ANNOTATION
from trust.consumers import FIELD_MANAGER as FIELD_MANAGER
from trust.consumers import text_digest
from trust.selector import SelectorError, parse_selector_json


@dataclass(frozen=True)
class Kind:
    """One injectable kind: where it lives in the API, how it is watched, and — in each
    family's implementation (`injector.kinds`) — where its fields are, when it cannot carry
    one, who owns them at the release, and how a write is made. The rest of the injector
    asks the kind; it never branches on which kind it is.

    Informer options are properties of the kind: `label_selector` (only objects opting in
    by label are listed: memory bounded by what users asked for), `departed_selector` (the
    objects to release once their opt-in label went, found by our mark), `page_size` (a
    LIST page's size when streaming lists are refused: small for a kind anyone may write,
    whose objects may be 1 MiB)."""

    kind: str
    group: str
    version: str
    resource: str
    namespaced: bool = False
    reads_when_not_applicable: bool = False
    """An object of this kind that cannot be written still reads the field (an immutable
    ConfigMap's `ca.crt`): a blocked holder of what it selects. False: one that cannot
    carry a caBundle verifies no server with one, and selects nothing."""
    informer: str = ""
    """The informer's name (default: `resource`)."""
    label_selector: str | None = None
    departed_selector: str | None = None
    page_size: int = 500
    """Objects per page of a LIST (when the server refuses streaming lists)."""
    field: str = "caBundle"
    """What a message calls the field written."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def path(self) -> str:
        """The collection across namespaces (what an informer lists)."""
        if not self.group:
            return f"/api/{self.version}/{self.resource}"
        return f"/apis/{self.group}/{self.version}/{self.resource}"

    def object_path(self, name: str, namespace: str = "") -> str:
        root = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        where = f"/namespaces/{quote(namespace, safe='')}" if self.namespaced else ""
        return f"{root}{where}/{self.resource}/{quote(name, safe='')}"

    # What each family implements ---------------------------------------------------

    def to_target(self, raw: Mapping[str, Any]) -> Target:
        """The informer's transform: the compact record of one object."""
        raise NotImplementedError

    def departed_record(self, raw: Mapping[str, Any]) -> Target:
        """The transform of the departed informer (`departed_selector`): what a release
        needs, nothing else."""
        raise NotImplementedError

    def our_leaves(
        self, ours: list[Mapping[str, Any]], meta: Mapping[str, Any]
    ) -> list[tuple[tuple[str, ...], tuple[tuple[str, ...], ...], str]]:
        """(leaf, where its owner is named — fieldsV1 paths tried in turn —, the leaf's name
        for a log line) of each leaf one of `ours` (our managedFields entries' fieldsV1 in
        the object's `meta`) owns and may hand over, in a stable order: who takes it at
        the release (`handover_of`)."""
        return []

    def value_of(self, bundle: str) -> str:
        """What every slot holds for `bundle`."""
        raise NotImplementedError

    def holds(self, target: Target, bundle: str, value: str) -> bool:
        """The object's fields are exactly what a write of `bundle` leaves."""
        raise NotImplementedError

    def write_ops(
        self, target: Target, value: str, bundle: str, note: str, password: str
    ) -> list[dict[str, Any]]:
        """The JSON patch of a write (`password`: a ConfigMap truststore's, read by the act)."""
        raise NotImplementedError

    @property
    def informer_name(self) -> str:
        return self.informer or self.resource


INJECTED_ANNOTATION = "service-serving-signer/injected"
"""Written beside every write of ours, in the same patch: `{"sha256": <digest of the
value written to each slot>, "anchors": [<SHA-256 of each anchor's DER>],
"notAfter": <earliest notAfter, Unix seconds>}`. While the slots still have that digest,
a restarted injector knows what the object holds without parsing it
(`injector.convergence`; the expiry gauge of an empty or invalid selection)."""

MAX_INJECTED = 8192
"""The longest `INJECTED_ANNOTATION` read; a longer one says nothing."""

MAX_HELD = 16
"""The most anchors a record keeps from `INJECTED_ANNOTATION` (as 32-byte digests); a
note listing more says nothing is known (a bundle holds a few anchors)."""

MAX_MANAGERS = 2
"""The most field managers a record names (other appliers, and entries of our own
manager): managedFields are client-writable, so their number is the tenant's to choose."""

MANAGER_NAME = 64
"""The longest field manager name a record keeps (longer ones are cut; real ones —
`argocd-controller`, `kubectl-client-side-apply`, `helm` — are far shorter)."""

MARK_LABEL = "service-serving-signer/ca-injected"
"""On a ConfigMap we wrote (see `injector.configmaps`): how the departed informer finds
one whose opt-in label was removed, also while no injector ran."""

MAX_ANNOTATION = 4096
"""The longest selector annotation parsed; a longer one is `Invalid` (a selector is a
few hundred bytes; the API allows 256 KiB of annotations per object, which a tenant
could repeat on every labelled ConfigMap)."""

MAX_SELECTOR = 512
"""The longest selector a record keeps, in its canonical form (compact JSON, keys sorted:
`{"name":...}` or `{"signerName":...,"labelSelector":...}`); a longer one is `Invalid`.
Real selectors are well under 200 characters."""

INVALID = "!"
"""How a record's `annotation` starts when the selector is invalid: the rest is why
(at most `MAX_REASON` characters). A canonical selector starts with `{`."""

MAX_REASON = 160
"""The most characters of why a selector is invalid a record keeps."""

MAX_NOTE = 1024
"""The longest `INJECTED_ANNOTATION` a record keeps for the release to remove (a note of
ours lists up to 14 anchors in that); a longer one stays at the release."""


def value_digest(value: str) -> str:
    """SHA-256 (hex) of a field's text: what a record keeps instead of the text."""
    return text_digest(value)


def single_slot(value: str) -> tuple[Slot, ...]:
    """The slots of an object with one caBundle field holding `value`: one tuple for
    every record whose field has the same text (every object holding one bundle, every
    unset field), as `shared` keeps texts."""
    digest = shared(value_digest(value))
    slots = _single_slots.get(digest)
    if slots is None:
        if len(_single_slots) >= SHARED_TEXTS:
            _single_slots.clear()
        slots = _single_slots[digest] = (Slot(None, digest),)
    return slots


@dataclass(frozen=True, slots=True)
class Slot:
    """One caBundle field: `webhook` names the webhook of a configuration (None for the
    single field of an APIService or CRD); `digest` is `value_digest` of its current value
    (base64 text for a caBundle, PEM for a ConfigMap's `ca.crt`; "" hashes an unset one)."""

    webhook: str | None
    digest: str


@dataclass(frozen=True, slots=True)
class Handover:
    """One leaf our managedFields entry owns, and the entry that takes it at the release:
    the owner's entry at `index` (its `manager` and `operation` are tested before the
    write) gets `leaf` below the map at the fieldsV1 path `into`."""

    index: int
    manager: str
    operation: str
    into: tuple[str, ...]
    leaf: tuple[str, ...] = ("f:caBundle",)
    """The keys added below `into`, the last the leaf itself. More than one where the
    owner's entry has no map to take the leaf yet (a ConfigMap owner that applied only
    metadata has no `f:data`): the map is added whole, and the release is then guarded
    by the object's resourceVersion, so a map the entry gained since is never replaced."""


@dataclass(frozen=True, slots=True)
class Truststore:
    """A ConfigMap's PKCS#12 truststore key: where, with which password (its digest), and
    what it was made from, as far as is known."""

    key: str
    password_digest: str
    """`trust.consumers.text_digest` of the password (the write reads the password itself)."""
    made_from: str
    """The inputs digest of the digest annotation we write beside the store
    (`injector.configmaps.DIGEST_ANNOTATION`, `<inputs>:<digest of the text>`) while the
    store's text still has the digest it records; "" otherwise (absent, someone else's
    bytes, or rewritten since)."""


@dataclass(frozen=True, slots=True)
class Target:
    """The compact record of one target object (see the module docstring)."""

    kind: str
    name: str
    uid: str
    annotation: str | None
    slots: tuple[Slot, ...]
    not_applicable: str | None = None
    """Why no caBundle can be set on this object, or None."""
    owned: tuple[tuple[int, str], ...] = ()
    """(index, operation) of each managedFields entry of our field manager."""
    namespace: str = ""
    truststore: Truststore | None = None
    others: tuple[str, ...] = ()
    """Other `Apply` managers that own a leaf we write (sorted, unique, at most
    `MAX_MANAGERS`)."""
    taker: str = ""
    """Another manager whose `Update` owns a leaf we write ("" for none): who wrote it
    since (cert-manager's cainjector, client-side apply, Helm 3, a script)."""
    resource_version: str = field(default="", compare=False)
    """The resourceVersion the record was made from (guards a write that adds a whole map)."""
    maps: tuple[str, ...] = ()
    """Which of `data`, `binaryData` and `metadata.annotations` exist (ConfigMaps)."""
    held: bytes = b""
    """What `INJECTED_ANNOTATION` says the object holds, while its slots still have the
    digest it records: each anchor's SHA-256, 32 bytes each (`known_holding`)."""
    held_until: float | None = None
    """The earliest notAfter that note records (None: nothing known)."""
    marked: bool = False
    """A ConfigMap bearing `injector.configmaps.MARK_LABEL` (released with it)."""
    handover: tuple[Handover, ...] = ()
    """Where each caBundle leaf we own goes at the release (kept only while the
    annotation is gone and we still own fields: `handover_of`)."""
    unowned: tuple[str, ...] = ()
    """The caBundle leaves we own that nobody else can take at the release (their
    value stays, owned by no one; what the release's log line names)."""
    note: str | None = None
    """Our `INJECTED_ANNOTATION` on an object the release is for, while no other
    managedFields entry owns it (at most `MAX_INJECTED` characters): the release removes
    it, tested against this value (`released_note`); None otherwise, the usual case."""
    dropped: tuple[str, ...] = ()
    """Annotations of ours on a ConfigMap the release is for that our entry alone owns
    (the note, the truststore digest): the release removes them without testing their
    value, which a ConfigMap's record does not keep (`injector.configmaps`)."""

    def with_holding(self, meta: Mapping[str, Any]) -> Target:
        """This record with what `meta`'s `INJECTED_ANNOTATION` says it holds."""
        held, until = holding_of(meta, self.slots)
        if until is None and not held:
            return self
        return dataclasses.replace(self, held=held, held_until=until)

    @property
    def managed(self) -> bool:
        """Our field manager owns fields of the object (an entry in its managedFields)."""
        return bool(self.owned)

    @property
    def key(self) -> str:
        return target_key(self.kind, self.name, self.namespace)


def target_key(kind: str, name: str, namespace: str = "") -> str:
    """The work-queue key: `<Kind>/<name>`, or `<Kind>/<namespace>/<name>` for a
    ConfigMap; what follows `<Kind>/` is the informer's cache key."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def split_key(key: str, kinds: Mapping[str, Kind]) -> tuple[Kind, str]:
    """(kind, the cache key within that kind's informer)."""
    kind, _, name = key.partition("/")
    return kinds[kind], name


class Records(Protocol):
    """An informer's cache of `Target` records, as `read` looks one up."""

    def get(self, key: str) -> Target | None: ...


@dataclass(frozen=True)
class Seen:
    """What one sync reads for its key before it plans (`read`): the object's record,
    what our note says it holds, and the patches that would give up our fields."""

    kind: Kind
    key: str
    target: Target | None
    """The object's record; None: gone from its kind's cache."""
    departed: Target | None = None
    """Without `target`: the record of an object of a kind with a `departed_selector`
    (a ConfigMap) that still bears our mark label."""
    held: frozenset[str] = frozenset()
    """The anchors our note says `target` holds (`known_holding`)."""
    held_until: float | None = None
    """The earliest notAfter that note records (None: nothing known)."""
    release: list[dict[str, Any]] | None = None
    """`release_ops` of `target`, or of `departed` without it; None: neither."""
    cleanup: list[dict[str, Any]] | None = None
    """`release_ops` of `target`'s `Apply` entries only."""


def read(
    key: str,
    kinds: Mapping[str, Kind],
    caches: Mapping[str, Records],
    departed: Mapping[str, Records],
) -> Seen:
    """Everything a sync of `key` (`target_key`) reads from the caches: `kinds` and
    `caches` by kind name, `departed` the caches (by kind) of objects bearing our mark
    without the opt-in label (`Kind.departed_selector`), to release."""
    kind, name = split_key(key, kinds)
    target = caches[kind.kind].get(name)
    if target is None:
        cache = departed.get(kind.kind)
        gone = cache.get(name) if cache is not None else None
        return Seen(kind, key, None, gone, release=release_ops(gone) if gone is not None else None)
    held, held_until = known_holding(target)
    return Seen(
        kind,
        key,
        target,
        held=held,
        held_until=held_until,
        release=release_ops(target),
        cleanup=release_ops(target, "Apply"),
    )


def owned_by_us(meta: Mapping[str, Any]) -> tuple[tuple[int, str], ...]:
    """(index, operation) of the first `MAX_MANAGERS` `metadata.managedFields` entries of
    the injector's manager (the API keeps one per operation; more are a tenant's: the
    release removes these, and the next event shows the rest)."""
    found = (
        (i, "Apply" if entry.get("operation") == "Apply" else "Update")
        for i, entry in enumerate(meta.get("managedFields") or ())
        if isinstance(entry, Mapping) and entry.get("manager") == FIELD_MANAGER
    )
    return tuple(itertools.islice(found, MAX_MANAGERS))


def other_writers(
    meta: Mapping[str, Any], leaves: tuple[tuple[str, ...], ...]
) -> tuple[tuple[str, ...], str]:
    """(`other_appliers`, the first other manager whose `Update` owns any of `leaves`, cut
    to `MANAGER_NAME` characters, or "")."""
    taker = ""
    for entry in meta.get("managedFields") or ():
        if not isinstance(entry, Mapping) or entry.get("operation") != "Update":
            continue
        manager = str(entry.get("manager", ""))
        fields = entry.get("fieldsV1")
        owned = isinstance(fields, Mapping) and any(owns(fields, leaf) for leaf in leaves)
        if manager != FIELD_MANAGER and owned:
            taker = manager[:MANAGER_NAME]
            break
    return other_appliers(meta, leaves), taker


def other_appliers(meta: Mapping[str, Any], leaves: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """Other `Apply` managers whose fieldsV1 own any of `leaves` (paths of `f:`/`k:` keys;
    `"k:*"` matches every list entry): the first `MAX_MANAGERS` in name order, each cut to
    `MANAGER_NAME` characters."""
    found = set()
    for entry in meta.get("managedFields") or ():
        if not isinstance(entry, Mapping) or entry.get("operation") != "Apply":
            continue
        manager = str(entry.get("manager", ""))
        if manager == FIELD_MANAGER:
            continue
        fields = entry.get("fieldsV1")
        if isinstance(fields, Mapping) and any(owns(fields, leaf) for leaf in leaves):
            found.add(manager[:MANAGER_NAME])
    return tuple(sorted(found)[:MAX_MANAGERS])


def owns(fields: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    if not path:
        return True
    head, rest = path[0], path[1:]
    if head == "k:*":
        return any(
            k.startswith("k:") and isinstance(v, Mapping) and owns(v, rest)
            for k, v in fields.items()
        )
    child = fields.get(head)
    return isinstance(child, Mapping) and owns(child, rest)


OWNER_NAME = 128
"""The longest field manager name that may take a leaf at the release (the API server's
limit on a manager name; a record keeps the name to test it)."""


def handover_of(
    kind: Kind, meta: Mapping[str, Any]
) -> tuple[tuple[Handover, ...], tuple[str, ...]]:
    """Who takes each leaf our entries own at the release, and the leaves nobody takes
    (`Target.handover`, `Target.unowned`).

    The owner of a leaf is the manager that owns where the server it verifies is named:
    the webhook's `clientConfig` (its `url` or `service`), an APIService's `spec.service`,
    a CRD's `spec.conversion.webhook.clientConfig`; for a ConfigMap, whoever owns its
    other data keys, else its metadata (`Kind.our_leaves` says where, in turn). Among the
    entries that own it (never ours, never a subresource's): an `Apply` entry before an
    `Update` entry, then the first manager name in byte order, then the first in
    managedFields. A leaf another manager owns already is left to it (nothing to hand);
    a leaf nobody's entry can take stays unowned."""
    entries = [
        (i, e)
        for i, e in enumerate(meta.get("managedFields") or ())
        if isinstance(e, Mapping) and isinstance(e.get("fieldsV1"), Mapping)
    ]
    ours = [e["fieldsV1"] for _, e in entries if e.get("manager") == FIELD_MANAGER]
    others = [
        (i, e) for i, e in entries if e.get("manager") != FIELD_MANAGER and not e.get("subresource")
    ]
    handed: list[Handover] = []
    unowned: list[str] = []
    for leaf, wheres, name in kind.our_leaves(ours, meta):
        if any(owns(e["fieldsV1"], leaf) for _, e in others):
            continue
        owner = _owner(others, wheres)
        if owner is None:
            unowned.append(name)
            continue
        index, entry = owner
        manager, operation = str(entry.get("manager", "")), str(entry.get("operation", ""))
        into = _held_prefix(entry["fieldsV1"], leaf[:-1])
        handed.append(Handover(index, manager, operation, into, leaf[len(into) :]))
    return tuple(handed), tuple(unowned)


def _owner(
    others: list[tuple[int, Mapping[str, Any]]], wheres: tuple[tuple[str, ...], ...]
) -> tuple[int, Mapping[str, Any]] | None:
    """The first entry (`handover_of`'s order) owning the first of `wheres` any owns."""
    for where in wheres:
        owners = sorted(
            (
                (i, e)
                for i, e in others
                if owns(e["fieldsV1"], where) and len(str(e.get("manager", ""))) <= OWNER_NAME
            ),
            key=lambda owner: (
                owner[1].get("operation") != "Apply",
                str(owner[1].get("manager", "")).encode(),
                owner[0],
            ),
        )
        if owners:
            return owners[0]
    return None


def _held_prefix(fields: Mapping[str, Any], path: tuple[str, ...]) -> tuple[str, ...]:
    """The longest start of `path` whose maps `fields` has."""
    node: Any = fields
    for depth, key in enumerate(path):
        node = node.get(key) if isinstance(node, Mapping) else None
        if not isinstance(node, Mapping):
            return path[:depth]
    return path


def injected_note(value: str, anchors: frozenset[str], not_after: float) -> str:
    """`INJECTED_ANNOTATION`'s value for a write of `value` to every slot."""
    listed = sorted(anchors) if len(anchors) <= 64 else []
    return json.dumps(
        {"sha256": value_digest(value), "anchors": listed, "notAfter": int(not_after)},
        sort_keys=True,
        separators=(",", ":"),
    )


def holding_of(meta: Mapping[str, Any], slots: tuple[Slot, ...]) -> tuple[bytes, float | None]:
    """What `INJECTED_ANNOTATION` says the object holds, as a record keeps it: (each
    anchor's SHA-256 as 32 bytes, the earliest notAfter), when every slot still has the
    digest the note records and it lists at most `MAX_HELD` anchors; else (b"", None)."""
    value = (meta.get("annotations") or {}).get(INJECTED_ANNOTATION)
    if not isinstance(value, str) or len(value) > MAX_INJECTED or not slots:
        return b"", None
    try:
        note = json.loads(value)
    except ValueError:
        return b"", None
    if not isinstance(note, dict) or any(slot.digest != note.get("sha256") for slot in slots):
        return b"", None
    anchors, not_after = note.get("anchors"), note.get("notAfter")
    until = float(not_after) if isinstance(not_after, int | float) else None
    if not isinstance(anchors, list) or len(anchors) > 4 * MAX_HELD:
        return b"", until
    try:
        held = sorted({bytes.fromhex(a) for a in anchors if isinstance(a, str) and len(a) == 64})
    except ValueError:
        return b"", until
    return (b"".join(held) if len(held) <= MAX_HELD else b""), until


NOTHING_HELD: frozenset[str] = frozenset()
"""One empty set for every object known to hold nothing (each empty frozenset made from an
iterable is a new 216-byte object, and statuses keep it)."""


def known_holding(target: Target) -> tuple[frozenset[str], float | None]:
    """What our annotation says the object holds, if its slots still have the digest it
    records: (anchor fingerprints, earliest notAfter); else (empty, None)."""
    held = target.held
    if not held:
        return NOTHING_HELD, target.held_until
    return frozenset(held[i : i + 32].hex() for i in range(0, len(held), 32)), target.held_until


SHARED_TEXTS = 4096
"""How many distinct texts `shared` keeps (then it starts again)."""
_shared: dict[str, str] = {}
_single_slots: dict[str, tuple[Slot, ...]] = {}


def shared(text: str) -> str:
    """One copy of `text` for every record that has it: most objects of a cluster select
    the same bundle from a few namespaces, so their selectors and namespaces repeat. At
    most `SHARED_TEXTS` are kept (a tenant's distinct values only fill it)."""
    if len(_shared) >= SHARED_TEXTS and text not in _shared:
        _shared.clear()
    return _shared.setdefault(text, text)


def annotation_of(meta: Mapping[str, Any]) -> str | None:
    """Our selector annotation as a record keeps it (`selector_record`), or None."""
    value = (meta.get("annotations") or {}).get(ANNOTATION)
    return shared(selector_record(value)) if isinstance(value, str) else None


def selector_record(text: str) -> str:
    """What a record keeps of a selector annotation, never its text: the parsed selector
    in canonical form (at most `MAX_SELECTOR` characters; what the index keys and the
    match are made from, and what an event compares), or `INVALID` and why (bounded).
    A tenant's distinct long or hostile texts thus cost a record at most a few hundred
    bytes, and are parsed once, by the informer's transform (`parse_selector_json` is
    total).

    Why the canonical selector and not only its index keys and a digest: a sync decides
    from the record alone (the cache never holds the object), and deciding needs the
    whole selector — which ClusterTrustBundles a `labelSelector`'s `matchLabels` and
    `matchExpressions` match, not only the signer name the index is keyed by. A digest
    would answer "did it change" but not "what does it select", so every sync of every
    object would GET it again (50,000 requests per resync, a ConfigMap of 1 MiB each)
    and parse tenant text there instead of once. Keeping the parsed `Selector` costs more
    than its text (a selector of two labels and one expression, 159 characters: 1,433 B
    parsed against 217 B as text, tracemalloc); the compact JSON is its smallest faithful
    form, bounded by `MAX_SELECTOR`, shared between records by `shared`, and parsed again
    per sync only from our own canonical output. Measured with 10,000 distinct ~3.4 KB
    selectors: ~1.7 KB of RSS per record, under the 2 KB target (docs/performance.md)."""
    if len(text) > MAX_ANNOTATION:
        return f"{INVALID}longer than {MAX_ANNOTATION} characters"
    try:
        selector = parse_selector_json(text)
    except SelectorError as err:
        return f"{INVALID}{str(err)[:MAX_REASON]}"
    canonical = json.dumps(selector.to_json(), sort_keys=True, separators=(",", ":"))
    if len(canonical) > MAX_SELECTOR:
        return f"{INVALID}longer than {MAX_SELECTOR} characters once canonical"
    return canonical


def unowned_note(target: Target) -> str:
    """The release's log line for the leaves nobody took (`Target.unowned`)."""
    return (
        f"released {', '.join(target.unowned)}: no other managedFields entry owns where "
        "its owner is named; the value stays, owned by no field manager "
        "(a server-side-apply owner does not remove it by omitting it: set it in its "
        "configuration, then omit it, or remove it with a patch)"
    )


def element_name(key: str) -> str:
    """The webhook name of a fieldsV1 list key `k:{"name":"..."}` (else the key)."""
    try:
        element = json.loads(key[2:])
    except ValueError:
        return key
    return str(element.get("name", key)) if isinstance(element, dict) else key


def releasing(kind: Kind, meta: Mapping[str, Any]) -> dict[str, Any]:
    """`Target` fields `handover` and `unowned`: only for an object the release is for
    (no annotation, an entry of ours); none otherwise, the usual case."""
    if annotation_of(meta) is not None or not owned_by_us(meta):
        return {}
    handover, unowned = handover_of(kind, meta)
    return {"handover": handover, "unowned": unowned, "note": released_note(meta)}


NOTE_LEAF = ("f:metadata", "f:annotations", f"f:{INJECTED_ANNOTATION}")
"""Where a managedFields entry owns `INJECTED_ANNOTATION`."""


def released_note(meta: Mapping[str, Any]) -> str | None:
    """Our note (`INJECTED_ANNOTATION`) for the release to remove: it says what we
    injected and when, which is no longer so once we own nothing. None when it is absent,
    longer than `MAX_INJECTED` (not ours), or another manager's entry owns it (their
    configuration sets it: their next apply would put it back, so it is theirs)."""
    value = (meta.get("annotations") or {}).get(INJECTED_ANNOTATION)
    if not isinstance(value, str) or len(value) > MAX_NOTE:
        return None
    for entry in meta.get("managedFields") or ():
        if not isinstance(entry, Mapping) or entry.get("manager") == FIELD_MANAGER:
            continue
        fields = entry.get("fieldsV1")
        if isinstance(fields, Mapping) and owns(fields, NOTE_LEAF):
            return None
    return value


def writers(meta: Mapping[str, Any], leaves: tuple[tuple[str, ...], ...]) -> dict[str, Any]:
    """`Target` fields `others` and `taker` (`other_writers`)."""
    others, taker = other_writers(meta, leaves)
    return {"others": others, "taker": taker}


def is_current(target: Target, ca_bundle: str) -> bool:
    """Every caBundle slot already holds `ca_bundle` (base64), by digest."""
    wanted = value_digest(ca_bundle)
    return all(slot.digest == wanted for slot in target.slots)


def release_ops(target: Target, operation: str | None = None) -> list[dict[str, Any]]:
    """The JSON patch that releases every field we own (or only our entries of
    `operation`, handing nothing over): add each leaf of `target.handover` to its owner's
    entry (guarded by a `test` of that entry's manager and operation; the map it is added
    to exists, or the patch fails and the object's next event re-plans it; a map added
    whole is guarded by the record's resourceVersion), then
    remove each managedFields entry of ours (highest index first, each guarded by a
    `test` of its manager), our note (`target.note`, tested), the annotations
    `target.dropped` names and the mark label, and no value, guarded by the uid (an
    object deleted meanwhile is not re-created)."""
    ops: list[dict[str, Any]] = [test_op("/metadata/uid", target.uid)]
    handover = target.handover if operation is None else ()
    if any(len(hand.leaf) > 1 for hand in handover):
        ops.append(test_op("/metadata/resourceVersion", target.resource_version))
    for hand in handover:
        entry = f"/metadata/managedFields/{hand.index}"
        into = "/".join(pointer(key) for key in (*hand.into, hand.leaf[0]))
        ops.append(test_op(f"{entry}/manager", hand.manager))
        ops.append(test_op(f"{entry}/operation", hand.operation))
        ops.append(add_op(f"{entry}/fieldsV1/{into}", _nested(hand.leaf[1:])))
    for index, op in sorted(target.owned, reverse=True):
        if operation is not None and op != operation:
            continue
        ops.append(test_op(f"/metadata/managedFields/{index}/manager", FIELD_MANAGER))
        ops.append({"op": "remove", "path": f"/metadata/managedFields/{index}"})
    if target.note is not None and operation is None:
        note = f"/metadata/annotations/{pointer(INJECTED_ANNOTATION)}"
        ops += [test_op(note, target.note), {"op": "remove", "path": note}]
    for key in target.dropped if operation is None else ():
        ops.append({"op": "remove", "path": f"/metadata/annotations/{pointer(key)}"})
    if target.marked and operation is None:
        mark = f"/metadata/labels/{pointer(MARK_LABEL)}"
        ops += [test_op(mark, "true"), {"op": "remove", "path": mark}]
    return ops


def _nested(keys: tuple[str, ...]) -> dict[str, Any]:
    """`{keys[0]: {keys[1]: ... {}}}` (fieldsV1 maps down to a leaf)."""
    return {keys[0]: _nested(keys[1:])} if keys else {}


def test_op(path: str, value: Any) -> dict[str, Any]:
    return {"op": "test", "path": path, "value": value}


def add_op(path: str, value: Any) -> dict[str, Any]:
    return {"op": "add", "path": path, "value": value}


def pointer(key: str) -> str:
    """One JSON-pointer segment (RFC 6901) for a map key."""
    return key.replace("~", "~0").replace("/", "~1")
