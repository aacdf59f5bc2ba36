"""The distribution loop (opt-in): acts on `distributor.decide.plan`, one namespace per
queue key, in kube-controller-manager's shape (its root-ca-cert-publisher syncs one
namespace at a time the same way).

Informers: every Namespace (name, uid, labels, terminating — a small record), the
configuration ConfigMaps in the injector's own namespace (label
`decide.CONFIG_LABEL=true`), the copies across the cluster (label
`decide.FROM_LABEL` exists), indexed by namespace, and the ClusterTrustBundles (to
create a copy already filled; keeping `ca.crt` current afterwards is the ConfigMap
target's work, `injector.controller`). Handlers only enqueue namespaces; a configuration
change enqueues every namespace.

Writes: a create (POST, never an apply: an existing ConfigMap of that name is never
overwritten; AlreadyExists → Warning Event on the configuration (at most one per
configuration per `NOT_OURS_RETRY`, every namespace logged and counted), and no second
POST for that ConfigMap for `NOT_OURS_RETRY` seconds unless the configuration changes;
a namespace whose ResourceQuota is full → counted, a Warning Event on the configuration at
most once an hour, no sync error, posted again at the next resync), a merge
patch of the copied annotations and a delete, both conditional on the copy's uid and
resourceVersion (a ConfigMap re-created by someone else under the same name, or a key
added to ours after the cache saw it, is not deleted). Only ConfigMaps that are ours
(`decide.Copy.ours`, under the installation's secret key, `distributor.key`) are
patched or deleted; without a key nothing is created, patched or deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from distributor import decide
from distributor.key import SecretKey
from distributor.metrics import DistributorMetrics
from kube.client import ApiError, Client, is_already_exists, is_conflict, is_not_found
from kube.controller import Cache, Loop, Requeue
from kube.events import ObjectRef, Recorder
from kube.factory import InformerFactory
from kube.types import JSON
from kube.workqueue import RateLimitingQueue
from trust.bundle import BundleError
from trust.clustertrustbundles import bundles_path
from trust.consumers import ANNOTATION, FIELD_MANAGER, bundle_record
from trust.selector import SelectorError, parse_selector_json, resolve_selector

log = logging.getLogger(__name__)

QUEUE_NAME = "trust_distributor"
NAMESPACE_INDEX = "namespace"
CONFIGURATION_KEY = "configuration:"
"""Queue keys are namespace names, or this prefix and a configuration's name (a
namespace name has no colon)."""
NOT_OURS_RETRY = 3600.0
"""Seconds before a create refused with AlreadyExists is posted again (each resync would
otherwise cost one POST per such namespace)."""


class NamespaceCache(Cache[decide.Namespace], Protocol):
    def get(self, key: str) -> decide.Namespace | None: ...

    def keys(self) -> list[str]: ...


class DistributionCache(Cache[decide.Distribution], Protocol):
    def list(self) -> list[decide.Distribution]: ...


class CopyCache(Cache[decide.Copy], Protocol):
    def by_index(self, index_name: str, value: str) -> list[decide.Copy]: ...

    def list(self) -> list[decide.Copy]: ...


class BundleCache(Cache[JSON], Protocol):
    def list(self) -> list[JSON]: ...


@dataclass(frozen=True)
class Caches:
    namespaces: NamespaceCache
    configs: DistributionCache
    copies: CopyCache
    bundles: BundleCache | None = None


def informers(factory: InformerFactory, *, namespace: str, ctb_version: str) -> Caches:
    """Every Namespace, the configurations in `namespace` (the injector's own), the
    copies across the cluster, indexed by namespace, and the ClusterTrustBundles."""
    return Caches(
        namespaces=factory.informer(
            "/api/v1/namespaces", name="namespaces-distributor", transform=_namespace
        ),
        configs=factory.informer(
            f"/api/v1/namespaces/{namespace}/configmaps",
            name="configmaps-distributions",
            label_selector=decide.CONFIG_SELECTOR,
            transform=_distribution,
        ),
        copies=factory.informer(
            "/api/v1/configmaps",
            name="configmaps-distributed",
            label_selector=decide.FROM_LABEL,
            transform=_copy,
            indexers={NAMESPACE_INDEX: _copy_namespace},
        ),
        bundles=factory.informer(
            bundles_path(ctb_version),
            name="clustertrustbundles-distributor",
            transform=bundle_record,
        ),
    )


class DistributionController:
    """Keeps one copy per (configuration, matching namespace); see the module docstring."""

    name = "trust-distributor"

    def __init__(
        self,
        client: Client,
        caches: Caches,
        recorder: Recorder,
        *,
        namespace: str,
        workers: int = 1,
        resync_period: float = 300.0,
        registry: CollectorRegistry | None = None,
        key: Callable[[], str] | None = None,
    ) -> None:
        """`key` gives the installation's key ("" for none); by default the Secret of
        `distributor.key` in `namespace`."""
        self.client = client
        self._key_source = key or SecretKey(client, namespace, ttl=resync_period).get
        self._key = ""
        self.recorder = recorder
        self.namespace = namespace
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.namespaces = caches.namespaces
        self.configs = caches.configs
        self.copies = caches.copies
        self.bundles = caches.bundles
        self.metrics = DistributorMetrics(registry, self._our_copies)
        # (namespace, ConfigMap name) → (namespace uid, configuration, monotonic time) of
        # a create refused with AlreadyExists: not posted again before NOT_OURS_RETRY
        # into that namespace (one made again under the name has another uid).
        self._refused: dict[tuple[str, str], tuple[str, decide.Distribution, float]] = {}
        # (Event reason, configuration name) → (configuration, monotonic time) of the
        # last such Event on it (`_warn_hourly`).
        self._warned: dict[tuple[str, str], tuple[decide.Distribution, float]] = {}
        self._refused_lock = threading.Lock()
        self.namespaces.add_handler(self._on_namespace, self._on_namespace_update, None)
        self.copies.add_handler(self._on_copy, self._on_copy_update, self._on_copy)
        self.configs.add_handler(self._on_config, self._on_config_update, self._on_config)
        self.loop = Loop(
            self.name,
            self.sync,
            self.queue,
            registry=registry,
            synced=(
                self.namespaces.has_synced,
                self.configs.has_synced,
                self.copies.has_synced,
                *((self.bundles.has_synced,) if self.bundles is not None else ()),
            ),
            workers=workers,
            resync_period=resync_period,
            resync_keys=self.every_namespace,
        )

    def _on_namespace(self, namespace: decide.Namespace) -> None:
        self.queue.add(namespace.name)

    def _on_namespace_update(self, old: decide.Namespace, new: decide.Namespace) -> None:
        if old != new:
            self.queue.add(new.name)

    def _on_copy(self, copy: decide.Copy) -> None:
        self.queue.add(copy.namespace)

    def _on_copy_update(self, old: decide.Copy, new: decide.Copy) -> None:
        if old != new:
            self.queue.add(new.namespace)

    def _on_config_update(self, old: decide.Distribution, new: decide.Distribution) -> None:
        if old != new:
            self._on_config(new)

    def _on_config(self, distribution: decide.Distribution) -> None:
        self.queue.add(CONFIGURATION_KEY + distribution.name)
        for name in self.every_namespace():
            self.queue.add(name)

    def _our_copies(self) -> float:
        installation = self._key  # the last key a sync used: no request on a scrape
        return float(sum(1 for copy in self.copies.list() if copy.ours(installation)))

    def every_namespace(self) -> list[str]:
        names = set(self.namespaces.keys())
        names.update(c.namespace for c in self.copies.list())
        return sorted(names)

    def has_synced(self) -> bool:
        return self.loop.has_synced()

    def run(self, stop: threading.Event) -> None:
        """Sync every namespace once (the informers' adds), then on events and resync."""
        self.loop.run(stop)

    def sync(self, key: str) -> Requeue | None:
        """Plan one namespace from the caches and act, or (a `CONFIGURATION_KEY` key) say
        why a configuration is unusable. Raises `ApiError` (the loop retries)."""
        if key.startswith(CONFIGURATION_KEY):
            self._check_configuration(key.removeprefix(CONFIGURATION_KEY))
            return None
        installation = self.installation_key()
        if not installation:
            return None  # distributor.key logged why
        namespace = self.namespaces.get(key)
        if namespace is None:
            self._forget_refusals(key)
        actions = decide.plan(
            namespace,
            self.configs.list(),
            self.copies.by_index(NAMESPACE_INDEX, key),
            key=installation,
        )
        stale = False  # a write conditional on what the cache saw met a newer copy
        for action in actions:
            match action:
                case decide.Create(distribution=d):
                    self._create(d, key, installation)
                case decide.NotOurs(distribution=d, existing=existing):
                    self._not_ours(
                        d,
                        key,
                        f"it bears {decide.FROM_LABEL}="
                        f"{existing.distributed_from!r} but not this installation's "
                        f"mark, or holds keys other than {decide.OUR_KEYS[0]}",
                    )
                case decide.Update(distribution=d, copy=copy):
                    stale |= self._patch(
                        copy.namespace, copy.name, decide.annotations_patch(d, copy)
                    )
                case decide.Delete(copy=copy):
                    stale |= self._delete(copy)
                case decide.Clash(distribution=d, winner=winner):
                    self.metrics.observe("clash")
                    self.recorder.warning(
                        self._ref(d),
                        decide.REASON_CLASH,
                        f"configuration {winner.name} also distributes ConfigMap "
                        f"{d.config_map_name} to namespace {key}; it wins (first by name)",
                        "Distribute",
                    )
        # Judged again once the informer has the newer copy (a change to fields the
        # record does not keep, e.g. the injector's release, enqueues nothing).
        return Requeue() if stale else None

    def _check_configuration(self, name: str) -> None:
        for distribution in self.configs.list():
            if distribution.name == name and distribution.problem is not None:
                self.recorder.warning(
                    self._ref(distribution),
                    decide.REASON_INVALID,
                    f"{distribution.problem}; existing copies are kept, none is created",
                    "Distribute",
                )

    def installation_key(self) -> str:
        """This installation's secret key (`distributor.key`)."""
        self._key = self._key_source()
        return self._key

    def _namespace_uid(self, name: str) -> str:
        found = self.namespaces.get(name)
        return found.uid if found is not None else ""

    def _forget_refusals(self, namespace: str) -> None:
        with self._refused_lock:
            for gone in [k for k in self._refused if k[0] == namespace]:
                del self._refused[gone]

    def _bundle(self, distribution: decide.Distribution) -> str | None:
        """The PEM a copy is created with (None: nothing resolves yet)."""
        if self.bundles is None:
            return None
        text = dict(distribution.annotations).get(ANNOTATION, "")
        try:
            selector = parse_selector_json(text)
            chosen = [b for b in self.bundles.list() if selector.matches(b)]
            return resolve_selector(chosen, selector, allow_missing=True) or None
        except (SelectorError, BundleError):
            return None

    def _recently_refused(self, distribution: decide.Distribution, namespace: str) -> bool:
        """Reported not ours for this configuration less than `NOT_OURS_RETRY` ago."""
        with self._refused_lock:
            seen = self._refused.get((namespace, distribution.config_map_name))
        return (
            seen is not None
            and seen[0] == self._namespace_uid(namespace)
            and seen[1] == distribution
            and time.monotonic() - seen[2] < NOT_OURS_RETRY
        )

    def _not_ours(self, distribution: decide.Distribution, namespace: str, why: str) -> None:
        if self._recently_refused(distribution, namespace):
            return
        with self._refused_lock:
            self._refused[(namespace, distribution.config_map_name)] = (
                self._namespace_uid(namespace),
                distribution,
                time.monotonic(),
            )
        self.metrics.observe("not_ours")
        what = (
            f"ConfigMap {namespace}/{distribution.config_map_name} exists and was not made by "
            f"this installation ({why}); left as it is"
        )
        log.info(what, extra={"configuration": distribution.name})
        # A lost key (or a name every team already uses) makes every namespace not ours
        # at once.
        self._warn_hourly(
            distribution,
            decide.REASON_NOT_OURS,
            f"{what}. Further namespaces within the hour are logged and counted in "
            f'trust_distributor_actions_total{{action="not_ours"}}, not reported again',
        )

    def _over_quota(self, distribution: decide.Distribution, namespace: str, err: ApiError) -> None:
        """The namespace's ResourceQuota has no room for the copy: the namespace's
        matter, not a distributor failure (no raise, so no sync error). Counted, logged,
        one Warning an hour on the configuration; the next resync posts again."""
        self.metrics.refuse("quota")
        what = (
            f"ConfigMap {namespace}/{distribution.config_map_name} not created: the "
            f"namespace's ResourceQuota has no room for it ({err}); created once it has"
        )
        log.warning(what, extra={"configuration": distribution.name})
        self._warn_hourly(
            distribution,
            decide.REASON_QUOTA,
            f"{what}. Further namespaces within the hour are logged and counted in "
            f'trust_distributor_refusals_total{{reason="quota"}}, not reported again',
        )

    def _warn_hourly(self, distribution: decide.Distribution, reason: str, note: str) -> None:
        """A Warning on the configuration, unless one of `reason` went to the same
        configuration less than `NOT_OURS_RETRY` ago: what many namespaces meet at once
        is one Event, not one per namespace per resync."""
        now = time.monotonic()
        with self._refused_lock:
            last = self._warned.get((reason, distribution.name))
            if last is not None and last[0] == distribution and now - last[1] < NOT_OURS_RETRY:
                return
            self._warned[(reason, distribution.name)] = (distribution, now)
        self.recorder.warning(self._ref(distribution), reason, note, "Distribute")

    def _create(self, distribution: decide.Distribution, namespace: str, installation: str) -> None:
        if self._recently_refused(distribution, namespace):
            return  # refused with AlreadyExists lately: no POST per resync
        body = decide.copy_body(distribution, namespace, installation, self._bundle(distribution))
        try:
            self.client.create(
                f"/api/v1/namespaces/{namespace}/configmaps",
                body,
                params={"fieldManager": FIELD_MANAGER},
            )
        except ApiError as err:
            if is_already_exists(err):
                self._not_ours(distribution, namespace, "an existing ConfigMap of that name")
                return
            if is_not_found(err) or _namespace_terminating(err):
                return  # the namespace went away meanwhile
            if _over_quota(err):
                self._over_quota(distribution, namespace, err)
                return
            raise
        self.metrics.observe("created")
        log.info(
            "distributed ConfigMap",
            extra={"object": f"{namespace}/{distribution.config_map_name}"},
        )

    def _patch(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        """Send the patch; True when its uid/resourceVersion guard failed (409)."""
        try:
            self.client.patch(
                f"/api/v1/namespaces/{namespace}/configmaps/{name}",
                patch,
                params={"fieldManager": FIELD_MANAGER},
                discard_response=True,
            )
        except ApiError as err:
            if not (is_not_found(err) or is_conflict(err) or err.status == 422):
                raise
            return is_conflict(err)
        self.metrics.observe("updated")
        return False

    def _delete(self, copy: decide.Copy) -> bool:
        """Delete the copy; True when its uid/resourceVersion precondition failed."""
        try:
            self.client.delete(
                f"/api/v1/namespaces/{copy.namespace}/configmaps/{copy.name}",
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "preconditions": {
                        "uid": copy.uid,
                        **(
                            {"resourceVersion": copy.resource_version}
                            if copy.resource_version
                            else {}
                        ),
                    },
                },
            )
        except ApiError as err:
            if not (is_not_found(err) or is_conflict(err)):
                raise
            return is_conflict(err)
        self.metrics.observe("deleted")
        log.info("removed distributed ConfigMap", extra={"object": copy.key})
        return False

    def _ref(self, distribution: decide.Distribution) -> ObjectRef:
        return ObjectRef("ConfigMap", self.namespace, distribution.name, distribution.uid)


def _namespace_terminating(err: ApiError) -> bool:
    return err.status == 403 and "being terminated" in str(err)


def _over_quota(err: ApiError) -> bool:
    """ResourceQuota admission's refusal: `… is forbidden: exceeded quota: <name>, …`."""
    return err.status == 403 and "exceeded quota" in str(err)


def _namespace(raw: Any) -> decide.Namespace:
    return decide.to_namespace(raw)


def _distribution(raw: Any) -> decide.Distribution:
    return decide.to_distribution(raw)


def _copy(raw: Any) -> decide.Copy:
    return decide.to_copy(raw)


def _copy_namespace(copy: decide.Copy) -> list[str]:
    return [copy.namespace]
