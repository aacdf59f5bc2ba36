"""The distribution loop (opt-in): acts on `distributor.decide.plan`, one namespace per
queue key, in kube-controller-manager's shape (its root-ca-cert-publisher syncs one
namespace at a time the same way).

Informers: every Namespace (name, labels, terminating — a small record), the
configuration ConfigMaps in the injector's own namespace (label
`distribute.CONFIG_LABEL=true`), and the copies across the cluster (label
`distribute.FROM_LABEL` exists), indexed by namespace. Nothing else: the copies' `ca.crt`
is the ConfigMap target's work (`injector.controller`), so this loop never reads a trust
bundle. Handlers only enqueue namespaces; a configuration change enqueues every
namespace.

Writes: a create (POST, never an apply: an existing ConfigMap of that name is never
overwritten; AlreadyExists → Warning Event on the configuration), a merge patch of the
copied annotations guarded by the copy's uid, and a delete with a uid precondition (a
ConfigMap re-created by someone else under the same name is not deleted).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from distributor import decide as distribute
from kube.client import ApiError, Client, is_already_exists, is_conflict, is_not_found
from kube.controller import Cache, Loop, Requeue
from kube.events import ObjectRef, Recorder
from kube.factory import InformerFactory
from kube.workqueue import RateLimitingQueue
from trust.consumers import FIELD_MANAGER

log = logging.getLogger(__name__)

QUEUE_NAME = "trust_distributor"
NAMESPACE_INDEX = "namespace"
CONFIGURATION_KEY = "configuration:"
"""Queue keys are namespace names, or this prefix and a configuration's name (a
namespace name has no colon)."""


class NamespaceCache(Cache[distribute.Namespace], Protocol):
    def get(self, key: str) -> distribute.Namespace | None: ...

    def keys(self) -> list[str]: ...


class DistributionCache(Cache[distribute.Distribution], Protocol):
    def list(self) -> list[distribute.Distribution]: ...


class CopyCache(Cache[distribute.Copy], Protocol):
    def by_index(self, index_name: str, value: str) -> list[distribute.Copy]: ...

    def list(self) -> list[distribute.Copy]: ...


@dataclass(frozen=True)
class Caches:
    namespaces: NamespaceCache
    configs: DistributionCache
    copies: CopyCache


def informers(factory: InformerFactory, *, namespace: str) -> Caches:
    """Every Namespace, the configurations in `namespace` (the injector's own), and the
    copies across the cluster, indexed by namespace."""
    return Caches(
        namespaces=factory.informer(
            "/api/v1/namespaces", name="namespaces-distributor", transform=_namespace
        ),
        configs=factory.informer(
            f"/api/v1/namespaces/{namespace}/configmaps",
            name="configmaps-distributions",
            label_selector=distribute.CONFIG_SELECTOR,
            transform=_distribution,
        ),
        copies=factory.informer(
            "/api/v1/configmaps",
            name="configmaps-distributed",
            label_selector=distribute.FROM_LABEL,
            transform=_copy,
            indexers={NAMESPACE_INDEX: _copy_namespace},
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
    ) -> None:
        # Intentional repeat: the constructor keeps its arguments as attributes, one line each.
        self.client = client
        self.recorder = recorder
        self.namespace = namespace
        self.queue: RateLimitingQueue[str] = RateLimitingQueue(QUEUE_NAME, registry)
        self.namespaces = caches.namespaces
        self.configs = caches.configs
        self.copies = caches.copies
        self.namespaces.add_handler(self._on_namespace, self._on_namespace_update, None)
        self.copies.add_handler(self._on_copy, self._on_copy_update, self._on_copy)
        self.configs.add_handler(self._on_config, self._on_config_update, self._on_config)
        self.loop = Loop(
            self.name,
            self.sync,
            self.queue,
            registry=registry,
            synced=(self.namespaces.has_synced, self.configs.has_synced, self.copies.has_synced),
            workers=workers,
            resync_period=resync_period,
            resync_keys=self.every_namespace,
        )

    def _on_namespace(self, namespace: distribute.Namespace) -> None:
        self.queue.add(namespace.name)

    def _on_namespace_update(self, old: distribute.Namespace, new: distribute.Namespace) -> None:
        if old != new:
            self.queue.add(new.name)

    def _on_copy(self, copy: distribute.Copy) -> None:
        self.queue.add(copy.namespace)

    def _on_copy_update(self, old: distribute.Copy, new: distribute.Copy) -> None:
        if old != new:
            self.queue.add(new.namespace)

    def _on_config_update(self, old: distribute.Distribution, new: distribute.Distribution) -> None:
        if old != new:
            self._on_config(new)

    def _on_config(self, distribution: distribute.Distribution) -> None:
        self.queue.add(CONFIGURATION_KEY + distribution.name)
        for name in self.every_namespace():
            self.queue.add(name)

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
        actions = distribute.plan(
            self.namespaces.get(key),
            self.configs.list(),
            self.copies.by_index(NAMESPACE_INDEX, key),
        )
        for action in actions:
            match action:
                case distribute.Create(distribution=d):
                    self._create(d, key)
                case distribute.Update(distribution=d, copy=copy):
                    self._patch(copy.namespace, copy.name, distribute.annotations_patch(d, copy))
                case distribute.Delete(copy=copy):
                    self._delete(copy)
                case distribute.Clash(distribution=d, winner=winner):
                    self.recorder.warning(
                        self._ref(d),
                        distribute.REASON_CLASH,
                        f"configuration {winner.name} also distributes ConfigMap "
                        f"{d.config_map_name} to namespace {key}; it wins (first by name)",
                        "Distribute",
                    )
        return None

    def _check_configuration(self, name: str) -> None:
        for distribution in self.configs.list():
            if distribution.name == name and distribution.problem is not None:
                self.recorder.warning(
                    self._ref(distribution),
                    distribute.REASON_INVALID,
                    f"{distribution.problem}; existing copies are kept, none is created",
                    "Distribute",
                )

    def _create(self, distribution: distribute.Distribution, namespace: str) -> None:
        try:
            self.client.create(
                f"/api/v1/namespaces/{namespace}/configmaps",
                distribute.copy_body(distribution, namespace),
                params={"fieldManager": FIELD_MANAGER},
            )
        except ApiError as err:
            if is_already_exists(err):
                self.recorder.warning(
                    self._ref(distribution),
                    distribute.REASON_NOT_OURS,
                    f"ConfigMap {namespace}/{distribution.config_map_name} exists and was not "
                    f"made by this distribution (no {distribute.FROM_LABEL} label); left as it is",
                    "Distribute",
                )
                return
            if is_not_found(err) or _namespace_terminating(err):
                return  # the namespace went away meanwhile
            raise
        log.info(
            "distributed ConfigMap",
            extra={"object": f"{namespace}/{distribution.config_map_name}"},
        )

    def _patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
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

    def _delete(self, copy: distribute.Copy) -> None:
        try:
            self.client.delete(
                f"/api/v1/namespaces/{copy.namespace}/configmaps/{copy.name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": copy.uid}},
            )
        except ApiError as err:
            if not (is_not_found(err) or is_conflict(err)):
                raise
            return
        log.info("removed distributed ConfigMap", extra={"object": copy.key})

    def _ref(self, distribution: distribute.Distribution) -> ObjectRef:
        return ObjectRef("ConfigMap", self.namespace, distribution.name, distribution.uid)


def _namespace_terminating(err: ApiError) -> bool:
    return err.status == 403 and "being terminated" in str(err)


def _namespace(raw: Any) -> distribute.Namespace:
    return distribute.to_namespace(raw)


def _distribution(raw: Any) -> distribute.Distribution:
    return distribute.to_distribution(raw)


def _copy(raw: Any) -> distribute.Copy:
    return distribute.to_copy(raw)


def _copy_namespace(copy: distribute.Copy) -> list[str]:
    return [copy.namespace]
