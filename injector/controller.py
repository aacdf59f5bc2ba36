"""The caBundle injection controller (docs/reference.md §11, opt-in: `--controllers=*,injector`).

For every ValidatingWebhookConfiguration, MutatingWebhookConfiguration, APIService and
CRD annotated `service-serving-signer/ca-bundle-from: <ClusterTrustBundleSelector JSON>`
it keeps every caBundle field equal to the bundle the selector resolves to, by a
test-guarded JSON patch under its own field manager (`service-serving-signer-injector`)
that owns only the caBundle leaves (`injector.targets`). It never forces: a field another
server-side apply manager owns is left alone with a Warning Event naming that manager
(`decide.Conflict`). A write the API refuses as invalid is the object owner's to fix: a
Warning Event and the `refused` count, not an error retry (one tenant's mistake must not
fire the cluster-wide sync-error alert); the same write is sent again only after a back-off
(`decide.REFUSAL_FIRST` doubling to `decide.REFUSAL_MAX`), since what refused it, an
admission policy say, may be mended outside the object. A failed `test` guard means the
object changed since the cache saw it: nothing to do, its watch event re-drives it.
Releasing removes our managedFields entries only; the values stay.

Wiring, in kube-controller-manager's shape:

* six informers (`informers(factory)`: the process builds and starts them), each with
  a transform that keeps only what `sync` reads (`injector.targets.Target` for the four
  kinds and labelled ConfigMaps; name, signer, labels and PEM for ClusterTrustBundles of
  every signer; `injector.configmaps.departed_record` for ConfigMaps bearing our mark
  without the opt-in label, to release);
* an index on each of the four caches from "which bundles can change my selection"
  (`name:<bundle>` or `signer:<signerName>`, `injector.decide.selection_keys`) so a
  ClusterTrustBundle add/update/delete re-drives exactly the objects it may concern;
* one queue of `<Kind>/<name>` keys on `kube.controller.Loop` (workers start on
  synced caches; the processNextWorkItem contract); handlers only enqueue; a periodic
  resync re-drives every annotated object (the safety net against a missed event, and
  the repair of a hand-edited caBundle whose watch event was lost).

`sync(key)` reads only the caches, plans (`injector.decide.plan`), then sends the plan's
patches: a release, or the write (only when a slot differs) with before it at most one
clean-up of an old apply entry of ours; each patch is test-guarded and stands alone.
Nothing is written for an object without the annotation, for a bad annotation, or for a
selection that matches nothing (Warning Events say why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from injector import configmaps, convergence
from injector import decide as decisions
from injector.kinds import ALL_KINDS, KINDS_BY_NAME
from injector.metrics import InjectorMetrics
from injector.targets import (
    FIELD_MANAGER,
    Kind,
    Target,
    read,
    target_key,
    unowned_note,
)
from kube.client import ApiError, Client, is_conflict, is_not_found
from kube.controller import Cache, Loop, Requeue
from kube.events import ObjectRef, Recorder
from kube.factory import InformerFactory
from kube.leases import LeaseRef, write_report
from kube.types import JSON
from kube.workqueue import RateLimitingQueue
from trust.clustertrustbundles import anchors_of, bundles_path, pem_of
from trust.consumers import bundle_record, text_digest
from trust.convergence import (
    DURATION_SECONDS,
    RENEW_SECONDS,
    REPORT_ANNOTATION,
    ObjectConvergence,
    encode,
    summarise,
)

log = logging.getLogger(__name__)

__all__ = ["FIELD_MANAGER", "Caches", "InjectorController", "bundle_record", "informers"]

QUEUE_NAME = "cabundle_injector"
MAX_PENDING = 10
"""The most not-yet-synced keys an incomplete report names."""
SELECTION_INDEX = "selection"
SHARED_STATUSES = 1024
JSON_PATCH = "application/json-patch+json"
ACTION = "InjectCABundle"
"""The action of every Warning Event the injector records."""


class TargetCache(Cache[Target], Protocol):
    """An informer's cache of one kind of annotated object, indexed by selection."""

    def get(self, key: str) -> Target | None: ...

    def keys(self) -> list[str]: ...

    def by_index(self, index_name: str, value: str) -> list[Target]: ...


