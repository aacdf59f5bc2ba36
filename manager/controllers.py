"""The controllers one process can run: a table of descriptors, one row per controller.

Kube-controller-manager's `NewControllerDescriptors`: each row names a controller, says
when it is enabled, and gives the constructor that builds it from one `BuildContext`.
`manager.app.build` walks the table in order and keeps what the enabled rows return;
nothing else in the manager knows a controller by name.

**Adding a controller** is one row in `DESCRIPTORS` (and its name in
`manager.options.KNOWN_CONTROLLERS`, plus `DEFAULT_CONTROLLERS` when `*` enables it — a
unit test holds the two lists together). Its constructor:

- takes everything from the context: the API client, the process's informer factory
  (`ctx.informers`: build the informers the controller reads with its module's
  `informers(factory, ...)` and pass the caches in its constructor — the process starts
  them before leadership), the one Event recorder (`ctx.recorder()`), API versions
  (`ctx.version(...)`, each resource discovered once per process), the signing material
  (`ctx.material`, loaded before any row runs when a signing controller is enabled),
  `ctx.warmers` for background loops that run whether or not this replica leads;
- returns a `kube.controller.Controller` (`name`, `has_synced`, `run`, `sync`) and starts
  nothing; the process runs its workers only while it leads;
- raises `StartupFailure` with one line naming what is missing; any other exception is
  reported as the API server's.

Rows run in table order, so a row may rely on the ones above it (the managed CA's comes
last: it listens to the same material source as the publisher and the signer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from kube.client import ApiError, Client
from kube.controller import Controller, Requeue
from kube.discovery import CERTIFICATES_GROUP, served_version
from kube.events import REPORTING_CONTROLLER, EventRecorder
from kube.factory import InformerFactory
from kube.leases import LeaseRef
from manager.options import SIGNING_CONTROLLERS, Options
from trust.bundle import unlinked_bundle_name
from trust.clustertrustbundles import CTB_VERSIONS
from trust.convergence import report_lease

if TYPE_CHECKING:
    from managedca.wiring import Settings as ManagedSettings
    from trust.material import MaterialSource

log = logging.getLogger(__name__)


class StartupFailure(Exception):
    """The process cannot start; `str()` is one line (`<file or thing>: <problem>`)."""


Gate = Callable[[threading.Event], bool]
"""Blocks until the controller may start its workers (True), or `stop` is set (False)."""


@dataclass
class BuildContext:
    """What every row's constructor gets (kube-controller-manager's ControllerContext)."""

    opts: Options
    client: Client
    registry: CollectorRegistry
    informers: InformerFactory
    identity: str
    material: MaterialSource | None = None  # when a signing controller runs
    # "bundle" / "signing" → wait until the material source serves that: a source that
    # loads at construction (files) has none; the managed CA's may start empty.
    material_gates: dict[str, Gate] = field(default_factory=dict)
    warmers: list[Callable[[threading.Event], None]] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)
    _recorder: EventRecorder | None = None
    _versions: dict[tuple[str, str, tuple[str, ...]], str | None] = field(default_factory=dict)
    # Discovery answered 429 / 5xx / nothing: asked again after the server's Retry-After
    # (else 1, 2, 4 … s) for up to this long, so a signer started while API Priority and
    # Fairness rejects its level's requests starts a little later instead of exiting.
    discovery_patience: float = 60.0
    sleep: Callable[[float], None] = time.sleep

    def recorder(self) -> EventRecorder:
        """The process's one Event recorder, made on first use and flushed at shutdown
        before the client closes."""
        if self._recorder is None:
            self._recorder = EventRecorder(self.client, REPORTING_CONTROLLER, self.identity)
            self.closers.insert(0, self._recorder.stop)
        return self._recorder

    def version(
        self, resource: str, preferred: Sequence[str], group: str = CERTIFICATES_GROUP
    ) -> str | None:
        """The first of `preferred` that serves `group`/`resource`, asked of discovery once
        per process; None when none does."""
        key = (group, resource, tuple(preferred))
        if key not in self._versions:
            waited, backoff = 0.0, 1.0
            while True:
                try:
                    found = served_version(self.client, group, resource, list(preferred))
                    break
                except ApiError as err:
                    delay = err.retry_after or backoff
                    if not err.transient or waited + delay > self.discovery_patience:
                        raise
                    log.info("discovery refused; asking again", extra={"error": str(err)})
                    self.sleep(delay)
                    waited, backoff = waited + delay, min(backoff * 2, 10.0)
            self._versions[key] = found
        return self._versions[key]

    def material_source(self) -> MaterialSource:
        """The process's material source. Only a signing controller's row asks, and the
        process loads it before any row runs when one of those is enabled."""
        assert self.material is not None, "material is loaded before a signing row runs"
        return self.material

    def ctb_version(self, why: str) -> str:
        """The served ClusterTrustBundle version; `why` says who needs it if none is."""
        version = self.version("clustertrustbundles", CTB_VERSIONS)
        if version is None:
            raise StartupFailure(
                f"API server: certificates.k8s.io serves no clustertrustbundles ({why})"
            )
        return version

    def after_material(self, controller: Controller, need: str) -> Controller:
        """`controller`, its workers held back until the material serves `need`."""
        gate = self.material_gates.get(need)
        return controller if gate is None else Gated(controller, gate)


class Gated:
    """A controller whose workers start only once `gate(stop)` returns True; its informers
    (the process's) warm up meanwhile."""

    def __init__(self, controller: Controller, gate: Gate) -> None:
        self.controller = controller
        self._gate = gate

    @property
    def name(self) -> str:
        return self.controller.name

    def has_synced(self) -> bool:
        return self.controller.has_synced()

    def run(self, stop: threading.Event) -> None:
        if self._gate(stop):
            self.controller.run(stop)

    def sync(self, key: str) -> Requeue | None:
        return self.controller.sync(key)


@dataclass(frozen=True)
class ControllerDescriptor:
    name: str
    build: Callable[[BuildContext], Controller]
    enabled: Callable[[Options], bool]


def _named(name: str) -> Callable[[Options], bool]:
    return lambda opts: name in opts.controllers


# the rows -------------------------------------------------------------------------------


def _publisher(ctx: BuildContext) -> Controller:
    """The ClusterTrustBundle publisher: needs the trust bundle only."""
    from publisher import controller as publishing

    opts = ctx.opts
    version = ctx.ctb_version("enable the ClusterTrustBundle feature and API")
    material = ctx.material_source()
    publisher = publishing.PublisherController(
        ctx.client,
        publishing.informers(ctx.informers, signer_name=opts.signer_name, ctb_version=version),
        material.trust_bundle,
        signer_name=opts.signer_name,
        ctb_version=version,
        registry=ctx.registry,
        # Marks the bundles this process publishes (its Lease identity: unique per process).
        publisher_id=ctx.identity,
        publish_unlinked=opts.publish_unlinked_bundle,
    )
    material.add_bundle_listener(publisher.trigger)
    log.info("publisher configured", extra={"clustertrustbundles": version})
    return ctx.after_material(publisher, "bundle")


def _signer(ctx: BuildContext) -> Controller:
    """The PodCertificateRequest signer: needs the key, the certificate and the bundle."""
    from signer import controller as signing

    opts = ctx.opts
    version = ctx.version("podcertificaterequests", opts.pcr_versions_preferred)
    if version is None:
        raise StartupFailure(
            f"API server: certificates.k8s.io serves no podcertificaterequests in "
            f"{'/'.join(opts.pcr_versions_preferred)} (--pcr-api-version="
            f"{opts.pcr_api_version})"
        )
    signer = signing.SignerController(
        ctx.client,
        signing.informers(ctx.informers, signer_name=opts.signer_name, pcr_version=version),
        ctx.material_source(),
        signer_name=opts.signer_name,
        domain=opts.cluster_service_domain,
        pcr_version=version,
        workers=opts.concurrent_syncs,
        registry=ctx.registry,
        recorder=ctx.recorder(),
        max_lifetime_seconds=int(opts.max_certificate_lifetime),
        waiting_resync_period=opts.waiting_resync_period,
        pod_identity_subject=opts.pod_identity_subject,
        cluster_ip_sans=opts.cluster_ip_sans,
    )
    log.info("signer configured", extra={"podcertificaterequests": version})
    return ctx.after_material(signer, "signing")


def convergence_report(opts: Options) -> LeaseRef:
    """Where this process's injector writes its convergence report, and where a managed
    CA with the same flags reads it (`managed_ca_settings`): the one rule."""
    return report_lease(opts.leader_elect_resource_namespace, opts.managed_ca_injector_report)


def _injector(ctx: BuildContext) -> Controller:
    """The opt-in caBundle injector: needs no signing material."""
    from injector import controller as injecting

    version = ctx.ctb_version("the injector resolves caBundles from them")
    opts = ctx.opts
    injector = injecting.InjectorController(
        ctx.client,
        injecting.informers(ctx.informers, ctb_version=version),
        ctx.recorder(),
        registry=ctx.registry,
        # The convergence report the managed-CA swap gates on, where the managed CA
        # reads it (the one rule: trust.convergence.report_lease).
        report=convergence_report(opts),
        identity=ctx.identity,
    )
    log.info("injector configured", extra={"clustertrustbundles": version})
    return injector


def _trust_distributor(ctx: BuildContext) -> Controller:
    """The opt-in trust ConfigMap distribution (docs/trust-consumers.md): its
    configurations live in the process's own namespace (the Lease's)."""
    from distributor import controller as distributor

    namespace = ctx.opts.leader_elect_resource_namespace
    version = ctx.ctb_version("the distributor fills the copies it creates from them")
    controller = distributor.DistributionController(
        ctx.client,
        distributor.informers(ctx.informers, namespace=namespace, ctb_version=version),
        ctx.recorder(),
        namespace=namespace,
        registry=ctx.registry,
    )
    log.info("trust distributor configured", extra={"namespace": namespace})
    return controller


def managed_ca_settings(opts: Options) -> ManagedSettings:
    """The managed CA's settings, from the process's flags."""
    from managedca.decide import Config
    from managedca.wiring import Settings

    return Settings(
        namespace=opts.leader_elect_resource_namespace,
        secret_name=opts.managed_ca_secret_name,
        adopt_secret_name=opts.managed_ca_adopt_secret_name,
        signer_name=opts.signer_name,
        key_type=opts.managed_ca_key_type,
        domain=opts.cluster_service_domain,
        config=Config(
            ca_lifetime=timedelta(seconds=opts.managed_ca_lifetime),
            rotate_at=opts.managed_ca_rotate_at,
            propagation_delay=timedelta(seconds=opts.managed_ca_propagation_delay),
            max_leaf_lifetime=timedelta(seconds=opts.max_certificate_lifetime),
            retire_margin=timedelta(seconds=opts.managed_ca_retire_margin),
            keep_previous=opts.managed_ca_keep_previous,
            # An injector in this process (--controllers=*,injector): its report is
            # expected, so a missing one is a visible wait, never a skipped gate.
            wait_for_injector=(
                "true"
                if opts.managed_ca_wait_for_injector == "auto" and "injector" in opts.controllers
                else opts.managed_ca_wait_for_injector
            ),
        ),
        injector_report=opts.managed_ca_injector_report,
        unlinked_bundle=(
            unlinked_bundle_name(opts.signer_name) if opts.publish_unlinked_bundle else None
        ),
    )


def _managed_ca(ctx: BuildContext) -> Controller:
    """The managed CA (docs/managed-ca.md): its controller, and this replica's report of
    what it has loaded (a warmer: every replica reports, leader or not)."""
    from managedca.material import ApiMaterialSource
    from managedca.wiring import adopter, wire

    assert isinstance(ctx.material, ApiMaterialSource), "managed mode builds an ApiMaterialSource"
    version = ctx.ctb_version("the managed CA is published as one")
    controller, reporter = wire(
        managed_ca_settings(ctx.opts),
        ctx.client,
        ctx.registry,
        ctx.identity,
        ctx.material,
        version,
        ctx.recorder(),
    )
    ctx.warmers.append(reporter.run)
    ctx.warmers.append(adopter(controller, ctx.material))
    log.info("managed CA configured", extra={"secret": ctx.opts.managed_ca_secret_name})
    if "publisher" not in ctx.opts.controllers:
        # Allowed (a split Deployment may run the publisher elsewhere, on the same Lease
        # or not), but on its own it can never confirm or rotate a CA: say so loudly.
        log.warning(
            "managed CA without the publisher in this process: nothing publishes the CA, so "
            "no CA is confirmed and no rotation can complete unless a process running the "
            "publisher (the default --controllers) shares this CA Secret; note that "
            f"--controllers also chose the leader Lease {ctx.opts.leader_elect_resource_name!r}",
            extra={"controllers": ",".join(sorted(ctx.opts.controllers))},
        )
    return controller


DESCRIPTORS: tuple[ControllerDescriptor, ...] = (
    ControllerDescriptor("publisher", _publisher, _named("publisher")),
    ControllerDescriptor("signer", _signer, _named("signer")),
    ControllerDescriptor("injector", _injector, _named("injector")),
    ControllerDescriptor("trust-distributor", _trust_distributor, _named("trust-distributor")),
    # `--ca-mode=managed`, not `--controllers`: with a signing controller, the CA is ours.
    ControllerDescriptor(
        "managed-ca",
        _managed_ca,
        lambda opts: opts.managed_ca and bool(opts.controllers & SIGNING_CONTROLLERS),
    ),
)