class BundleCache(Cache[JSON], Protocol):
    """The informer's cache of every ClusterTrustBundle (`bundle_record`s)."""

    def list(self) -> list[JSON]: ...


@dataclass(frozen=True)
class Caches:
    """The caches the injector reads: one per kind (by `Kind.kind`) and the bundles."""

    targets: Mapping[str, TargetCache]
    bundles: BundleCache
    departed: Mapping[str, TargetCache] = field(default_factory=dict)
    """By kind, for each kind with a `departed_selector`: objects bearing our mark label
    without the opt-in label (`Kind.departed_record`), to release. Empty: none are
    released (unit tests)."""


def informers(factory: InformerFactory, *, ctb_version: str) -> Caches:
    """Per kind, one informer of its `Target` records (indexed by what they select), with
    the kind's options (`Kind.label_selector`, `Kind.page_size`), and one of the objects
    to release for a kind with a `departed_selector`; and one of every signer's
    ClusterTrustBundles (`bundle_record`s)."""
    targets: dict[str, TargetCache] = {}
    departed: dict[str, TargetCache] = {}
    for kind in ALL_KINDS:
        targets[kind.kind] = factory.informer(
            kind.path,
            name=kind.informer_name,
            label_selector=kind.label_selector,
            transform=kind.to_target,
            indexers={SELECTION_INDEX: _selection_index},
            page_size=kind.page_size,
        )
        # Anyone may put the mark on an object of a label-selected kind (a ConfigMap of
        # any size): the record is metadata only, listed in the kind's small pages.
        if kind.departed_selector is not None:
            departed[kind.kind] = factory.informer(
                kind.path,
                name=f"{kind.informer_name}-departed",
                label_selector=kind.departed_selector,
                transform=kind.departed_record,
                page_size=kind.page_size,
            )
    bundles = factory.informer(
        bundles_path(ctb_version),
        name="clustertrustbundles-injector",
        transform=bundle_record,
    )
    return Caches(targets, bundles, departed)


def _selection_index(target: Target) -> list[str]:
    selector = decisions.selector_of(target)
    return decisions.selection_keys(selector) if selector is not None else []


class InjectorController:
    """Keeps annotated objects' caBundles equal to their selected trust bundle."""

    name = "injector"

    def __init__(
        self,
        client: Client,
        caches: Caches,
        recorder: Recorder,
        *,
        workers: int = 2,
        resync_period: float = 300.0,
        registry: CollectorRegistry | None = None,
        report: LeaseRef | None = None,
        identity: str = "injector",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.report = report  # where the convergence report goes (trust.convergence)
        self.identity = identity
        self.recorder = recorder
        self.workers = workers
        self.resync_period = resync_period
        self.metrics = InjectorMetrics(registry)
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.caches: Mapping[str, TargetCache] = caches.targets
        self.bundles: BundleCache = caches.bundles
        for cache in self.caches.values():
            cache.add_handler(self._on_target, self._on_target_update, self._on_target)
        self.bundles.add_handler(self._on_bundle, self._on_bundle_update, self._on_bundle_delete)
        self.departed: Mapping[str, TargetCache] = caches.departed
        for cache in self.departed.values():
            cache.add_handler(self._on_target, self._on_target_update, None)
        self.kinds: Mapping[str, Kind] = KINDS_BY_NAME
        # Every annotated object's convergence state (injector.convergence), by key.
        self._status: dict[str, ObjectConvergence] = {}
        self._shared_statuses: dict[ObjectConvergence, ObjectConvergence] = {}
        self.progress = convergence.Progress()
        self._status_lock = threading.Lock()
        self._status_changed = threading.Event()
        self.metrics.count_objects(self.statuses)
        # What the injector remembers of an object between syncs, per key (`decide.Memory`:
        # its last refused write, its contest with another writer); only the worker
        # syncing the key touches its entry (the queue gives a key to one worker at a time).
        self._memory: dict[str, decisions.Memory] = {}
        self.clock = clock
        self.loop = Loop(
            self.name,
            self.sync,
            self.queue,
            registry=registry,
            synced=(
                self.bundles.has_synced,
                *(c.has_synced for c in self.caches.values()),
                *(c.has_synced for c in self.departed.values()),
            ),
            workers=workers,
            resync_period=resync_period,
            resync_keys=self.resync,
        )

    # handlers (they only enqueue) ----------------------------------------------------

    def has_synced(self) -> bool:
        return self.loop.has_synced()

    def _on_target(self, target: Target) -> None:
        self.queue.add(target.key)

    def _on_target_update(self, old: Target, new: Target) -> None:
        # Any change re-drives an object whose last write failed or was refused (what
        # failed may be mended by a change the record does not keep).
        if old != new or (old.resource_version != new.resource_version and new.key in self._memory):
            self.queue.add(new.key)

    def _on_bundle(self, bundle: JSON) -> None:
        self.progress.saw_bundle(*_version(bundle))  # before the enqueue: see Progress
        self.enqueue_selecting(bundle)

    def _on_bundle_update(self, old: JSON, new: JSON) -> None:
        if old != new:
            self.progress.saw_bundle(*_version(new))
            self.enqueue_selecting(old)
            self.enqueue_selecting(new)

    def _on_bundle_delete(self, bundle: JSON) -> None:
        self.progress.forget_bundle(_version(bundle)[0])
        self.enqueue_selecting(bundle)

    def enqueue_selecting(self, bundle: Mapping[str, Any]) -> None:
        """Enqueue every object whose selector may pick `bundle` (by name or signer)."""
        for value in decisions.bundle_keys(bundle):
            for cache in self.caches.values():
                for target in cache.by_index(SELECTION_INDEX, value):
                    self.queue.add(target.key)

    def resync(self) -> list[str]:
        """Every annotated object's key, and every object we still own fields of: the
        periodic re-drive."""
        keys = []
        for kind_name, cache in self.caches.items():
            for name in list(cache.keys()):
                target = cache.get(name)
                if target is not None and (target.annotation is not None or target.managed):
                    keys.append(target_key(kind_name, name))
        for kind_name, cache in self.departed.items():
            keys += (target_key(kind_name, name) for name in cache.keys())  # noqa: SIM118 - a cache, not a dict
        return keys

    # the loop: kube.controller ---------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Sync every annotated object once (the informers' adds), then on every event and
        resync, until `stop`. API errors raise from `sync`; the loop retries them. With a
        `report`, a thread writes the convergence report Lease meanwhile."""
        self.progress.begin()
        reporter = None
        if self.report is not None:
            reporter = threading.Thread(
                target=self._report_loop, args=(stop,), name="injector-report", daemon=True
            )
            reporter.start()
        try:
            self.loop.run(stop)
        finally:
            if reporter is not None:
                reporter.join(5)

    # convergence ---------------------------------------------------------------------

    def statuses(self) -> list[ObjectConvergence]:
        with self._status_lock:
            return list(self._status.values())

    def _set_status(self, key: str, status: ObjectConvergence | None) -> None:
        with self._status_lock:
            before = self._status.get(key)
            if status is None:
                self._status.pop(key, None)
            else:
                # Equal statuses are one object (most objects of a kind are current and
                # select the same anchors): a status costs a pointer per object.
                if len(self._shared_statuses) >= SHARED_STATUSES:
                    self._shared_statuses.clear()
                status = self._shared_statuses.setdefault(status, status)
                self._status[key] = status
        if before != status:
            self._status_changed.set()

    def report_value(self) -> str:
        """The convergence report annotation's value now (`trust.convergence`): complete
        once every managed object was synced since this replica leads; the anchors of
        every bundle whose current version every object that may select it was synced
        since the injector saw it."""
        kinds = [kind.kind for kind in ALL_KINDS]
        # Per anchor: observed only when every cached bundle holding it is (a consumer of
        # the stable bundle still queued holds back an anchor a fresh bundle also has).
        observed: set[str] = set()
        unobserved: set[str] = set()
        for bundle in self.bundles.list():
            selecting = [
                target.key
                for value in decisions.bundle_keys(bundle)
                for cache in self.caches.values()
                for target in cache.by_index(SELECTION_INDEX, value)
            ]
            seen = self.progress.observed(*_version(bundle), selecting)
            (observed if seen else unobserved).update(anchors_of(pem_of(bundle)))
        pending = self.progress.pending(self.resync(), MAX_PENDING)
        report = summarise(
            self.statuses(),
            kinds=kinds,
            observed=observed - unobserved,
            complete=not pending,
            pending=pending,
        )
        return encode(report)

    def _report_loop(self, stop: threading.Event) -> None:
        """Write the report once the caches synced, then on every change and at least
        every `RENEW_SECONDS`, until `stop`."""
        while not stop.is_set() and not self.loop.wait_for_sync(stop, timeout=1.0):
            pass
        while not stop.is_set():
            self._status_changed.clear()
            try:
                self.write_report()
            except ApiError as err:
                log.warning("convergence report not written", extra={"error": str(err)})
            self._status_changed.wait(RENEW_SECONDS)
            stop.wait(1.0)  # a burst of changes (a rotation) costs one write a second

    def write_report(self) -> None:
        """Create or renew the report Lease (holder: our identity, renewTime: now)."""
        assert self.report is not None
        write_report(
            self.client,
            self.report,
            holder=self.identity,
            duration_seconds=DURATION_SECONDS,
            now=datetime.now(UTC),
            annotations={REPORT_ANNOTATION: self.report_value()},
        )

    # the sync ------------------------------------------------------------------------

    def sync(self, key: str) -> Requeue | None:
        """Read the caches for one `<Kind>/<name>` key (`injector.targets.read`), plan
        (`injector.decide.plan`, pure), act (send the plan's patches), record. Raises
        nothing: every outcome of the key is classified (`decide.settle`), and a failure
        is looked at again after its back-off (a `Requeue`). A sync counts for the
        convergence report from the moment it started."""
        started = next(self.progress.ticks)
        seen = read(key, self.kinds, self.caches, self.departed)
        planned = decisions.plan(seen, self.bundles.list(), self._memory.get(key), self.clock())
        sent = self._act(planned)
        after = self._record(planned, sent, started)
        return Requeue(after) if after is not None else None

    def _act(self, planned: decisions.Plan) -> Sent:
        """Send the plan's patches in order (an old apply entry of ours to drop, then the
        release or the write), each a JSON patch under our field manager, and say how the
        last one ended (`Sent`). A write's patch is made here, with a truststore's password
        read from the object (the record keeps only its digest)."""
        target, write = planned.target, planned.write
        if target is None:
            return Sent("none")
        patches = [ops for ops in (planned.cleanup, planned.release) if ops is not None]
        result, refusals = "none", []
        if write is not None:
            self._set_status(planned.key, write.pending)  # until the write lands
            try:
                password = self._password(target)
            except Exception as err:  # classified like a failed write
                password, result, refusals = None, "failed", [_why(err)]
            if password is not None:
                kind = self.kinds[target.kind]
                patches += [kind.write_ops(target, write.value, write.bundle, write.note, password)]
            elif result == "none":  # changed since the cache saw it
                result, refusals = "guard", [GUARD_FAILED]
        for ops in patches:
            try:
                self.client.patch(
                    self.kinds[target.kind].object_path(target.name, target.namespace),
                    ops,
                    patch_type=JSON_PATCH,
                    params={"fieldManager": FIELD_MANAGER},
                    discard_response=True,
                )
                result = "applied"
            except Exception as err:  # every outcome is classified
                result, why = _not_applied(err)
                refusals += [why] if why else []
        return Sent(result, tuple(refusals))

    def _record(self, planned: decisions.Plan, sent: Sent, started: int) -> float | None:
        """The Warning Events (one per refusal, one when failures block the object, and
        the plan's), the status and what to remember of the object (`Plan.settle`), the
        sync's progress, the expiry, the result's count and a log line of a write or
        release that landed; returns when to look again (seconds; None: on the next
        event). No Normal Event per write: a rotation re-writes every injected object at
        once, and an Event each would double the writes under --kube-api-qps (the log
        line and the `injected` count record it)."""
        key, target = planned.key, planned.target
        ref = _ref(target) if target is not None else _ref_of(key)
        settled = settle(planned, sent.result, sent.reason)
        for why in sent.refusals if sent.result == "refused" else ():
            note = f"{why}; tried again when the object or the bundle changes, or after "
            note += "a back-off (1 min, doubling to 15 min)"
            self.recorder.warning(ref, decisions.REASON_REFUSED, note, ACTION)
        if settled.failed:
            note = f"{settled.failed}; {decisions.FAILURE_BOUND} writes in a row failed: "
            note += "the object is blocked (its owner's to mend) and tried again after a back-off"
            self.recorder.warning(ref, decisions.REASON_FAILED, note, ACTION)
        for reason, note in planned.warnings:
            self.recorder.warning(ref, reason, note, ACTION)
        self._set_status(key, settled.status)
        if settled.memory == decisions.Memory():  # nothing to remember
            self._memory.pop(key, None)
        else:
            self._memory[key] = settled.memory
        if planned.counted:
            self.progress.synced(key, started, gone=target is None and planned.status is None)
        if sent.result == "refused":
            self.metrics.observe(planned.kind, "refused")
        if sent.result in ("failed", "guard"):
            self.metrics.observe(planned.kind, "failed")
            log.warning("injector: write failed", extra={"object": key, "error": sent.reason})
        if sent.result in ("applied", "none"):
            self.metrics.keep_expiry(key, planned.expiry)
            if planned.result is not None:
                self.metrics.observe(planned.kind, planned.result)
        if sent.result == "applied":
            log.info(f"{planned.result} caBundle", extra={"object": key})
        if sent.result == "applied" and planned.release is not None and target and target.unowned:
            log.info(unowned_note(target), extra={"object": key})
        return settled.requeue_after

    def _password(self, target: Target) -> str | None:
        """A truststore's password, read from the object (the record keeps its digest):
        "" without a truststore; None when the object no longer has the cached one."""
        store = target.truststore
        if store is None:
            return ""
        try:
            path = self.kinds[target.kind].object_path(target.name, target.namespace)
            live = self.client.get(path)
        except ApiError as err:
            if is_not_found(err):
                return None
            raise
        annotations = (live.get("metadata") or {}).get("annotations") or {}
        password = str(annotations.get(configmaps.TRUSTSTORE_PASSWORD_ANNOTATION) or "")
        return password if text_digest(password) == store.password_digest else None


@dataclass(frozen=True)
class Sent:
    """How the act ended: `result` is `none` (nothing to send), `applied`, or why the last
    patch did not land — `gone` (404, or 409: deleted and re-created), `guard` (a `test`
    failed, 422 without causes: it changed since the cache saw it), `refused` (the API
    refused the result, 422 with causes) or `failed` (any other status, a timeout, any
    exception); `decide.settle` classifies each. `refusals`: why each patch that did not
    land failed, in order."""

    result: str
    refusals: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        """Why the last patch did not land ("" when it did)."""
        return self.refusals[-1] if self.result in ("refused", "failed", "guard", "gone") else ""


@dataclass(frozen=True)
class Settled:
    """What a sync records of its key after the act: the object's status (None: none),
    what to remember, when to look again (None: on the next event or resync), and
    whether a Warning Event says the write failed (`failed`: the reason)."""

    status: ObjectConvergence | None
    memory: decisions.Memory
    requeue_after: float | None = None
    failed: str = ""


def settle(planned: decisions.Plan, result: str, reason: str = "") -> Settled:
    """What a sync records of its key once the act ended with `result` (`applied`, `none`,
    or why the last patch did not land: `gone`, `guard`, `refused`, `failed`; `reason`:
    the API's or the exception's words): the per-key bookkeeping of outcomes, pure
    (docs/inject.md, "Every outcome, classified"). A landed write resets the failures; a
    refusal (422 with causes) blocks the object at once; any other failure (an API error
    of any status, a timeout, an exception, a failed guard) is retried after
    `decide.FAILURE_FIRST` doubling, and blocks the object from the
    `decide.FAILURE_BOUND`-th in a row on, whatever the object is: a key always reaches a
    classification within the bound. A blocked namespaced object is excused by the
    report (`trust.convergence`); a cluster-scoped one holds and is named."""
    status, memory, write = planned.status, planned.memory, planned.write
    failures = min(memory.failures + 1, 64)
    delay = min(decisions.FAILURE_FIRST * 2 ** (failures - 1), decisions.REFUSAL_MAX)
    if write is None:
        if result in ("applied", "none"):
            landed = replace(memory, failures=0) if result == "applied" else memory
            return Settled(status, landed, planned.requeue_after)
        # A release or a clean-up did not land: tried again after a back-off.
        return Settled(status, replace(memory, failures=failures), delay)
    if result == "applied":
        return Settled(status, write.landed, planned.requeue_after)
    if result == "refused":  # the owner's to mend: blocked at once, sent again later
        refusal = replace(write.refusal, reason=reason)
        return Settled(
            replace(write.pending, blocked=reason),
            replace(memory, refusal=refusal, failures=0),
        )
    blocking = failures >= decisions.FAILURE_BOUND
    refusal = decisions.Refusal(*write.written, reason, planned.now + delay, failures, blocking)
    return Settled(
        replace(write.pending, blocked=reason if blocking else None),
        replace(memory, refusal=refusal, failures=failures),
        delay,
        reason if failures == decisions.FAILURE_BOUND else "",
    )


GUARD_FAILED = "the object changed while it was written (a test guard failed)"
MAX_WHY = 400
"""The most characters of an error a status, an Event or a log line keeps."""


def _not_applied(err: Exception) -> tuple[str, str]:
    """Why a patch did not land (`Sent.result`) and the words that say so."""
    if not isinstance(err, ApiError):
        return "failed", f"the write failed: {_why(err)}"
    if is_not_found(err) or is_conflict(err):  # deleted meanwhile, or a webhook's answer
        return "gone", f"the object was not found: {_why(err)}"
    if err.status == 422 and not _causes(err):
        return "guard", GUARD_FAILED
    if err.status == 422:
        return "refused", f"the API refused the write: {_why(err)}"
    return "failed", f"the write failed: {_why(err)}"


def _why(err: Exception) -> str:
    """An exception in one bounded line (its type, and its text)."""
    try:
        text = str(err)
    except Exception:  # a str() that raises says nothing more
        text = ""
    if isinstance(err, ApiError):
        return text[:MAX_WHY]
    return f"{type(err).__name__}: {text}"[:MAX_WHY]


def _causes(err: ApiError) -> bool:
    details = err.body.get("details")
    return isinstance(details, Mapping) and bool(details.get("causes"))


def _ref(target: Target) -> ObjectRef:
    kind = KINDS_BY_NAME[target.kind]
    return ObjectRef(kind.kind, target.namespace, target.name, target.uid, kind.api_version)


def _ref_of(key: str) -> ObjectRef:
    """The object a key names, without its uid (a key whose plan failed has no record)."""
    kind_name, _, rest = key.partition("/")
    kind = KINDS_BY_NAME.get(kind_name)
    namespace, _, name = rest.rpartition("/")
    version = kind.api_version if kind is not None else ""
    return ObjectRef(kind_name, namespace, name, "", version)


def _version(bundle: Mapping[str, Any]) -> tuple[str, str]:
    meta = bundle.get("metadata") or {}
    return str(meta.get("name", "")), str(meta.get("resourceVersion", ""))
